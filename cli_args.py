"""The ``stepsim`` command line's arguments: the parser of every verb and the argparse types
of its values. The bounds and defaults of counts are :mod:`stepsim.limits`' (the API checks
the same ones); :mod:`stepsim.cli` runs what this parses, by ``args.verb``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from stepsim.limits import (DEFAULT_DRAWS, DEFAULT_STEPS, DEFAULT_WARMUP, count_problem,
                            fraction_problem, parse_steps)


class _Parser(argparse.ArgumentParser):
    """argparse with an error of one line and a hint to ``--help``, not its usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _checked(convert, noun: str, problem):
    """argparse type: ``convert(text)`` (else "is not {noun}"), refused with the text of
    ``problem(value, text)`` unless that is None."""
    def parse(text: str):
        try:
            v = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        wrong = problem(v, text)
        if wrong:
            raise argparse.ArgumentTypeError(wrong)
        return v
    return parse


def _count(name: str):
    """argparse type: an integer within the bounds of the count ``name``
    (:data:`stepsim.limits.COUNTS`)."""
    return _checked(int, "an integer", lambda v, text: count_problem(name, v))


_fraction = _checked(float, "a number", fraction_problem)
"""argparse type: a finite number ≥ 0."""


def _step_range(text: str):
    """argparse type: ``A:B`` (:func:`stepsim.limits.parse_steps`)."""
    try:
        return parse_steps(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


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
    if text == "-":   # was written as a file named "-" in the working folder
        raise argparse.ArgumentTypeError("'-' (standard output) is not an output here: stdout "
                                         "carries the verb's own lines; give a file name")
    return text


PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def _plot_path(text: str) -> str:
    """argparse type: a file name ending in a plot format matplotlib writes."""
    text = _out_file(text)
    if Path(text).suffix.lower() not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r}: a plot is written as one of "
                                         f"{', '.join(PLOT_FORMATS)}")
    return text


