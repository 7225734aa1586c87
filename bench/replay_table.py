"""Replay table: calibrate every shared GPU trace, replay it, compare with the measurement.

For each trace file under ``../shared/traces`` (and each directory of per-rank files, as one
multi-rank model), prints: the measured median step (ms, over the complete steps); the
*window* replay of the coarsened model (``models.simulate.window_replay``: the captured steps
re-run in order, each with its own durations, from the captured device backlog, measured as
calibration measures them), its median's error and its largest one-step error (single-rank
models); the *steady* replay, the representative step repeated (``simulate(coarsen(model),
steps=STEPS, warmup=WARMUP)``, what predictions start from; ``--fine``: also of the fine
model) and its error; the GPU busy % (union
of every GPU activity over the step) and exposed communication (ms per step), each measured
two ways and replayed, the measured kernel-sum ÷ step-wall, and the seconds the coarse replay
took. Measured "win" is the median over the steps of what ran in each step's window (a
profiler's view); "step" is the representative step's own GPU work over its duration, what a
replay repeats every step (they differ when the device's backlog changes between steps; a
"step" busy above 100 % means the backlog grew, so the replay's steady state is device-bound
and longer than the measured step). Replayed exposed communication counts a collective from
the rank's entry, as a profiler does. Multi-rank models are summarised on their reference
rank (whose trace gave the structure). ``trace_filter/`` files are HTA-sampled subsets and are
marked ``partial``.

Run from the repository root: ``python bench/replay_table.py [--fine] [--only SUBSTR]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from stepsim.fit import calibrate_gpu  # noqa: E402
from stepsim.models.coarsen import coarsen  # noqa: E402
from stepsim.models.metrics import exposed_us, summarize  # noqa: E402
from stepsim.models.simulate import simulate, window_replay  # noqa: E402
from stepsim.simcore.errors import StepsimError  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
STEPS, WARMUP = 10, 3


def observed_exposed_comm_us(result, rank: int) -> float:
    """Replayed exposed communication per step (µs) as a profiler sees it: a collective kernel
    from the rank's entry (its wait for the other ranks included) to its end, minus the union
    of every other device task."""
    model, (w0, w1) = result.model, result.rank_window_us(rank)
    tasks = model.task_map()
    comm, other = [], []
    for r in result.runs:
        if r.rank != rank:
            continue
        coll = tasks[r.task].kind == "collective"
        a, b = max(r.ready_us + r.gap_us if coll else r.start_us, w0), min(r.end_us, w1)
        if b > a:
            (comm if coll else other).append((a, b))
    return exposed_us(comm, other) / result.step_us.shape[1]


def targets(root: Path) -> list[Path]:
    """Every trace file, plus every directory holding several trace files (listed only when
    they are distinct ranks of one job)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and (
        p.name.endswith(".json") or p.name.endswith(".json.gz")))
    dirs = sorted({p.parent for p in files if sum(q.parent == p.parent for q in files) > 1})
    return files + dirs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fine", action="store_true", help="also replay the fine (uncoarsened) model")
    ap.add_argument("--only", default=None, help="only paths containing this text")
    a = ap.parse_args(argv)
    if not TRACES.is_dir():
        print(f"shared traces not found at {TRACES}")
        return 1
    hdr = (f"{'trace':62s} {'steps':>5s} {'meas ms':>8s} {'window':>8s} {'err %':>7s}"
           + f" {'step %':>6s} {'steady':>8s} {'err %':>7s}"
           + (f" {'fine':>8s} {'err %':>7s}" if a.fine else "")
           + f" {'busy win':>8s} {'step':>5s} {'sim':>5s} {'ksum/wall':>9s}"
           + f" {'comm win':>8s} {'step':>6s} {'sim':>6s} {'sim s':>5s}  note")
    print(hdr)
    print("-" * len(hdr))
    for p in targets(TRACES):
        rel = str(p.relative_to(TRACES)) + ("/" if p.is_dir() else "")
        if a.only and a.only not in rel:
            continue
        note = "partial (HTA-sampled)" if "trace_filter" in rel else ""
        try:
            m = calibrate_gpu(p, coarse=False)
        except StepsimError as e:
            print(f"{rel[-62:]:62s} not calibrated: {e}")
            continue
        if p.is_dir() and len(m.ranks) < 2:
            continue  # one rank (several captures of it): already listed file by file
        meas = m.meta.notes.get("measured_median_step_us")
        c = coarsen(m)
        t = time.perf_counter()
        r = simulate(c, steps=STEPS, warmup=WARMUP)
        dt = time.perf_counter() - t
        ref = m.meta.notes.get("reference_rank", m.ranks[0].rank)
        s = summarize(r, rank=ref)
        sim = r.median_step_us
        if c.replay is not None:
            w = window_replay(c)
            win = (f"{w.replayed_median_us / 1e3:8.2f} {100 * w.median_error:+7.2f} "
                   f"{100 * w.max_step_error:6.2f}")
            if not w.compared.all():
                note = (note + " " if note else "") + (
                    f"window: {int(w.compared.sum())} of {len(w.steps)} steps compared, "
                    f"measured median {w.measured_median_us / 1e3:.2f}")
        else:
            win = f"{'-':>8s} {'-':>7s} {'-':>6s}"
        line = (f"{rel[-62:]:62s} {len(m.meta.measured_step_us):5d} {meas / 1e3:8.2f} {win} "
                f"{sim / 1e3:8.2f} {100 * (sim - meas) / meas:+7.2f}")
        if a.fine:
            rf = simulate(m, steps=STEPS, warmup=WARMUP)
            line += f" {rf.median_step_us / 1e3:8.2f} {100 * (rf.median_step_us - meas) / meas:+7.2f}"
        n = m.meta.notes
        if len(m.ranks) > 1:
            note = (note + " " if note else "") + f"{len(m.ranks)} ranks, job step = slowest rank"
        busy = 100 * s.device_busy_us / s.rank_step_us[s.rank]
        line += (f" {n['gpu_busy_pct']:8.1f} {n['step_gpu_busy_pct']:5.1f} {busy:5.1f}"
                 f" {n['kernel_sum_over_step_wall']:9.2f} {n['exposed_comm_us'] / 1e3:8.2f}"
                 f" {n['step_exposed_comm_us'] / 1e3:6.2f}"
                 f" {observed_exposed_comm_us(r, ref) / 1e3:6.2f}"
                 f" {dt:5.1f}  {note}")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
