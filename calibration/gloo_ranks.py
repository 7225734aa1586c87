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
the capture and its replicates, kept where positive (``measured``).

Each run's positive difference is bounded by the CPU the rank's training thread used beyond
the reference's a step over the run's unprofiled steps (:func:`cpu_bounded`): what the trace's
walls add past that is time waiting for a core, which the simulator's shared cores already
price, or the profiler's. Measured (ddp20, 2026-12-07 08:46): the capture's rank 0 read +3.9
ms of backward from a page-fault storm under the profiler (about 1,030 minor faults and +11 ms
of CPU a step over 14 of its 20 profiled steps, none in its unprofiled ones: 11.4 against 11.3
ms a step), and the model kept +2.3 ms of backward CPU on rank 0 where the demo's timed runs
measured the two ranks' backward CPU equal (rank 0 less rank 1 −0.01 ms, sd 0.13 over 15
runs); at 08:54 +3.5 ms from the ranks' unequal waits for a core under outside load (unprofiled
CPU within 0.4 ms). A run whose ranks or
steps cannot be read as the capture's leaves the model unchanged.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.gloo import _job
from stepsim.calibration.gloo_steps import PHASES
from stepsim.calibration.profiler_events import phase_factors
from stepsim.calibration.profiler_overhead import rank_factors
from stepsim.models.params import StepModel

__all__ = ["run_phases_us", "pool_rank_extras", "unprofiled_cpu_us", "cpu_bounded"]


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


def unprofiled_cpu_us(side) -> float | None:
    """One rank's training-thread CPU a step (µs, the median) over a run's unprofiled steps
    (:data:`demo.ddp_job.UNPROFILED_STEPS` before and after its window: no profiler, the same
    process), the first step left out; None with fewer than 2 such steps."""
    from stepsim.calibration.page_faults import step_work_us

    steps = list(getattr(side, "steps", None) or [])
    got = [step_work_us(s) for s in steps[1:] if not s.profiled and not s.profiler_on]
    return float(np.median(got)) if len(got) >= 2 else None


def cpu_bounded(run: dict[int, dict[str, float]], ref: int, rank: int,
                cpu: dict[int, float | None] | None) -> dict[str, float]:
    """One run's phase differences of ``rank`` less ``ref`` (µs), their positive part scaled
    down so it sums to no more than the two ranks' unprofiled CPU difference a step (``cpu``:
    :func:`unprofiled_cpu_us` per rank; unbounded where either is unknown): what a rank does
    beyond the reference is work, its CPU; the rest of a longer wall was a wait for a core,
    which the simulator's shared cores price, or the profiler's (see the module docstring)."""
    diff = {p: run[rank][p] - run[ref][p] for p in PHASES}
    if not cpu or cpu.get(rank) is None or cpu.get(ref) is None:
        return diff
    room = max(cpu[rank] - cpu[ref], 0.0)
    pos = sum(v for v in diff.values() if v > 0)
    if pos <= room:
        return diff
    return {p: v * room / pos if v > 0 else v for p, v in diff.items()}


def pool_rank_extras(model: StepModel, runs: list[dict[int, dict[str, float]]],
                     speeds: list[float],
                     cpus: list[dict[int, float | None]] | None = None) -> StepModel:
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
    cpus = cpus if cpus is not None and len(cpus) == len(runs) else [None] * len(runs)
    ranks = []
    for rp in model.ranks:
        each = [cpu_bounded(run, ref, rp.rank, cpu) for run, cpu in zip(runs, cpus)]
        diff = {p: float(np.mean([d[p] / sp for d, sp in zip(each, speeds)])) for p in PHASES}
        ranks.append(rp.model_copy(update={"phase_extra_us": {p: v for p, v in diff.items()
                                                              if v > 0}}))
    notes = {**model.meta.notes, "rank_extra_runs": len(runs), "rank_extra_capture_us": ";".join(
        f"{rp.rank}:" + ",".join(f"{p}={v:.0f}" for p, v in rp.phase_extra_us.items())
        for rp in model.ranks)}
    return model.model_copy(update={"ranks": ranks, "meta": model.meta.model_copy(
        update={"notes": notes})})
