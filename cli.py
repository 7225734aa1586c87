"""The ``stepsim`` command line: parse, call, render. The only place that joins calibration to
scenarios and turns domain errors (:class:`simcore.errors.StepsimError`) into one line on
stderr and exit code 2.

Verbs: calibrate, simulate, whatif, sweep, ceiling, plan, validate, ledger, fixes, demo.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from stepsim.simcore.errors import SimulationError, StepsimError, shown
from stepsim.simcore.units import us_to_ms


DEFAULT_STEPS, DEFAULT_WARMUP = 30, 20
"""Measured and warm-up steps of every simulation the CLI runs unless told otherwise (the
warm-up lets prefetch queues fill); calibrate's replay uses them too, so it prints what
``stepsim simulate`` prints."""
REPLAY_WARN = 0.10
"""A replay whose mean step is further than this (fraction) from the measured mean is warned
about. The mean is the throughput the run pays; a median can differ a lot when steps arrive in
bursts (more workers than cores), so it is printed but not judged."""


def _count(lo: int):
    """argparse type: an integer ≥ ``lo``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{v} is below {lo}")
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


def _grouped(warnings: list[str]) -> list[str]:
    """Warnings that differ only in the file they begin with (``name: text``) said once,
    naming the files: a directory of ranks repeats each for every rank."""
    files: dict[str, list[str]] = {}
    for w in warnings:
        name, sep, text = w.partition(": ")
        key = text if sep and " " not in name else w
        files.setdefault(key, []).append(name if key != w else "")
    out = []
    for text, names in files.items():
        names = [n for n in names if n]
        if len(names) > 1:
            out.append(f"{names[0]} and {len(names) - 1} other file(s): {text}")
        else:
            out.append(f"{names[0]}: {text}" if names else text)
    return out


