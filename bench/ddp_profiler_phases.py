"""Each phase's profiler factor in kept DDP demo folders: measured against the per-event model.

For the capture and every replicate of each folder, per rank: the training thread's CPU per
phase (forward, backward to the last gradient's hook, the rest of the step) over the run's
unprofiled steps (the 8 before and the 8 after the profiled window) and over its profiled ones
(``runs.json``'s ``phases``, which calibration never reads), so each phase's own factor
(medians, unprofiled ÷ profiled); beside it the step's factor (what one factor per rank gives
every phase) and :func:`calibration.profiler_events.phase_factors` fed that step factor, the
phases' profiled CPU and their events per step in the run's trace (as calibration counts them,
:func:`calibration.gloo_steps.fit_gloo_rank`). Prints each run and, over the runs with a factor
under 1, each phase's mean and median |error| either way. No timing of its own:
``python bench/ddp_profiler_phases.py DEMO_DIR...``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import orjson

from stepsim.calibration.events import build_table
from stepsim.calibration.gloo_steps import PHASES, fit_gloo_rank
from stepsim.calibration.profiler_events import phase_factors
from stepsim.calibration.trace_io import load_trace
from stepsim.demo.ddp_job import UNPROFILED_STEPS

# the capture's steps in runs.json: unprofiled, the profiler's warm-up, profiled, unprofiled
# (demo.ddp_job._profiled; the cold probe's steps after them are left out)
STEPS = 20


def _windows() -> tuple[list[int], list[int]]:
    u = UNPROFILED_STEPS
    unprof = list(range(u)) + list(range(u + 1 + STEPS, 2 * u + 1 + STEPS))
    return unprof, list(range(u + 1, u + 1 + STEPS))


def run_factors(rank_run: dict, trace: Path) -> tuple[float, dict, dict]:
    """``(step factor, {phase: per-event model}, {phase: measured})`` of one rank's run."""
    unprof, prof = _windows()
    p = np.asarray(rank_run["phases"], dtype=float).reshape(-1, 11)
    _, _, _, _, _, c0, c1, c2, cg, _, c4 = p.T
    cpu = dict(zip(PHASES, (c1 - c0, cg - c2, c4 - cg)))
    mu = {k: float(np.median(v[unprof])) for k, v in cpu.items()}
    mp = {k: float(np.median(v[prof])) for k, v in cpu.items()}
    f = sum(mu.values()) / sum(mp.values())
    rec = fit_gloo_rank(build_table(load_trace(trace)), [])
    ev = {k: float(np.mean([s.events.get(k, 0) for s in rec.steps])) for k in PHASES}
    return f, phase_factors(f, mp, ev), {k: mu[k] / mp[k] for k in PHASES}


def main(dirs: list[str]) -> None:
    errs = []
    for d in map(Path, dirs):
        runs = orjson.loads((d / "runs.json").read_bytes())
        reps = sorted(k for k in runs if k.startswith("replicate#"))
        for label, folder in [("capture", d / "capture")] + [
                (k, d / "replicates" / f"r{k.split('#')[1]}") for k in reps]:
            for rr in runs[label]:
                f, pred, meas = run_factors(rr, folder / f"rank{rr['rank']}.json")
                print(f"{d.name} {label:12s} r{rr['rank']} step {f:.3f} " + "  ".join(
                    f"{k} {meas[k]:.3f} (events {pred[k]:.3f})" for k in PHASES))
                if f < 1:
                    errs.append((f, pred, meas))
    for k in PHASES:
        one = np.array([f - m[k] for f, _, m in errs])
        ev = np.array([p[k] - m[k] for _, p, m in errs])
        print(f"{k}: {len(errs)} runs with a step factor under 1: one factor's error mean "
              f"{one.mean():+.3f}, median |error| {np.median(np.abs(one)):.3f}; the events' "
              f"{ev.mean():+.3f}, {np.median(np.abs(ev)):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
