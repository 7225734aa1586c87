"""The ``stepsim`` command line: parse, call, render. The only place that joins calibration to
scenarios and turns domain errors (:class:`simcore.errors.StepsimError`) into one line on
stderr and exit code 2.

Verbs: calibrate, simulate, whatif, sweep, ceiling, plan, validate, ledger, demo.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simcore.errors import StepsimError
from simcore.units import us_to_ms


def _fmt_ms(us: float) -> str:
    return f"{us_to_ms(us):.2f}"


# ---------------------------------------------------------------- calibrate -----------------
def cmd_calibrate(args) -> int:
    from calibration.calibrate import calibrate
    from models.params import save_model

    model = calibrate(args.trace, sidecar=args.sidecar, step_regex=args.step_regex)
    save_model(model, args.output)
    for w in model.meta.warnings:
        print(f"warning: {w}", file=sys.stderr)
    ms = model.meta.measured_step_us
    if ms:
        import numpy as np
        print(f"calibrated {len(ms)} steps: measured step mean {_fmt_ms(float(np.mean(ms)))} ms, "
              f"median {_fmt_ms(float(np.median(ms)))} ms -> {args.output}")
    else:
        print(f"calibrated -> {args.output}")
    return 0


# ---------------------------------------------------------------- simulate ------------------
def cmd_simulate(args) -> int:
    from models.params import load_model
    from models.simulate import simulate
    from models.metrics import summarize
    from report.tables import print_summary

    model = load_model(args.model)
    res = simulate(model, steps=args.steps, warmup=args.warmup, seed=args.seed)
    summary = summarize(res)
    print_summary(model, summary, as_json=args.json)
    if args.chrome_trace:
        from report.chrome import write_chrome_trace
        write_chrome_trace(res, args.chrome_trace)
    return 0


# ---------------------------------------------------------------- demo ----------------------
def cmd_demo(args) -> int:
    from demo.run import run_demo

    return run_demo(Path(args.out), quick=args.quick, seed=args.seed)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stepsim",
        description="Discrete-event step simulator and what-if planner for deep-learning training.")
    sub = p.add_subparsers(dest="verb", required=True)

    c = sub.add_parser("calibrate", help="Kineto trace(s) [+ capture sidecar] -> StepModel JSON")
    c.add_argument("trace", help="a .json/.json.gz trace, or a directory of per-rank traces")
    c.add_argument("--sidecar", help="the capture harness's sidecar JSON (DataLoader timings, settings)")
    c.add_argument("--step-regex", help="regex of a per-step marker when the trace has no ProfilerStep#N")
    c.add_argument("-o", "--output", required=True, help="where to write the StepModel JSON")
    c.set_defaults(func=cmd_calibrate)

    s = sub.add_parser("simulate", help="simulate a StepModel (JSON or YAML) and report")
    s.add_argument("model")
    _sim_opts(s)
    s.add_argument("--chrome-trace", help="write the simulated timeline as a Chrome trace (.json)")
    s.set_defaults(func=cmd_simulate)

    d = sub.add_parser("demo", help="profile a real CPU workload, calibrate, predict, re-measure")
    d.add_argument("--out", default="stepsim-demo", help="output folder for every artefact")
    d.add_argument("--quick", action="store_true", help="fewer settings and repeats (for tests)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_demo)

    # ---- planner verbs (whatif, sweep, ceiling, plan, validate, ledger) are added here ----
    return p


def _sim_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=30, help="measured steps (default 30)")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured warm-up steps (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except StepsimError as e:
        print(f"stepsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("stepsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