def _n(n: int, noun: str) -> str:
    """``1 step``, ``3 steps``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _fmt_ms(us: float) -> str:
    return f"{us_to_ms(us):.2f}"


# ---------------------------------------------------------------- calibrate -----------------
def cmd_calibrate(args) -> int:
    from stepsim.calibration.calibrate import calibrate
    from stepsim.models.params import save_model

    import numpy as np

    from stepsim.models.simulate import simulate, window_replay

    model = calibrate(args.trace, sidecar=args.sidecar, step_regex=args.step_regex)
    save_model(model, args.output)
    for w in _grouped(model.meta.warnings):
        print(f"warning: {w}", file=sys.stderr)
    ms = model.meta.measured_step_us
    print(f"calibrated {_n(len(ms), 'step')}: measured step mean {_fmt_ms(float(np.mean(ms)))} ms, "
          f"median {_fmt_ms(float(np.median(ms)))} ms -> {shown(args.output)}")
    if model.replay is not None:
        w = window_replay(model)
        rest = len(w.steps) - int(w.compared.sum())
        others = (f"; {rest} incomplete or differently shaped, replayed with the representative "
                  "step's durations and not compared" if rest else "")
        print(f"replay of the captured window ({_n(len(w.steps), 'step')}, each with its own "
              f"durations, from the captured device backlog{others}): median "
              f"{_fmt_ms(w.replayed_median_us)} ms ({100 * w.median_error:+.1f} % vs measured "
              f"over {_n(int(w.compared.sum()), 'step')}), largest one-step error "
              f"{100 * w.max_step_error:.1f} %")
    elif len(model.ranks) > 1:
        print("(several ranks: no window replay; the steady state is compared)")
    res = simulate(model, steps=DEFAULT_STEPS, warmup=DEFAULT_WARMUP)
    mean, median = float(np.mean(ms)), float(np.median(ms))
    err_mean = (res.mean_step_us - mean) / mean
    err_median = (res.median_step_us - median) / median
    what = ("steady state of the representative step (what predictions use)"
            if model.replay is not None else "replay of the calibrated baseline")
    print(f"{what}: mean {_fmt_ms(res.mean_step_us)} ms ({100 * err_mean:+.1f} % vs measured), "
          f"median {_fmt_ms(res.median_step_us)} ms ({100 * err_median:+.1f} % vs measured)")
    if abs(err_mean) > REPLAY_WARN:
        why = ("the captured steps were not all in one steady state, or the model misses "
               "something the run did" if model.replay is not None else
               "the model misses something the run did")
        print(f"warning: the {'steady state' if model.replay is not None else 'replay'}'s mean "
              f"step is {100 * err_mean:+.0f} % off the measured one: {why} (see the warnings "
              "above)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- simulate ------------------
def cmd_simulate(args) -> int:
    from stepsim.models.params import load_model
    from stepsim.models.simulate import simulate
    from stepsim.models.metrics import summarize
    from stepsim.report.tables import print_summary

    model = load_model(args.model)
    if args.window:
        return _simulate_window(model, args)
    res = simulate(model, steps=args.steps, warmup=args.warmup, seed=args.seed)
    summary = summarize(res)
    print_summary(model, summary, as_json=args.json)
    if args.chrome_trace:
        from stepsim.report.chrome import write_chrome_trace
        write_chrome_trace(res, args.chrome_trace)
    return 0


def _simulate_window(model, args) -> int:
    """``simulate --window``: the captured window replayed, each step against its measurement
    (the steady-state summary, critical path and lanes, is what ``simulate`` prints without
    ``--window``; ``--chrome-trace`` shows the replayed window's timeline)."""
    import orjson

    from stepsim.models.simulate import window_replay
    from stepsim.report.tables import print_window, window_dict

    w = window_replay(model)
    if args.json:
        sys.stdout.write(orjson.dumps(window_dict(w), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print_window(w)
    if args.chrome_trace:
        from stepsim.report.chrome import write_chrome_trace
        write_chrome_trace(w.result, args.chrome_trace)
    return 0


# ---------------------------------------------------------------- demo ----------------------
def cmd_demo(args) -> int:
    from stepsim.demo.run import run_demo

    return run_demo(Path(args.out), quick=args.quick, seed=args.seed)


# ---------------------------------------------------------------- planner -------------------
class _OpAction(argparse.Action):
    """Collects --scenario/--set/--scale/--remove/--fix into ``args.ops`` in command-line
    order, as ``(kind, value)``."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, "ops", [*(getattr(namespace, "ops", None) or []), (self.const, values)])


def _planner_ops(args) -> list:
    from stepsim.scenarios.transforms import (load_scenario, parse_fix, parse_remove, parse_scale,
                                      parse_set)

    out: list = []
    for kind, v in args.ops:
        if kind == "scenario":
            out += load_scenario(v).ops
        elif kind == "set":
            out.append(parse_set(v))
        elif kind == "scale":
            out.append(parse_scale(*v))
        elif kind == "remove":
            out.append(parse_remove(v))
        else:
            out.append(parse_fix(v))
    return out


def _warn_caveats(model, ops, paths=()) -> None:
    from stepsim.scenarios.transforms import caveats

    for w in caveats(model, ops, paths):
        print(f"warning: {w}", file=sys.stderr)


def _sim_kw(args) -> dict:
    from stepsim.scenarios.parallel import default_jobs

    return {"steps": args.steps, "warmup": args.warmup, "seed": args.seed,
            "jobs": args.jobs or default_jobs()}


def _measured(traces: list[str]):
    from stepsim.calibration.measure import measured_runs

    runs = measured_runs(traces)
    for ms in runs:
        for w in dict.fromkeys(ms.warnings):
            print(f"warning: {shown(ms.path)}: {w}", file=sys.stderr)
    return runs


def cmd_whatif(args) -> int:
    from stepsim.models.params import load_model, save_model
    from stepsim.report.planner import print_whatif, progress_bar
    from stepsim.scenarios.predict import predict

    model = load_model(args.model)
    ops = _planner_ops(args)
    _warn_caveats(model, ops)
    if not ops:
        raise StepsimError("whatif needs at least one --set, --scale, --remove, --fix or "
                           "--scenario")
    kw = _sim_kw(args)
    with progress_bar("baseline", enabled=not args.json and args.draws > 0) as prog:
        base = predict(model, [], intervals=args.draws, progress=prog, **kw)
    with progress_bar("scenario", enabled=not args.json and args.draws > 0) as prog:
        pred = predict(model, ops, intervals=args.draws, progress=prog, **kw)
    print_whatif(base, pred, as_json=args.json)
    if args.save_model:
        save_model(pred.model, args.save_model)
    return 0


def cmd_sweep(args) -> int:
    from stepsim.models.params import load_model
    from stepsim.report.planner import plot_sweep, print_sweep, progress_bar
    from stepsim.scenarios.sweep import parse_axis, sweep
    from stepsim.scenarios.transforms import parse_value

    model = load_model(args.model)
    grid: dict = {}
    for text in args.axes:
        path, values = parse_axis(text)
        if path in grid:
            raise StepsimError(f"sweep axis {path!r} is given twice")
        grid[path] = values
    measured = {}
    for text in args.measured:
        value, eq, trace = text.partition("=")
        if not eq or not value.strip() or not trace.strip():
            raise StepsimError(f"bad --measured {text!r}: expected VALUE=TRACE")
        v = parse_value(value)
        first = next(iter(grid.values()))
        if v not in first:
            raise StepsimError(f"--measured {text!r}: {value} is not a value of the first sweep "
                               f"axis ({', '.join(map(str, first))})")
        measured[v] = _measured([trace])[0].step_us
    with progress_bar("sweep", enabled=not args.json) as prog:
        ops = _planner_ops(args)
        _warn_caveats(model, ops, list(grid))
        r = sweep(model, grid, ops, intervals=args.draws, progress=prog,
                  knee_tol=args.knee_tol, **_sim_kw(args))
    print_sweep(r, as_json=args.json)
    if args.plot:
        plot_sweep(r, args.plot, measured)
    return 0


def cmd_ceiling(args) -> int:
    from stepsim.models.params import load_model
    from stepsim.report.planner import plot_ceilings, print_ceilings, progress_bar
    from stepsim.scenarios.ceiling import ceilings

    model = load_model(args.model)
    with progress_bar("ceilings", enabled=not args.json) as prog:
        r = ceilings(model, _planner_ops(args), progress=prog, **_sim_kw(args))
    print_ceilings(r, as_json=args.json)
    if args.plot:
        plot_ceilings(r, args.plot)
    return 0


def cmd_plan(args) -> int:
    import yaml

    from stepsim.models.params import load_model
    from stepsim.report.planner import print_plan, progress_bar
    from stepsim.scenarios.plan import plan
    from stepsim.scenarios.transforms import Scenario, parse_fix
    from stepsim.simcore.atomic import write_atomic

    model = load_model(args.model)
    fix_args: dict = {}
    for text in args.fix_arg:
        op = parse_fix(text)
        fix_args[op.name] = {**fix_args.get(op.name, {}), **op.args}
    with progress_bar("plan", enabled=not args.json) as prog:
        p = plan(model, _planner_ops(args), allow=tuple(args.allow or ("systems",)),
                 fix_args=fix_args, min_gain=args.min_gain, max_moves=args.max_moves,
                 draws=args.draws, progress=prog, **_sim_kw(args))
    print_plan(p, as_json=args.json)
    _warn_caveats(model, [m.op for m in p.moves])
    if args.save_scenario:
        sc = Scenario(name=f"plan for {model.meta.name or args.model}", description=p.stop,
                      ops=tuple(p.ops))
        write_atomic(Path(args.save_scenario),
                     yaml.safe_dump(sc.model_dump(), sort_keys=False).encode())
    return 0


def cmd_validate(args) -> int:
    from collections import Counter

    from stepsim.models.params import load_model
    from stepsim.report.planner import print_validation, progress_bar
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.validate import append_ledger, validate

    model = load_model(args.model)
    ops = _planner_ops(args)
    _warn_caveats(model, ops)
    runs = _measured(args.traces)
    steps = [s for r in runs for s in r.step_us]
    neck = Counter(r.bottleneck for r in runs).most_common(1)[0][0]
    with progress_bar("predict", enabled=not args.json and args.draws > 0) as prog:
        pred = predict(model, ops, intervals=args.draws, progress=prog, **_sim_kw(args))
    rec = validate(pred, steps, neck, label=args.label or pred.what, traces=args.traces,
                   model_name=model.meta.name or Path(args.model).stem)
    if args.ledger:
        append_ledger(args.ledger, rec)
    print_validation([rec], as_json=args.json)
    return 0


def cmd_ledger(args) -> int:
    from stepsim.report.planner import print_ledger
    from stepsim.scenarios.validate import read_ledger, summarize_ledger
    from stepsim.simcore.errors import InputError

    if not Path(args.file).exists():
        raise InputError(args.file, "no such ledger file")
    records = read_ledger(args.file)
    if not records:
        raise InputError(args.file, "the ledger is empty (no validation records)")
    print_ledger(records, summarize_ledger(records), as_json=args.json)
    return 0


def cmd_fixes(args) -> int:
    from stepsim.report.planner import print_fixes

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
    p.add_argument("--draws", type=_count(0), default=draws,
                   help=f"Monte Carlo draws for P10/P50/P90 (default {draws}; 0: none)")
    p.add_argument("--jobs", type=_count(0), default=0,
                   help="processes (default 0: the CPUs available)")
    p.set_defaults(func=func)
    return p


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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
    s.add_argument("model")
    _sim_opts(s)
    s.add_argument("--chrome-trace", type=_out_file,
                   help="write the simulated timeline as a Chrome trace (.json)")
    s.add_argument("--window", action="store_true",
                   help="replay the captured window of a calibrated trace instead (its steps in "
                        "order, each with its own durations, from the captured device backlog) "
                        "and compare each step with its measured time")
    s.set_defaults(func=cmd_simulate)

    d = sub.add_parser("demo", help="profile a real CPU workload, calibrate, predict, re-measure")
    d.add_argument("--out", default="stepsim-demo", type=_path,
                   help="output folder for every artefact")
    d.add_argument("--quick", action="store_true", help="fewer settings and repeats (for tests)")
    d.add_argument("--seed", type=_count(0), default=0)
    d.set_defaults(func=cmd_demo)

    # ---- planner verbs (whatif, sweep, ceiling, plan, validate, ledger) are added here ----
    w = _planner_verb(sub, "whatif", "predict the step after what-if operations", cmd_whatif, 16)
    w.add_argument("--save-model", metavar="FILE", type=_out_file,
                   help="write the transformed StepModel (JSON)")

    sw = _planner_verb(sub, "sweep", "predict a grid of parameter values; find the knee",
                       cmd_sweep, 0)
    sw.add_argument("axes", nargs="+", metavar="PATH=V1,V2,...",
                    help="parameters and values; several make a grid")
    sw.add_argument("--knee-tol", type=_fraction, default=0.05,
                    help="within this of the best counts as no longer helping (default 0.05)")
    sw.add_argument("--plot", metavar="FILE", type=_plot_path, help="write the sweep curve (.png/.svg/.pdf)")
    sw.add_argument("--measured", action="append", default=[], metavar="VALUE=TRACE",
                    help="a re-measured trace at one value of the first parameter, for the plot")

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
    pl.add_argument("--max-moves", type=_count(1), default=8)
    pl.add_argument("--save-scenario", metavar="FILE", type=_out_file,
                    help="write the chain as a scenario YAML")

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

    fx = sub.add_parser("fixes", help="list the named fixes and exactly what each changes")
    fx.add_argument("--json", action="store_true", help="machine-readable output")
    fx.set_defaults(func=cmd_fixes)
    return p


def _sim_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_count(1), default=DEFAULT_STEPS,
                   help=f"measured steps (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=_count(0), default=DEFAULT_WARMUP,
                   help=f"unmeasured warm-up steps, so prefetch queues fill (default {DEFAULT_WARMUP})")
    p.add_argument("--seed", type=_count(0), default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")


_INPUTS = ("model", "trace", "sidecar", "traces", "file")
_OUTPUTS = (("output", "-o"), ("chrome_trace", "--chrome-trace"), ("save_model", "--save-model"),
            ("plot", "--plot"), ("save_scenario", "--save-scenario"), ("ledger", "--ledger"))


def _inputs(args) -> list[Path]:
    """Every file or folder the command reads."""
    out: list[Path] = []
    for name in _INPUTS:
        v = getattr(args, name, None)
        out += [Path(x) for x in (v if isinstance(v, list) else [v]) if x]
    out += [Path(v) for kind, v in getattr(args, "ops", None) or [] if kind == "scenario"]
    out += [Path(m.split("=", 1)[-1]) for m in getattr(args, "measured", None) or []]
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except OSError:
        return False


def _refuse_overwriting_inputs(args) -> None:
    """An output may not be one of the inputs, nor a JSON file inside an input folder (it
    would replace, or later be read as, one of its traces).

    Raises:
        StepsimError: naming the option and the file.
    """
    inputs = _inputs(args)
    for name, flag in _OUTPUTS:
        v = getattr(args, name, None)
        if not v:
            continue
        out = Path(v)
        if name == "ledger" and out.exists() and not out.is_file():
            raise StepsimError(f"--ledger {shown(v)}: a ledger is appended to and rewritten: it "
                               "must be a regular file")
        for i in inputs:
            inside = (i.is_dir() and _same(out.parent, i)
                      and out.name.lower().endswith((".json", ".json.gz", ".gz")))
            if _same(out, i) or inside:
                what = ("that is an input file" if not inside
                        else f"that is inside the input folder {i}")
                raise StepsimError(f"{flag} {v}: {what}; refusing to overwrite it")


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
