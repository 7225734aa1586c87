"""The ``stepsim`` command line: parse the arguments, call :mod:`stepsim.api`, render what it
returns. The only place that turns domain errors (:class:`simcore.errors.StepsimError`) into
one line on stderr and exit code 2.

Verbs: calibrate, simulate, whatif, sweep, ceiling, plan, validate, ledger, diagnose, fixes,
report, demo.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stepsim import api
from stepsim.api import DEFAULT_STEPS, DEFAULT_WARMUP
from stepsim.simcore.errors import SimulationError, StepsimError, shown
from stepsim.simcore.units import us_to_ms


MAX_STEPS, MAX_DRAWS, MAX_JOBS = 100_000, 10_000, 1024
"""Most simulated (or warm-up, or drawn) steps, Monte Carlo draws and processes a command
takes: far beyond any useful run, and small enough that a typo is an error, not a run that
never ends."""


class _Parser(argparse.ArgumentParser):
    """argparse with an error of one line and a hint to ``--help``, not its usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _count(lo: int, hi: int | None = None):
    """argparse type: an integer ≥ ``lo`` (and ≤ ``hi``)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{v} is below {lo}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"{v} is above {hi}, the most this takes")
        return v
    return parse


def _fraction(text: str) -> float:
    """argparse type: a finite number ≥ 0."""
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0")
    return v


def _path(text: str) -> str:
    """argparse type: a non-empty path."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _out_file(text: str) -> str:
    """argparse type: an output file name (not empty, not ending with a path separator)."""
    text = _path(text)
    if text.endswith(("/", os.sep)):
        raise argparse.ArgumentTypeError(f"{text!r} names a folder; give a file name")
    return text


PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _plot_path(text: str) -> str:
    """argparse type: a file name ending in a plot format matplotlib writes."""
    text = _out_file(text)
    if Path(text).suffix.lower() not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: a plot is written as one of "
                                         f"{', '.join(PLOT_FORMATS)}")
    return text


def _n(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fmt_ms(us: float) -> str:
    return f"{us_to_ms(us):.2f}"


# ---------------------------------------------------------------- calibrate -----------------
def _warn(warnings) -> None:
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)


