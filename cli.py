"""The ``stepsim`` command line: parse the arguments (:mod:`stepsim.cli_args`), call
:mod:`stepsim.api`, render what it returns. The only place that turns domain errors
(:class:`simcore.errors.StepsimError`) into one line on stderr and exit code 2.

Verbs: calibrate, simulate, whatif, sweep, ceiling, plan, validate, ledger, diagnose, fixes,
report, demo.
"""
from __future__ import annotations

import gc
import os
import re
import sys
from pathlib import Path

# Importing the API loads most of stepsim and its libraries (numpy, pydantic, SimPy): objects
# that live as long as the process and make no garbage. The collector is paused while they
# load and what they made is then frozen (``gc.freeze``), so no later collection passes over
# it: a full collection during the imports and a large young one after them were about 30 ms
# of a sweep's main process before its pool starts (speed20, docs/measurements.md).
_COLLECTING = gc.isenabled()
gc.disable()
from stepsim import api  # noqa: E402
from stepsim.cli_args import parser  # noqa: E402
from stepsim.cli_files import reader_gone, refuse_overwriting_inputs  # noqa: E402
from stepsim.simcore.errors import (NotApplicable, SimulationError, StepsimError,  # noqa: E402
                                    shown)
from stepsim.simcore.gcpause import gc_paused  # noqa: E402
from stepsim.simcore.units import us_to_ms  # noqa: E402

gc.freeze()
if _COLLECTING:
    gc.enable()


