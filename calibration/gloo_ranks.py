"""Each rank's extra host time per phase of a gloo job, pooled over its capture and replicates.

A gloo job's model holds the reference rank's host ops and, for every other rank, its extra
time per phase (``RankParams.phase_extra_us``: its mean minus the reference's, when positive,
:func:`calibration.gloo.calibrate_gloo`). From one capture that extra is one run's
difference, and on a host whose cores the ranks share it is mostly that run's: which rank's
training thread ran on the busier or slower core, took more of gloo's preemption or of the
other processes' slices (measured: the DDP demo's five demos of 2026-12-06 08:47-09:36, the
ranks' backward (trace, profiled, µs) differed by −1407, −1109, +2250, +247 and −2232 in
their captures, and in the same demos' replicates, the same setting again in the same
processes, by −345 / +2823 / −1729, −679 / −713 / −2026, −2591 / +778 / −2513, −237 / +1217
/ −367 and +244 / −2375 / +1415: the sign of a capture's difference does not repeat in its
replicates, and the timed runs' backward differed by −2.3 to +1.5 ms, either sign, within a
demo). The simulator keeps a rank's extra in every step of every what-if, so a capture's
+2.4 ms on rank 1 made that rank arrive 2.4 ms late at the one all-reduce of
``bucket_cap_mb=25`` in every simulated step (its backward CPU predicted 8.45 ms against 5.10
measured), where at the defaults the capture's own transfer (measured after that late
arrival) had hidden it.

So each rank's extra is pooled like the transfers (:mod:`calibration.gloo_pool`) and the
collectives' CPU (:func:`calibration.gloo_cpu.pool_bucket_cpu`): per run, each rank's mean
phase time (µs per step, each rank's profiler factor per phase applied as in the capture,
:mod:`calibration.profiler_events`) less the reference rank's, brought to the capture's
speed (divided by the run's host speed, :mod:`calibration.host_noise`), then the mean over
the capture and its replicates, kept where positive (``measured``). A run whose ranks or
steps cannot be read as the capture's leaves the model unchanged.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.gloo import _job
from stepsim.calibration.gloo_steps import PHASES
from stepsim.calibration.profiler_events import phase_factors
from stepsim.calibration.profiler_overhead import rank_factors
from stepsim.models.params import StepModel

__all__ = ["run_phases_us", "pool_rank_extras"]


def run_phases_us(tables: list, sidecars: dict) -> dict[int, dict[str, float]]:
    """One run's mean host time per phase and rank (µs per step, ``{rank: {phase: µs}}``), as
    :func:`calibration.gloo.calibrate_gloo` measures it for the ranks' extras: each rank's
    profiler factor per phase applied, the optimizer's late resume left out where every step
    has one. ``tables``: the run's rank traces; ``sidecars``: its capture sidecars by rank.

    Raises:
        InputError: as :func:`calibration.gloo.calibrate_gloo`.
    """
    ranks, order, nums, step = _job(tables, [])
    fac, _, _ = rank_factors(order, sidecars, [])
    lagfree = step[order[0]][nums[0]].ops[-1][:2] == ("cpu", "optimizer") and all(
        step[r][n].resume_ns is not None for r in order for n in nums)
    out = {}
    for r in order:
        recs = [step[r][n] for n in nums]
        dur = {p: float(np.mean([s.opt_work_us if lagfree and p == "optimizer"
                                 else s.phase_us[p] for s in recs])) for p in PHASES}
        events = {p: float(np.mean([s.events.get(p, 0) for s in recs])) for p in PHASES}
        pf = phase_factors(fac[r], dur, events)
        out[r] = {p: dur[p] * pf.get(p, fac[r]) for p in PHASES}
    return out


def pool_rank_extras(model: StepModel, runs: list[dict[int, dict[str, float]]],
                     speeds: list[float]) -> StepModel:
    """``model`` (a gloo job's, calibrated from the first of ``runs``) with every rank's
    ``phase_extra_us`` the mean over ``runs`` (each run's :func:`run_phases_us`, the capture
    first) of its phase time less the reference rank's, each divided by the run's host speed
    (``speeds``, the capture's 1.0), kept where positive (see the module docstring). Unchanged
    with fewer than two runs, or where a run lacks a rank or the reference."""
    ref = model.meta.notes.get("reference_rank")
    want = {rp.rank for rp in model.ranks}
    if (len(runs) < 2 or len(speeds) != len(runs) or model.meta.notes.get("kind") != "cpu_ddp"
            or ref not in want or any(not want <= set(run) for run in runs)):
        return model
    ranks = []
    for rp in model.ranks:
        diff = {p: float(np.mean([(run[rp.rank][p] - run[ref][p]) / sp
                                  for run, sp in zip(runs, speeds)])) for p in PHASES}
        ranks.append(rp.model_copy(update={"phase_extra_us": {p: v for p, v in diff.items()
                                                              if v > 0}}))
    notes = {**model.meta.notes, "rank_extra_runs": len(runs), "rank_extra_capture_us": ";".join(
        f"{rp.rank}:" + ",".join(f"{p}={v:.0f}" for p, v in rp.phase_extra_us.items())
        for rp in model.ranks)}
    return model.model_copy(update={"ranks": ranks, "meta": model.meta.model_copy(
        update={"notes": notes})})