def cmd_calibrate(args) -> int:
    r = api.calibrate(args.trace, output=args.output, sidecar=args.sidecar,
                      step_regex=args.step_regex)
    _warn(r.warnings)
    print(f"calibrated {_n(len(r.measured_step_us), 'step')}: measured step mean "
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
        print_summary(r.model, r.summary, as_json=args.json)
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

        return run_ddp_demo(Path(args.out), seed=args.seed)
    return run_demo(Path(args.out), quick=args.quick, seed=args.seed, probe=args.probe)


# ---------------------------------------------------------------- diagnose ------------------
def cmd_diagnose(args) -> int:
    from stepsim.report.diagnose import print_diagnosis

    r = api.diagnose(args.input, step_regex=args.step_regex, peak=args.peak, plot=args.plot,
                     draws=args.draws, **_sim_kw(args))
    _warn(r.warnings)
    print_diagnosis(r.diagnosis, as_json=args.json)
    return 0


# ---------------------------------------------------------------- planner -------------------
class _OpAction(argparse.Action):
    """Collects --scenario/--set/--scale/--remove/--fix into ``args.ops`` in command-line
    order, as ``(kind, value)`` (what :func:`stepsim.api.operations` reads)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, "ops", [*(getattr(namespace, "ops", None) or []), (self.const, values)])


def _sim_kw(args) -> dict:
    return {"steps": args.steps, "warmup": args.warmup, "seed": args.seed, "jobs": args.jobs}


def cmd_whatif(args) -> int:
    from stepsim.report.planner import print_whatif

    r = api.whatif(args.model, args.ops, draws=args.draws, save_model=args.save_model,
                   compare=args.compare, plot_steps=args.plot_steps, progress=not args.json,
                   **_sim_kw(args))
    _warn(r.warnings)
    print_whatif(r.baseline, r.scenario, as_json=args.json)
    return 0


def cmd_sweep(args) -> int:
    from stepsim.report.planner import print_sweep

    r = api.sweep(args.model, args.axes, args.ops, draws=args.draws, knee_tol=args.knee_tol,
                  plot=args.plot, measured=args.measured, ledger=args.ledger,
                  progress=not args.json,
                  **_sim_kw(args))
    _warn(r.warnings)
    print_sweep(r.result, as_json=args.json)
    return 0


def cmd_ceiling(args) -> int:
    from stepsim.report.planner import print_ceilings

    r = api.ceiling(args.model, args.ops, plot=args.plot, progress=not args.json,
                    **_sim_kw(args))
    print_ceilings(r.report, as_json=args.json)
    return 0


def cmd_plan(args) -> int:
    from stepsim.report.planner import print_plan

    r = api.plan(args.model, args.ops, draws=args.draws, allow=args.allow,
                 fix_arg=args.fix_arg, min_gain=args.min_gain, max_moves=args.max_moves,
                 save_scenario=args.save_scenario, plot=args.plot, progress=not args.json,
                 **_sim_kw(args))
    print_plan(r.plan, as_json=args.json)
    _warn(r.warnings)
    return 0


def cmd_validate(args) -> int:
    from stepsim.report.planner import print_validation

    r = api.validate(args.model, args.traces, args.ops, draws=args.draws, ledger=args.ledger,
                     label=args.label, progress=not args.json, **_sim_kw(args))
    _warn(r.warnings)
    print_validation([r.record], as_json=args.json)
    return 0


def cmd_ledger(args) -> int:
    from stepsim.report.planner import print_ledger
    from stepsim.scenarios.validate import summarize_ledger
    from stepsim.views import ledger_records

    records = ledger_records(args.file)
    print_ledger(records, summarize_ledger(records), as_json=args.json)
    return 0


def cmd_report(args) -> int:
    d = api.report(args.model, args.ops, output=args.output, ledger=args.ledger,
                   measured=args.measured, draws=args.draws, plot_steps=args.plot_steps,
                   with_plan=not args.no_plan, progress=sys.stderr.isatty(), **_sim_kw(args))
    _warn(dict.fromkeys(w for x in d.whatifs for w in x.caveats))
    print(f"report: baseline {_fmt_ms(d.baseline.mean_step_us)} ms, "
          f"{_n(len(d.whatifs), 'what-if')}, {_n(len(d.ledger), 'validation record')} -> "
          f"{shown(args.output)}")
    return 0


def cmd_fixes(args) -> int:
    from stepsim.report.tables import print_fixes

    print_fixes(as_json=args.json)
    return 0


def _op_opts(p: argparse.ArgumentParser) -> None:
    """The what-if operations, applied in the order given."""
    p.set_defaults(ops=[])
    g = p.add_argument_group("what-if operations (applied in the order given)")
    g.add_argument("--scenario", action=_OpAction, const="scenario", metavar="FILE",
                   help="a scenario file (YAML/JSON) with a list of ops")
    g.add_argument("--set", action=_OpAction, const="set", metavar="PATH=VALUE",
                   help="set a parameter, e.g. loader.num_workers=4")
    g.add_argument("--scale", action=_OpAction, const="scale", nargs=2,
                   metavar=("FACTOR", "SELECTOR"),
                   help="scale durations, e.g. --scale 0.5 category=elementwise,phase=forward")
    g.add_argument("--remove", action=_OpAction, const="remove", metavar="SELECTOR",
                   help="remove what a selector picks, e.g. name=Memcpy* (device tasks by kernel "
                        "name; a calibrated host thread's CPU work is one op per gap, named cpu)")
    g.add_argument("--fix", action=_OpAction, const="fix", metavar="NAME[:ARG=V,...]",
                   help="a named fix (see 'stepsim fixes'), e.g. mixed_precision:factor=0.6")


def _planner_verb(sub, name: str, help: str, func, draws: int) -> argparse.ArgumentParser:
    """A planner verb: MODEL, the what-if operations, simulation options, ``--draws`` and
    ``--jobs``."""
    p = sub.add_parser(name, help=help)
    p.add_argument("model", help="a StepModel (JSON or YAML)")
    _op_opts(p)
    _sim_opts(p)
    p.add_argument("--draws", type=_count(0, MAX_DRAWS), default=draws,
                   help=f"Monte Carlo draws for P10/P50/P90 (default {draws}; 0: none)")
    p.add_argument("--jobs", type=_count(0, MAX_JOBS), default=0,
                   help="processes (default 0: the CPUs available)")
    p.set_defaults(func=func)
    return p


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="stepsim",
        description="Discrete-event step simulator and what-if planner for deep-learning training.")
    sub = p.add_subparsers(dest="verb", required=True)

    c = sub.add_parser("calibrate", help="Kineto trace(s) [+ capture sidecar] -> StepModel JSON")
    c.add_argument("trace", help="a .json/.json.gz trace, or a directory of per-rank traces")
    c.add_argument("--sidecar", help="the capture harness's sidecar JSON (DataLoader timings, settings)")
    c.add_argument("--step-regex", help="regex of a per-step marker when the trace has no ProfilerStep#N")
    c.add_argument("-o", "--output", required=True, type=_out_file,
                   help="where to write the StepModel JSON")
    c.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("simulate", help="simulate a StepModel (JSON or YAML) and report")
    s.add_argument("model", help="a StepModel (JSON or YAML), e.g. from 'stepsim calibrate'")
    _sim_opts(s)
    s.add_argument("--chrome-trace", type=_out_file,
                   help="write the simulated timeline as a Kineto-style Chrome trace (.json, "
                        ".json.gz) to open beside the real one in Perfetto")
    _plot_opts(s, "--plot", "write the lanes timeline of the simulated step(s) (.png/.svg/.pdf)")
    s.add_argument("--measured", metavar="TRACE", type=_path,
                   help="with --plot: draw this real trace's lanes above the simulated ones")
    s.add_argument("--queue-plot", metavar="FILE", type=_plot_path,
                   help="write the prefetch queue's depth over time, its cap and the workers")
    s.add_argument("--window", action="store_true",
                   help="replay the captured window of a calibrated trace instead (its steps in "
                        "order, each with its own durations, from the captured device backlog) "
                        "and compare each step with its measured time")
    s.set_defaults(func=cmd_simulate)

    d = sub.add_parser("demo", help="profile a real CPU workload, calibrate, predict, re-measure")
    d.add_argument("--out", default="stepsim-demo", type=_path,
                   help="output folder for every artefact")
    d.add_argument("--quick", action="store_true", help="fewer settings and repeats (for tests)")
    d.add_argument("--ddp", action="store_true",
                   help="the DDP demo: 2 gloo ranks on the CPU, bucket caps, a straggler, a barrier")
    d.add_argument("--seed", type=_count(0), default=0,
                   help="seed of the workload and the simulations (default 0)")
    d.add_argument("--probe", type=_count(0), default=None, metavar="N",
                   help="the calibration run also records a probe at num_workers=N, from which "
                        "co-run interference is calibrated (else a stated prior widens the "
                        "interval)")
    d.set_defaults(func=cmd_demo)

    # ---- planner verbs (whatif, sweep, ceiling, plan, validate, ledger) are added here ----
    w = _planner_verb(sub, "whatif", "predict the step after what-if operations", cmd_whatif, 16)
    w.add_argument("--save-model", metavar="FILE", type=_out_file,
                   help="write the transformed StepModel (JSON)")
    _plot_opts(w, "--compare", "write the lanes timeline of the baseline above the what-if")

    sw = _planner_verb(sub, "sweep", "predict a grid of parameter values; find the knee",
                       cmd_sweep, 0)
    sw.add_argument("axes", nargs="+", metavar="PATH=V1,V2,...",
                    help="parameters and values; several make a grid")
    sw.add_argument("--knee-tol", type=_fraction, default=0.05,
                    help="within this of the best counts as no longer helping (default 0.05)")
    sw.add_argument("--plot", metavar="FILE", type=_plot_path, help="write the sweep curve (.png/.svg/.pdf)")
    sw.add_argument("--measured", action="append", default=[], metavar="VALUE=TRACE",
                    help="a re-measured trace at one value of the first parameter, for the plot")
    sw.add_argument("--ledger", metavar="FILE", type=_path,
                    help="measured points for the plot from a validation ledger's records "
                         "that set the first parameter")

    ce = _planner_verb(sub, "ceiling", "simulated Amdahl ceiling of every component",
                       cmd_ceiling, 0)
    ce.add_argument("--plot", metavar="FILE", type=_plot_path, help="write the ceilings as a bar chart")

    pl = _planner_verb(sub, "plan", "greedy chain of named fixes, one bottleneck at a time",
                       cmd_plan, 16)
    pl.add_argument("--allow", action="append", choices=("systems", "numerics", "algorithm",
                                                         "hardware"),
                    help="fix kinds the plan may use (repeatable; default: systems)")
    pl.add_argument("--fix-arg", action="append", default=[], metavar="NAME:ARG=V,...",
                    help="arguments for a fix instead of its candidates, "
                         "e.g. mixed_precision:factor=0.6")
    pl.add_argument("--min-gain", type=_fraction, default=0.02,
                    help="smallest relative step reduction worth a move (default 0.02)")
    pl.add_argument("--max-moves", type=_count(1, 1000), default=8)
    pl.add_argument("--save-scenario", metavar="FILE", type=_out_file,
                    help="write the chain as a scenario YAML")
    pl.add_argument("--plot", metavar="FILE", type=_plot_path,
                    help="write the step time after each fix as a bar chart")

    rp = _planner_verb(sub, "report", "one self-contained HTML report: baseline, what-ifs "
                       "(one per operation or scenario file), ceilings, plan, validation",
                       cmd_report, 16)
    rp.add_argument("-o", "--output", required=True, type=_out_file,
                    help="where to write the report (.html)")
    rp.add_argument("--ledger", metavar="FILE", type=_path,
                    help="a validation ledger to show (with its sweep when its records set one "
                         "parameter)")
    rp.add_argument("--measured", metavar="TRACE", type=_path,
                    help="a real trace whose lanes are drawn above the simulated baseline")
    rp.add_argument("--plot-steps", type=_count(1, MAX_STEPS), default=1,
                    help="steps drawn in each lanes timeline (default 1)")
    rp.add_argument("--no-plan", action="store_true", help="leave the plan out (faster)")

    v = _planner_verb(sub, "validate", "a prediction against re-measured trace(s); ledger",
                      cmd_validate, 16)
    v.add_argument("traces", nargs="+", metavar="TRACE", help="re-measured trace(s), pooled")
    v.add_argument("--ledger", metavar="FILE", type=_out_file,
                   help="append the result to this JSON-lines file")
    v.add_argument("--label", help="a name for this check (default: the operations)")

    lg = sub.add_parser("ledger", help="summarise a validation ledger")
    lg.add_argument("file")
    lg.add_argument("--json", action="store_true", help="machine-readable output")
    lg.set_defaults(func=cmd_ledger)

    dg = sub.add_parser("diagnose", help="the diagnosis tree: kernel-sum / wall, gaps, "
                        "roofline, memory; each leaf's fix priced by a what-if")
    dg.add_argument("input", metavar="TRACE|MODEL",
                    help="a trace, capture folder or directory of ranks (calibrated first), or "
                         "a StepModel file")
    dg.add_argument("--step-regex", help="regex of a per-step marker when the trace has no "
                    "ProfilerStep#N")
    dg.add_argument("--peak", metavar="KEY=V,...", help="the GPU's peaks, overriding or "
                    "adding to the table: fp32/tf32/bf16/fp16/fp8 FLOP/s, bw bytes/s")
    dg.add_argument("--plot", metavar="FILE", type=_plot_path, help="write the roofline plot")
    dg.add_argument("--draws", type=_count(0, MAX_DRAWS), default=8,
                    help="Monte Carlo draws behind each what-if's P10-P90 (default 8)")
    dg.add_argument("--jobs", type=_count(1, MAX_JOBS), default=None, help="processes for the draws")
    _sim_opts(dg)
    dg.set_defaults(func=cmd_diagnose)

    fx = sub.add_parser("fixes", help="list the named fixes and exactly what each changes")
    fx.add_argument("--json", action="store_true", help="machine-readable output")
    fx.set_defaults(func=cmd_fixes)
    return p


def _plot_opts(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A lanes-timeline output and how many steps it draws."""
    p.add_argument(flag, metavar="FILE", type=_plot_path, help=help)
    p.add_argument("--plot-steps", type=_count(1, MAX_STEPS), default=1,
                   help="steps drawn in the lanes timeline (default 1)")


def _sim_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_count(1, MAX_STEPS), default=DEFAULT_STEPS,
                   help=f"measured steps (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=_count(0, MAX_STEPS), default=DEFAULT_WARMUP,
                   help=f"unmeasured warm-up steps, so prefetch queues fill (default {DEFAULT_WARMUP})")
    p.add_argument("--seed", type=_count(0), default=0,
                   help="seed of the simulation's random streams (default 0; the same seed "
                        "gives the same output)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


_INPUTS = ("model", "trace", "sidecar", "traces", "file", "input")
_OUTPUTS = (("output", "-o"), ("chrome_trace", "--chrome-trace"), ("save_model", "--save-model"),
            ("plot", "--plot"), ("save_scenario", "--save-scenario"), ("ledger", "--ledger"),
            ("compare", "--compare"), ("queue_plot", "--queue-plot"))


def _inputs(args) -> list[Path]:
    """Every file or folder the command reads."""
    out: list[Path] = []
    for name in _INPUTS:
        v = getattr(args, name, None)
        out += [Path(x) for x in (v if isinstance(v, list) else [v]) if x]
    out += [Path(v) for kind, v in getattr(args, "ops", None) or [] if kind == "scenario"]
    measured = getattr(args, "measured", None) or []   # simulate/report: TRACE; sweep: V=TRACE
    out += [Path(m.split("=", 1)[-1]) for m in measured] if isinstance(measured, list) else [
        Path(measured)]
    return out


def _refuse_overwriting_inputs(args) -> None:
    """No output over an input (:func:`simcore.outputs.refuse_overwriting_inputs`)."""
    from stepsim.simcore.outputs import refuse_overwriting_inputs

    refuse_overwriting_inputs(_inputs(args), [(flag, getattr(args, name, None))
                                              for name, flag in _OUTPUTS])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _refuse_overwriting_inputs(args)
        return args.func(args)
    except SimulationError as e:
        model = getattr(args, "model", None)
        text = str(e)
        if model and not text.startswith(shown(model)):
            text = f"{shown(model)}: {text}"
        print(f"stepsim: error: {text}", file=sys.stderr)
        return 2
    except StepsimError as e:
        print(f"stepsim: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # an output folder that cannot be made or written, a full disk
        where = f"{shown(e.filename)}: " if e.filename else ""
        print(f"stepsim: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stepsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