class _OpAction(argparse.Action):
    """Collects --scenario/--set/--scale/--remove/--fix into ``args.ops`` in command-line
    order, as ``(kind, value)`` (what :func:`stepsim.api.operations` reads)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, "ops", [*(getattr(namespace, "ops", None) or []), (self.const, values)])


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


def _planner_verb(sub, name: str, help: str, draws: int) -> argparse.ArgumentParser:
    """A planner verb: MODEL, the what-if operations, simulation options, ``--draws`` and
    ``--jobs``."""
    p = sub.add_parser(name, help=help)
    p.add_argument("model", help="a StepModel (JSON or YAML)")
    _op_opts(p)
    _sim_opts(p)
    p.add_argument("--draws", type=_count("draws"), default=draws,
                   help=f"Monte Carlo draws for P10/P50/P90 (default {draws}; 0: none)")
    p.add_argument("--jobs", type=_count("jobs"), default=0,
                   help="processes (default 0: the CPUs available)")
    return p


def parser() -> argparse.ArgumentParser:
    """The parser of every verb; ``args.verb`` names the verb parsed."""
    p = _Parser(
        prog="stepsim",
        description="Discrete-event step simulator and what-if planner for deep-learning training.")
    sub = p.add_subparsers(dest="verb", required=True)

    c = sub.add_parser("calibrate", help="Kineto trace(s) [+ capture sidecar] -> StepModel JSON")
    c.add_argument("trace", help="a .json/.json.gz trace, or a directory of per-rank traces")
    c.add_argument("--sidecar", help="the capture harness's sidecar JSON (DataLoader timings, settings)")
    c.add_argument("--step-regex", help="regex of a per-step marker when the trace has no ProfilerStep#N")
    c.add_argument("--steps", type=_step_range, metavar="A:B",
                   help="calibrate from the steps ProfilerStep#A to #B-1 only (either side may "
                        "be left out), reading the trace as a stream that keeps only their "
                        "events: for traces too large to hold")
    c.add_argument("--replicate", action="append", metavar="CAPTURE",
                   help="another capture of the same setting, recorded at another time "
                        "(repeatable): the replicates measure the host's run-to-run speed, "
                        "which every prediction interval then carries")
    c.add_argument("-o", "--output", required=True, type=_out_file,
                   help="where to write the StepModel JSON")
    _verbose(c)

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

    d = sub.add_parser("demo", help="profile a real CPU workload, calibrate, predict, re-measure")
    d.add_argument("-o", "--out", default="stepsim-demo", type=_path,
                   help="output folder for every artefact")
    d.add_argument("--quick", action="store_true", help="fewer settings and repeats (for tests)")
    d.add_argument("--ddp", action="store_true",
                   help="the DDP demo: 2 gloo ranks on the CPU, bucket caps, a straggler, a barrier")
    d.add_argument("--seed", type=_count("seed"), default=0,
                   help="seed of the workload and the simulations (default 0)")
    d.add_argument("--repeats", type=_count("repeats"), default=None, metavar="N",
                   help="re-measured runs per num_workers setting, 1-10 (default 4, --quick 1): "
                        "each setting is scored on the pooled mean of its N runs, and its "
                        "interval is for that mean; each run adds about 13 s a setting")
    # const: demo.run.PROBE_WORKERS (tests/test_demo_probe.py checks they agree)
    d.add_argument("--probe", type=_count("probe"), nargs="?", const=0, default=None,
                   metavar="N",
                   help="each calibration run (num_workers=1) also records a probe at "
                        "num_workers=N, 0-64 (alone: 0, nothing beside its batches, the load change "
                        "that measures the slope), from which co-run interference is calibrated "
                        "(else, or when the probe's load is too close to the capture's, a "
                        "stated prior widens the interval)")

    # ---- planner verbs (whatif, sweep, ceiling, plan, validate, ledger) are added here ----
    w = _planner_verb(sub, "whatif", "predict the step after what-if operations", DEFAULT_DRAWS)
    w.add_argument("--save-model", metavar="FILE", type=_out_file,
                   help="write the transformed StepModel (JSON)")
    _plot_opts(w, "--compare", "write the lanes timeline of the baseline above the what-if")
    w.add_argument("--width-sources", action="store_true",
                   help="also draw each source of uncertainty alone: the scenario interval's "
                        "width by source (host noise, interference, ...; more draws)")

    sw = _planner_verb(sub, "sweep", "predict a grid of parameter values; find the knee", 0)
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

    ce = _planner_verb(sub, "ceiling", "simulated Amdahl ceiling of every component", 0)
    ce.add_argument("--plot", metavar="FILE", type=_plot_path, help="write the ceilings as a bar chart")

    pl = _planner_verb(sub, "plan", "greedy chain of named fixes, one bottleneck at a time",
                       DEFAULT_DRAWS)
    pl.add_argument("--allow", action="append", choices=("systems", "numerics", "algorithm",
                                                         "hardware"),
                    help="fix kinds the plan may use (repeatable; default: systems)")
    pl.add_argument("--fix-arg", action="append", default=[], metavar="NAME:ARG=V,...",
                    help="arguments for a fix instead of its candidates, "
                         "e.g. mixed_precision:factor=0.6")
    pl.add_argument("--min-gain", type=_fraction, default=0.02,
                    help="smallest relative step reduction worth a move (default 0.02)")
    pl.add_argument("--max-moves", type=_count("max_moves"), default=8)
    pl.add_argument("--save-scenario", metavar="FILE", type=_out_file,
                    help="write the chain as a scenario YAML")
    pl.add_argument("--plot", metavar="FILE", type=_plot_path,
                    help="write the step time after each fix as a bar chart")

    rp = _planner_verb(sub, "report", "one self-contained HTML report: baseline, what-ifs "
                       "(one per operation or scenario file), ceilings, plan, validation",
                       DEFAULT_DRAWS)
    rp.add_argument("-o", "--output", required=True, type=_out_file,
                    help="where to write the report (.html)")
    rp.add_argument("--ledger", metavar="FILE", type=_path,
                    help="a validation ledger to show (with its sweep when its records set one "
                         "parameter)")
    rp.add_argument("--measured", metavar="TRACE", type=_path,
                    help="a real trace whose lanes are drawn above the simulated baseline")
    rp.add_argument("--plot-steps", type=_count("plot_steps"), default=1,
                    help="steps drawn in each lanes timeline (default 1)")
    rp.add_argument("--no-plan", action="store_true", help="leave the plan out (faster)")

    v = _planner_verb(sub, "validate", "a prediction against re-measured trace(s); ledger",
                      DEFAULT_DRAWS)
    v.add_argument("traces", nargs="+", metavar="TRACE", help="re-measured trace(s), pooled")
    v.add_argument("--ledger", metavar="FILE", type=_out_file,
                   help="append the result to this JSON-lines file")
    v.add_argument("--label", help="a name for this check (default: the operations)")
    v.add_argument("--width-sources", action="store_true",
                   help="also draw each source of uncertainty alone: the interval's width by "
                        "source, in the output and the ledger record (more draws)")

    lg = sub.add_parser("ledger", help="summarise a validation ledger")
    lg.add_argument("file")
    lg.add_argument("--json", action="store_true", help="machine-readable output")

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
    dg.add_argument("--draws", type=_count("draws"), default=DEFAULT_DRAWS,
                    help="Monte Carlo draws behind the baseline's and each what-if's P10-P90 "
                         f"(default {DEFAULT_DRAWS}, as whatif)")
    dg.add_argument("--jobs", type=_count("jobs"), default=0,
                    help="processes for the draws (default 0: the CPUs available)")
    _sim_opts(dg)

    fx = sub.add_parser("fixes", help="list the named fixes and exactly what each changes")
    fx.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def _plot_opts(p: argparse.ArgumentParser, flag: str, help: str) -> None:
    """A lanes-timeline output and how many steps it draws."""
    p.add_argument(flag, metavar="FILE", type=_plot_path, help=help)
    p.add_argument("--plot-steps", type=_count("plot_steps"), default=1,
                   help="steps drawn in the lanes timeline (default 1)")


def _verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", action="store_true",
                   help="print in full the warnings that change nothing on the step (else one "
                        "line each, after those that do)")


def _sim_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=_count("steps"), default=DEFAULT_STEPS,
                   help="measured steps (default: as many as it takes for the mean step's "
                        "standard error to be at most 1 %% of it, within a bound the output "
                        "names)")
    p.add_argument("--warmup", type=_count("warmup"), default=DEFAULT_WARMUP,
                   help=f"unmeasured warm-up steps, so prefetch queues fill (default {DEFAULT_WARMUP})")
    p.add_argument("--seed", type=_count("seed"), default=0,
                   help="seed of the simulation's random streams (default 0; the same seed "
                        "gives the same output)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--quiet", action="store_true",
                   help="no progress on stderr (a bar on a terminal; elsewhere a line after "
                        "30 s, then each minute); warnings are still printed")
    _verbose(p)