def _n(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fmt_ms(us: float) -> str:
    return f"{us_to_ms(us):.2f}"


# ---------------------------------------------------------------- calibrate -----------------
def _stderr(line: str) -> None:
    """One line on stderr after whatever stdout holds so far: stdout into a pipe or a file is
    block-buffered and stderr is not, so without the flush a log of both shows a warning
    printed after a line (``... (see the warnings above)``) before it, or inside it."""
    sys.stdout.flush()
    print(line, file=sys.stderr, flush=True)


LONG_WORD = 200
"""Characters past which one word of an error line (no spaces or quotes: a value echoed back,
a path) is cut to its first and last :data:`KEEP_ENDS` and its length."""
KEEP_ENDS = 60


def _error_line(text: str) -> str:
    """``stepsim: error: text``, each word longer than :data:`LONG_WORD` cut to its ends and
    its length: a 5,000-digit ``--set``, ``--scale`` or ``--fix`` value was echoed whole, up to
    10 kB in a one-line error (break14, 2026-12-06)."""
    return "stepsim: error: " + re.sub(
        rf"[^\s'\"]{{{LONG_WORD + 1},}}",   # (a quoted value without its quotes)
        lambda m: f"{m[0][:KEEP_ENDS]}…{m[0][-KEEP_ENDS:]} ({len(m[0]):,} characters)", text)


def _warn(warnings, verbose: bool = False, step_us: float | None = None) -> None:
    """The warnings on stderr: before the verb's result (its table), never after it; a refused
    input prints its one line and no warning. Each is headed by its summary, the noted (no
    effect on the step) last, one line each unless ``verbose``
    (:mod:`stepsim.warning_order`; ``warnings``: texts, or its ranked warnings)."""
    from stepsim.warning_order import Ranked, lines, ranked

    ws = list(warnings)
    rs = ws if all(isinstance(w, Ranked) for w in ws) else ranked(ws)
    for line in lines(rs, step_us, verbose):
        _stderr(line)


def _counted(model) -> str:
    """What ``calibrated N steps`` counted (:mod:`calibration.steps`' step time): each step from
    its start to the next one's; where a multi-rank CPU calibration left the last marker's step
    out (it has no next start), how many markers there were. A user's ``active=8`` capture read
    "calibrated 7 steps" with nothing to say why (fresh8, 2026-12-07)."""
    marks = model.meta.notes.get("step_markers")
    if isinstance(marks, int) and marks > 0:
        return (f"(each from its step marker's start to the next one's: {marks} markers a rank, "
                "the last with no next start left out)")
    return "(each from its step marker's start to the next one's)"


def cmd_calibrate(args) -> int:
    from stepsim.models.host_speed import CAPTURE_SPEED

    r = api.calibrate(args.trace, output=args.output, sidecar=args.sidecar,
                      step_regex=args.step_regex, replicates=args.replicate or (),
                      steps=args.steps)
    _warn(r.ranked or r.warnings, args.verbose, r.measured_mean_us)
    print(f"calibrated {_n(len(r.measured_step_us), 'step')} {_counted(r.model)}: measured "
          "step mean "
          f"{_fmt_ms(r.measured_mean_us)} ms, median {_fmt_ms(r.measured_median_us)} ms -> "
          f"{shown(args.output)}")
    w = r.window
    if w is not None:
        rest = len(w.steps) - int(w.compared.sum())
        others = (f"; {rest} incomplete or differently shaped, replayed with the representative "
                  "step's durations and not compared" if rest else "")
        print(f"replay of the captured window ({_n(len(w.steps), 'step')}, each with its own "
              f"durations, from the captured device backlog{others}): median "
              f"{_fmt_ms(w.replayed_median_us)} ms ({100 * w.median_error:+.1f} % vs measured "
              f"over {_n(int(w.compared.sum()), 'step')}), largest one-step error "
              f"{100 * w.max_step_error:.1f} %")
    elif len(r.model.ranks) > 1:
        print("(several ranks: no window replay; the steady state is compared)")
    what = ("steady state of the representative step (what predictions use)"
            if r.model.replay is not None else "replay of the calibrated baseline")
    what += f" {CAPTURE_SPEED}"
    print(f"{what}: mean {_fmt_ms(r.steady_mean_us)} ms ({100 * r.steady_mean_error:+.1f} % vs "
          f"measured), median {_fmt_ms(r.steady_median_us)} ms "
          f"({100 * r.steady_median_error:+.1f} % vs measured)")
    if r.steady_warning:
        _warn([r.steady_warning])
    return 0


# ---------------------------------------------------------------- simulate ------------------
def cmd_simulate(args) -> int:
    """``simulate`` prints the steady-state summary (critical path and lanes); ``--window``
    the captured window replayed, each step against its measurement."""
    import orjson

    from stepsim.report.tables import print_summary, print_window

    r = api.simulate(args.model, steps=args.steps, warmup=args.warmup, seed=args.seed,
                     window=args.window, chrome_trace=args.chrome_trace, plot=args.plot,
                     measured=args.measured, plot_steps=args.plot_steps,
                     queue_plot=args.queue_plot)
    if not args.window:
        _warn(r.warnings, args.verbose)   # what the model's own capture cannot show
        print_summary(r.model, r.summary, as_json=args.json, count=r.count)
    elif args.json:
        sys.stdout.write(orjson.dumps(r.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_window(r.replay)
    return 0


# ---------------------------------------------------------------- demo ----------------------
def cmd_demo(args) -> int:
    from stepsim.demo.run import run_demo

    if args.ddp:
        from stepsim.demo.ddp import run_ddp_demo

        if args.repeats is not None:
            raise StepsimError("--repeats is the plain demo's (re-measured runs per num_workers "
                               "setting); the DDP demo takes its own rounds")
        if args.probe is not None:    # (it was ignored without a word)
            raise StepsimError("--probe is the plain demo's (a probe at a second num_workers); "
                               "the DDP demo's ranks run no DataLoader")

        return run_ddp_demo(Path(args.out), seed=args.seed)
    return run_demo(Path(args.out), quick=args.quick, seed=args.seed, probe=args.probe,
                    repeats=args.repeats)


# ---------------------------------------------------------------- diagnose ------------------
def cmd_diagnose(args) -> int:
    from stepsim.report.diagnose import print_diagnosis

    r = api.diagnose(args.input, step_regex=args.step_regex, peak=args.peak, plot=args.plot,
                     draws=args.draws, **_sim_kw(args))
    _warn(r.warnings, args.verbose)
    print_diagnosis(r.diagnosis, as_json=args.json)
    return 0


# ---------------------------------------------------------------- planner -------------------
def _sim_kw(args) -> dict:
    """The simulation keywords; a ``--jobs`` past the usable CPUs is capped there, with a
    warning (the API caps it too)."""
    from stepsim.scenarios.parallel import capped_jobs

    _warn(filter(None, [capped_jobs(args.jobs)[1]]))
    return {"steps": args.steps, "warmup": args.warmup, "seed": args.seed, "jobs": args.jobs}


def _progress(args) -> bool:
    """Whether a verb shows progress on stderr (:mod:`report.progress`): not with ``--json``
    nor ``--quiet``."""
    return not (args.json or args.quiet)


def cmd_whatif(args) -> int:
    from stepsim.report.planner import print_whatif

    r = api.whatif(args.model, args.ops, draws=args.draws, save_model=args.save_model,
                   compare=args.compare, plot_steps=args.plot_steps, progress=_progress(args),
                   width_sources=args.width_sources, **_sim_kw(args))
    _warn(r.warnings, args.verbose)
    print_whatif(r.baseline, r.scenario, as_json=args.json)
    return 0


@gc_paused   # its process imports, reads a model and gathers the points: no garbage worth a pass
def cmd_sweep(args) -> int:
    from stepsim.report.planner import print_sweep

    r = api.sweep(args.model, args.axes, args.ops, draws=args.draws, knee_tol=args.knee_tol,
                  plot=args.plot, measured=args.measured, ledger=args.ledger,
                  progress=_progress(args),
                  **_sim_kw(args))
    _warn(r.warnings, args.verbose)
    print_sweep(r.result, as_json=args.json)
    return 0


def cmd_ceiling(args) -> int:
    from stepsim.report.ceilings import print_ceilings

    r = api.ceiling(args.model, args.ops, plot=args.plot, progress=_progress(args),
                    **_sim_kw(args))
    _warn(r.warnings, args.verbose)   # what the ceilings cannot show, before them
    print_ceilings(r.report, as_json=args.json)
    return 0


def cmd_plan(args) -> int:
    from stepsim.report.planner import print_plan

    r = api.plan(args.model, args.ops, draws=args.draws, allow=args.allow,
                 fix_arg=args.fix_arg, min_gain=args.min_gain, max_moves=args.max_moves,
                 save_scenario=args.save_scenario, plot=args.plot, progress=_progress(args),
                 **_sim_kw(args))
    _warn(r.warnings, args.verbose)     # before the table: what the plan's numbers cannot show
    print_plan(r.plan, as_json=args.json)
    return 0


def cmd_validate(args) -> int:
    from stepsim.report.planner import print_validation

    r = api.validate(args.model, args.traces, args.ops, draws=args.draws, ledger=args.ledger,
                     label=args.label, progress=_progress(args),
                     width_sources=args.width_sources, **_sim_kw(args))
    _warn(r.warnings, args.verbose)
    print_validation([r.record], as_json=args.json, scope=True, per_run=r.runs,
                     startup_said=r.startup_said)
    if not args.json and len(r.runs) > 1:      # a pooled row hides a bad run: each one's line
        for k, run in enumerate(r.runs, 1):
            held = "" if run["held"] is None else f", threads held {100 * run['held']:.0f} %"
            print(f"  run {k} ({shown(run['trace'])}): {_n(run['steps'], 'step')}, mean "
                  f"{_fmt_ms(run['mean_us'])} ms, median {_fmt_ms(run['median_us'])} ms{held}")
    if not args.json and r.prediction.host_speed:
        print(f"predicted {r.prediction.host_speed}")
    return 0


def cmd_ledger(args) -> int:
    from stepsim.report.planner import print_ledger
    from stepsim.scenarios.validate import summarize_ledger
    from stepsim.views import ledger_records

    skipped: list[str] = []
    records = ledger_records(args.file, skipped)
    _warn(skipped)
    print_ledger(records, summarize_ledger(records), as_json=args.json)
    return 0


def cmd_report(args) -> int:
    d = api.report(args.model, args.ops, output=args.output, ledger=args.ledger,
                   measured=args.measured, draws=args.draws, plot_steps=args.plot_steps,
                   with_plan=not args.no_plan, progress=_progress(args), **_sim_kw(args))
    _warn(d.warnings, args.verbose)
    print(f"report: baseline {_fmt_ms(d.baseline.mean_step_us)} ms, "
          f"{_n(len(d.whatifs), 'what-if')}, {_n(len(d.ledger), 'validation record')} -> "
          f"{shown(args.output)}")
    return 0


def cmd_fixes(args) -> int:
    from stepsim.report.tables import print_fixes

    print_fixes(as_json=args.json)
    return 0


COMMANDS = {"calibrate": cmd_calibrate, "simulate": cmd_simulate, "demo": cmd_demo,
            "whatif": cmd_whatif, "sweep": cmd_sweep, "ceiling": cmd_ceiling, "plan": cmd_plan,
            "report": cmd_report, "validate": cmd_validate, "ledger": cmd_ledger,
            "diagnose": cmd_diagnose, "fixes": cmd_fixes}
"""Each verb's command (the verbs :func:`stepsim.cli_args.parser` parses)."""


_DRAWN = ("plot", "compare", "queue_plot", "chrome_trace")


def _say_written(args) -> None:
    """``wrote FILE`` on stderr for each figure or trace a verb wrote (stdout keeps --json)."""
    for name in _DRAWN:
        path = getattr(args, name, None)
        if path and Path(path).is_file():
            _stderr(f"wrote {shown(path)}")


def _import_params() -> None:
    """Import the model's parameter classes (and pydantic) from the shallow stack of
    :func:`main`, before a verb's own imports: every verb reads a model. CPython 3.11 keeps
    its frames in 16 kB chunks and frees a chunk as soon as the frame that opened it
    returns, so a loop of short calls that crosses a chunk's end maps and unmaps one every
    call. ``pydantic_core.core_schema`` builds some 200 TypedDicts; imported at the end of
    a sweep's chain of nested imports (the report, the scenarios, the metrics, the engine,
    the loader, the parameters, pydantic), ``python -m stepsim sweep`` crossed that end
    there 6,666 times: 40-50 ms of its main process before the pool starts (speed23,
    docs/measurements.md). Imported from here, the module runs about 43 frames deep, not
    101 (a sweep then crosses a chunk's end 269 times). As the API's modules above: imported
    with the collector paused, then frozen (once: ``main(argv)`` called again in one
    process, as the tests do, freezes nothing more)."""
    if "stepsim.models.params" in sys.modules:
        return
    collecting = gc.isenabled()
    gc.disable()
    import stepsim.models.params  # noqa: F401

    gc.freeze()
    if collecting:
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    from stepsim.report.streams import streams_refused   # here: `import stepsim.cli` loads no report

    if (why := streams_refused()) is not None:   # (before argparse, which writes to them)
        print(_error_line(why), file=sys.stderr, flush=True)
        return 2
    args = parser().parse_args(argv)
    if args.verb == "calibrate" and args.steps is None:   # (--steps reads a stream)
        from stepsim.simcore import read_ahead

        read_ahead.start(args.trace)   # decompressed beside the imports below
    _import_params()
    try:
        return _run(args, argv)
    finally:
        if args.verb == "calibrate":
            from stepsim.simcore import read_ahead

            read_ahead.forget()   # (a verb that ended before its read keeps no bytes)


def _run(args, argv) -> int:
    """The verb of the parsed ``args``, its errors made exit codes (see :func:`main`)."""
    try:
        refuse_overwriting_inputs(args)
        rc = COMMANDS[args.verb](args)
        sys.stdout.flush()
        if reader_gone():   # all written, then left unread (`--json | head -c 10`): as one
            raise BrokenPipeError   # write more after it left would be (the text's tables)
        _say_written(args)
        if argv is None:   # the program (`stepsim`, `python -m stepsim`), which ends here:
            gc.freeze()    # its last collection, at exit, need not pass over every object
        return rc
    except BrokenPipeError:   # `stepsim ledger L | head -1`: end as a Unix tool, quietly, 141
        try:   # (141 = 128 + SIGPIPE); stdout to /dev/null: Python's own last flush is quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):   # a stdout without a descriptor (io.UnsupportedOperation)
            pass
        return 141
    except (SimulationError, NotApplicable) as e:
        model = getattr(args, "model", None)
        text = str(e)
        if model and not text.startswith(shown(model)):
            text = f"{shown(model)}: {text}"
        _stderr(_error_line(text))
        return 2
    except StepsimError as e:
        _stderr(_error_line(str(e)))
        return 2
    except OSError as e:  # an output folder that cannot be made or written, a full disk
        where = f"{shown(e.filename)}: " if e.filename else ""
        _stderr(_error_line(f"{where}{e.strerror or e}"))
        return 2
    except KeyboardInterrupt:
        print("stepsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
