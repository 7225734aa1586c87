"""Metrics over a :class:`models.simulate.SimResult`: step time, per-lane busy fraction, the
host thread's time split, gap attribution and the critical path, exposed communication,
collective skew vs transfer, kernel-sum ÷ step-wall, queue depth, and the bottleneck named in
the field's words.

All metrics are computed inside the measured window (after warm-up) of the rank summarised.
Times are µs; per-step values are window totals divided by the number of measured steps.

The bottleneck is named by :func:`name_bottleneck`: saturated cores, then a producer that sets
the pace, then the largest critical-path share.

The pass over the spans is :mod:`models.span_pass`'s, gap attribution and the critical path
:mod:`models.blame`'s, the bottleneck's rules
:mod:`models.bottleneck`'s, collective skew vs transfer :mod:`models.collectives`'s and the
interval arithmetic :mod:`models.intervals`'s; their public names are re-exported here.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import numpy.ma  # noqa: F401  (np.median loads it on its first call: here, before a sweep's
# pool forks, not in every worker: 15 ms each)

from stepsim.models.blame import Blame, Hole, critical_path, device_paced, gap_attribution
from stepsim.models.bottleneck import (BOTTLENECK_LABELS, CORE_WAIT_SHARE, INPUT_WAIT_SHARE,
                                       POOL_SATURATED, WORKERS_STARVED, amdahl_ceiling, label,
                                       name_bottleneck)
from stepsim.models.collectives import (CollectiveSplit, CollectiveStat, collective_stats,
                                        split_collective)
from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.intervals import (exposed_us, merge, subtract_length, subtract_merged,
                                      union_length)
from stepsim.models.phases import rank_phases_us
from stepsim.models.simulate import SimResult
from stepsim.models.skew import RankComm, rank_comm
from stepsim.models.span_pass import span_pass
from stepsim.simcore.errors import ModelError
from stepsim.simcore.gcpause import gc_paused

__all__ = [
    "BOTTLENECK_LABELS", "BRIEF_FIELDS", "Summary", "brief_summary", "CollectiveStat",
    "CollectiveSplit", "summarize", "label", "amdahl_ceiling", "split_collective", "exposed_us",
    "union_length", "merge", "subtract_length", "gap_attribution", "Hole", "name_bottleneck",
    "device_paced", "INPUT_WAIT_SHARE", "POOL_SATURATED", "CORE_WAIT_SHARE", "WORKERS_STARVED",
]



@dataclass(frozen=True)
class Summary:
    """The numbers a report needs about one simulation (of ``rank``; ranks' steps coincide).

    Attributes:
        mean_step_us / median_step_us / p10_step_us / p90_step_us: job step time (µs, the
            slowest rank each step).
        lane_busy: lane → busy fraction of its rank's window (0..1).
        host_split_us: per measured step, host-thread time (µs) by ``busy:<category>`` and
            ``wait:<cause>``.
        device_category_us: per step, device busy µs by task category (all streams).
        exposed_comm_us: per step, collective transfer time not hidden under compute kernels.
        arrival_skew_us: per step, time the rank's collectives waited for other ranks.
        bottleneck: key of BOTTLENECK_LABELS, or ``compute:<category>``.
        bottleneck_label: the same in words.
        shares: fraction of the step each critical-path component accounts for (sums to 1).
        rank: the rank summarised.
        rank_step_us: per rank, its own mean step time (µs).
        scarce_lane: ``compute`` (the union of compute kernels) or the host lane's name.
        critical_path_us: per step, the scarce lane's busy time by ``compute:<category>`` plus
            its idle time by cause (µs); sums to the rank's step.
        gap_us: per step, only the idle part of ``critical_path_us``.
        compute_busy_us: per step, the scarce lane's busy time (union of compute kernels).
        kernel_sum_us / kernel_ratio: per step, the sum of compute kernel durations, and that
            sum ÷ the step (kernel-sum ÷ step-wall).
        comm_busy_us / hidden_comm_us: per step, collective transfer time, and the part of it
            under compute.
        collectives: per collective task, observed vs skew vs transfer.
        straggler_rank: the rank that most often entered collectives last (None: one rank or
            no skew).
        queue_mean / queue_max / queue_empty_frac: ready-batch queue depth over the window
            (time-weighted mean, maximum, fraction of time empty); queue_cap is
            ``num_workers × prefetch_factor``.
        batches_per_s: batches the main thread took per second.
        loader_cores_busy: mean cores busy with worker and pin-memory work.
        ceilings: per critical-path component, the Amdahl ceiling of removing it.
        holes: the scarce lane's idle intervals in the last measured step, ``start_us``
            counted from that step's start.
        cpu_pool_busy: busy fraction of the rank's CPU pool (workers, pin thread and, when it
            takes a core, the host thread).
        device_busy_us: per step, the union of every device task's run on the rank (kernels,
            copies, collectives from the rank's entry, since a collective kernel occupies the
            device while it waits for the other ranks; all streams; ``gap_us`` idle excluded):
            what a profiler's "GPU busy" measures.
        rank_comm: per rank (every rank, not only ``rank``), its barriers' and its other
            collectives' time split into arrival skew and transfer (:mod:`models.skew`;
            empty for one rank).
        rank_phases_us: per rank (every rank), its step's phases (µs, means over the
            measured steps, :func:`models.phases.rank_phases_us`); empty for one rank and in
            a brief summary.
        brief: True when only :data:`BRIEF_FIELDS` were computed (:func:`brief_summary`);
            the other fields are then empty, not measured as zero.
    """

    mean_step_us: float
    median_step_us: float
    p10_step_us: float
    p90_step_us: float
    lane_busy: dict[str, float]
    host_split_us: dict[str, float]
    device_category_us: dict[str, float]
    exposed_comm_us: float
    arrival_skew_us: float
    bottleneck: str
    bottleneck_label: str
    shares: dict[str, float]
    rank: int = 0
    rank_step_us: dict[int, float] = field(default_factory=dict)
    scarce_lane: str = ""
    critical_path_us: dict[str, float] = field(default_factory=dict)
    gap_us: dict[str, float] = field(default_factory=dict)
    compute_busy_us: float = 0.0
    kernel_sum_us: float = 0.0
    kernel_ratio: float = 0.0
    comm_busy_us: float = 0.0
    hidden_comm_us: float = 0.0
    collectives: list[CollectiveStat] = field(default_factory=list)
    straggler_rank: int | None = None
    queue_mean: float = 0.0
    queue_max: float = 0.0
    queue_cap: int = 0
    queue_empty_frac: float = 0.0
    batches_per_s: float = 0.0
    loader_cores_busy: float = 0.0
    ceilings: dict[str, float] = field(default_factory=dict)
    holes: list[Hole] = field(default_factory=list)
    cpu_pool_busy: float = 0.0
    device_busy_us: float = 0.0
    rank_comm: list[RankComm] = field(default_factory=list)
    rank_phases_us: dict[int, dict[str, float]] = field(default_factory=dict)
    brief: bool = False

    @property
    def over_ranks_us(self) -> float | None:
        """What the job's step (each step the slowest rank's) adds over the ranks' mean step
        (µs): the per-step maximum's share; None for one rank."""
        if len(self.rank_step_us) < 2:
            return None
        return self.mean_step_us - float(np.mean(list(self.rank_step_us.values())))


def _queue_stats(result: SimResult, rank: int, w0: float, w1: float) -> tuple[float, float, float]:
    """(time-weighted mean, max, fraction of time at zero) of the ready queue in [w0, w1)."""
    pts = result.samples.get(f"rank{rank}.loader.ready", [])
    if not pts or w1 <= w0:
        return 0.0, 0.0, 0.0
    times = [t for t, _ in pts]
    i = bisect.bisect_right(times, w0) - 1
    val = pts[i][1] if i >= 0 else 0.0
    t, area, empty, vmax = w0, 0.0, 0.0, val
    for tk, vk in pts[max(i + 1, 0):]:
        if tk >= w1:
            break
        area += val * (tk - t)
        empty += (tk - t) if val == 0 else 0.0
        t, val = tk, vk
        vmax = max(vmax, val)
    area += val * (w1 - t)
    empty += (w1 - t) if val == 0 else 0.0
    return area / (w1 - w0), float(vmax), empty / (w1 - w0)


def _named(result: SimResult, rank: int, bl: Blame, w0: float, w1: float,
           compute_union: list, host_split: dict, loader_core_us: float, worker_busy: float,
           worker_starved: float):
    """The critical path of the window and the bottleneck it names: ``(key, shares, crit,
    scarce lane, gap by cause, the last step's holes, the CPU pool's busy fraction)``."""
    steps = result.step_us.shape[1]
    per, width = 1.0 / steps, max(w1 - w0, _EPS)
    marks = result.step_marks_us[result.ranks.index(rank)]
    last0, last1 = marks[result.warmup + steps - 1], marks[result.warmup + steps]
    scarce, cp_busy, cp_gap, holes = critical_path(bl, w0, w1, device_paced(result, rank),
                                                   compute_union, (last0 - _EPS, last1))
    last_holes = [Hole(h.start_us - last0, h.dur_us, h.causes) for h in holes]
    crit: dict[str, float] = defaultdict(float)
    for part in (cp_busy, cp_gap):
        for k, v in part.items():
            crit[k] += v * per
    crit = dict(sorted(crit.items()))
    rank_step = width * per
    shares = {k: v / rank_step for k, v in crit.items() if v > _EPS}
    uses_core = result.model is None or result.model.host.uses_core
    cores = result.model.loader.host_cores if result.model is not None else 1
    host_cpu = sum(v for k, v in host_split.items() if k.startswith("busy:")) if uses_core else 0.0
    pool_busy = (loader_core_us + host_cpu) / (cores * width)
    starved = worker_starved / max(worker_busy + worker_starved, _EPS)
    # the host thread's time in next(): waiting for the workers, or (num_workers=0, or
    # unpickling) its own work on the batch, as a measured trace's next() spans hold both
    in_next = host_split.get("wait:input", 0.0) + host_split.get("busy:data", 0.0)
    key = name_bottleneck(shares, in_next / width,
                          host_split.get("wait:cpu_cores", 0.0) / width, starved, pool_busy)
    return key, shares, crit, scarce, cp_gap, last_holes, pool_busy


def _rank(result: SimResult, rank: int | None) -> int:
    rank = result.ranks[0] if rank is None else rank
    if rank not in result.ranks:
        raise ModelError(f"rank {rank} was not simulated (ranks: {result.ranks})")
    return rank


BRIEF_FIELDS = ("mean_step_us", "median_step_us", "p10_step_us", "p90_step_us",
                "host_split_us", "bottleneck", "bottleneck_label", "shares", "rank",
                "rank_step_us", "scarce_lane", "critical_path_us", "gap_us", "queue_cap",
                "loader_cores_busy", "ceilings", "holes", "cpu_pool_busy", "rank_comm", "brief")
"""The :class:`Summary` fields :func:`brief_summary` fills (as :func:`summarize` does)."""


@gc_paused
def brief_summary(result: SimResult, rank: int | None = None) -> Summary:
    """The :class:`Summary` of ``result`` with only :data:`BRIEF_FIELDS`: the step times, the
    bottleneck and the critical path it is named from, the host thread's split; the lanes,
    device categories, communication and queue (one more pass over every span and task run)
    are left at their empty defaults and ``brief`` is True. What a sweep point reports.

    Raises:
        ModelError: ``rank`` was not simulated.
    """
    rank = _rank(result, rank)
    w0, w1 = result.rank_window_us(rank)
    steps = result.step_us.shape[1]
    per, width, job = 1.0 / steps, max(w1 - w0, _EPS), result.job_step_us
    host_split, loader_core_us, worker_busy, worker_starved, host, *_ = span_pass(
        result, rank, {rank: (w0, w1)}, lanes=False)
    key, shares, crit, scarce, cp_gap, last_holes, pool_busy = _named(
        result, rank, Blame(result, rank, host), w0, w1, None, host_split, loader_core_us,
        worker_busy, worker_starved)
    stats = result.loader_stats[result.ranks.index(rank)] if result.loader_stats else None
    return Summary(
        mean_step_us=float(job.mean()), median_step_us=float(np.median(job)),
        p10_step_us=float(np.percentile(job, 10)), p90_step_us=float(np.percentile(job, 90)),
        lane_busy={}, host_split_us={k: v * per for k, v in sorted(host_split.items())},
        device_category_us={}, exposed_comm_us=0.0, arrival_skew_us=0.0, bottleneck=key,
        bottleneck_label=label(key), shares=shares, rank=rank,
        rank_step_us={r: float(result.step_us[i].mean()) for i, r in enumerate(result.ranks)},
        scarce_lane=scarce, critical_path_us=crit,
        gap_us={k: v * per for k, v in sorted(cp_gap.items())},
        queue_cap=stats.cap if stats else 0, loader_cores_busy=loader_core_us / width,
        ceilings={k: amdahl_ceiling(min(v, 1.0)) for k, v in shares.items()}, holes=last_holes,
        cpu_pool_busy=pool_busy, rank_comm=rank_comm(result), brief=True)


@gc_paused
def summarize(result: SimResult, rank: int | None = None) -> Summary:
    """Compute the :class:`Summary` of ``result`` for ``rank`` (default: the first rank).

    Raises:
        ModelError: ``rank`` was not simulated.
    """
    rank = _rank(result, rank)
    w0, w1 = result.rank_window_us(rank)
    steps = result.step_us.shape[1]
    per = 1.0 / steps
    width = max(w1 - w0, _EPS)
    job = result.job_step_us
    windows = {r: result.rank_window_us(r) for r in result.ranks}
    host_split, loader_core_us, worker_busy, worker_starved, host, busy, lane_rank, dev_cat, \
        skew = span_pass(result, rank, windows, lanes=True)
    lane_busy = {lane: union_length(iv) / max(windows[lane_rank[lane]][1]
                                              - windows[lane_rank[lane]][0], _EPS)
                 for lane, iv in sorted(busy.items())}
    bl = Blame(result, rank, host)
    compute_iv, comm_iv, all_iv, kernel_sum = [], [], [], 0.0
    for r in bl.runs:
        t = bl.tasks.get(r.task)
        coll = t is not None and t.kind == "collective"
        st, e = r.start_us, r.end_us
        a = r.ready_us + r.gap_us if coll else st   # a collective from entry
        a, e = (w0 if w0 > a else a), (w1 if w1 < e else e)   # max(a, w0), min(end, w1)
        if e > a:
            all_iv.append((a, e))
        s = w0 if w0 > st else st
        if e <= s:
            continue
        if coll:
            comm_iv.append((s, e))
        elif bl.is_compute(r):
            compute_iv.append((s, e))
            kernel_sum += e - s
    compute_union, comm_union = merge(compute_iv), merge(comm_iv)
    exposed = subtract_merged(comm_union, compute_union) * per
    comm_busy = sum(e - s for s, e in comm_union) * per
    key, shares, crit, scarce, cp_gap, last_holes, pool_busy = _named(
        result, rank, bl, w0, w1, compute_union, host_split, loader_core_us, worker_busy,
        worker_starved)
    collectives, straggler = collective_stats(result, rank, w0, w1, steps)
    q_mean, q_max, q_empty = _queue_stats(result, rank, w0, w1)
    stats = result.loader_stats[result.ranks.index(rank)] if result.loader_stats else None
    return Summary(
        mean_step_us=float(job.mean()), median_step_us=float(np.median(job)),
        p10_step_us=float(np.percentile(job, 10)), p90_step_us=float(np.percentile(job, 90)),
        lane_busy=lane_busy, host_split_us={k: v * per for k, v in sorted(host_split.items())},
        device_category_us={k: v * per for k, v in sorted(dev_cat.items())},
        exposed_comm_us=exposed, arrival_skew_us=skew * per, bottleneck=key,
        bottleneck_label=label(key), shares=shares, rank=rank,
        rank_step_us={r: float(result.step_us[i].mean()) for i, r in enumerate(result.ranks)},
        scarce_lane=scarce, critical_path_us=crit,
        gap_us={k: v * per for k, v in sorted(cp_gap.items())},
        compute_busy_us=sum(e - s for s, e in compute_union) * per, kernel_sum_us=kernel_sum * per,
        kernel_ratio=kernel_sum / width, comm_busy_us=comm_busy,
        hidden_comm_us=comm_busy - exposed, collectives=collectives, straggler_rank=straggler,
        queue_mean=q_mean, queue_max=q_max, queue_cap=stats.cap if stats else 0,
        queue_empty_frac=q_empty, batches_per_s=_batches_per_step(result) * steps / width * 1e6,
        loader_cores_busy=loader_core_us / width,
        ceilings={k: amdahl_ceiling(min(v, 1.0)) for k, v in shares.items()}, holes=last_holes,
        cpu_pool_busy=pool_busy, device_busy_us=union_length(all_iv) * per,
        rank_comm=rank_comm(result),
        rank_phases_us=rank_phases_us(result) if len(result.ranks) > 1 else {})


def _batches_per_step(result: SimResult) -> int:
    model = result.model
    return 0 if model is None else sum(op.kind == "next_batch" for op in model.host.ops)
