"""Metrics over a :class:`models.simulate.SimResult`: step time, per-lane busy fraction, the
host thread's time split, gap attribution and the critical path, exposed communication,
collective skew vs transfer, kernel-sum ÷ step-wall, queue depth, and the bottleneck named in
the field's words.

All metrics are computed inside the measured window (after warm-up) of the rank summarised.
Times are µs; per-step values are window totals divided by the number of measured steps.

The bottleneck is named by :func:`name_bottleneck`: saturated cores, then a producer that sets
the pace, then the largest critical-path share.

**Gap attribution.** The *scarce lane* is the busier of two: the union of the rank's compute
kernels (every device task but collectives and host↔device copies) and the host thread; but
the compute lane whenever the device sets the pace (:func:`device_paced`: the steps end when
the device finishes, after the host has moved on), however busy the host is. Each
idle interval of the scarce lane is charged to what the next task to run waited on, followed
back through the chain that made it late (``_Blame``): a dependency that was still running (a
copy → ``h2d`` / ``d2h``, a collective → ``comm``, a kernel on another stream →
``compute:<category>``), a collective waiting for other ranks (``arrival_skew``), a copy
waiting for its engine, the idle a calibration could not explain (``device_idle``: a task's
``gap_us``), or its launch, in which case the host thread's activity in the interval is
charged: launch calls (``launch``), other CPU work (``host_compute``), ``next()`` on the
DataLoader and main-thread loading (``input``), runnable without a core (``cpu_cores``), and
blocking syncs or pageable copies, which are followed to the device task awaited. The scarce
lane's busy time plus its attributed gaps is the *critical path*; its shares sum to the step.
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np

from stepsim.models.ddp import ring_bus_bytes
from stepsim.models.device import TaskRun
from stepsim.models.simulate import SimResult
from stepsim.models.skew import RankComm, rank_comm
from stepsim.simcore.errors import ModelError
from stepsim.simcore.gcpause import gc_paused

__all__ = [
    "BOTTLENECK_LABELS", "Summary", "CollectiveStat", "CollectiveSplit", "summarize", "label",
    "amdahl_ceiling", "split_collective", "exposed_us", "union_length", "merge",
    "subtract_length", "gap_attribution", "Hole", "name_bottleneck",
]

BOTTLENECK_LABELS = {
    "input": "input pipeline (DataLoader)",
    "cpu_cores": "CPU cores (more runnable threads than cores)",
    "host_compute": "host compute (CPU work on the host thread)",
    "launch": "host launch overhead",
    "h2d": "host-to-device copy",
    "d2h": "device-to-host copy",
    "d2d": "device-to-device copy",
    "comm": "exposed communication",
    "arrival_skew": "arrival skew (waiting for a straggler)",
    "sync": "host synchronisation",
    "device_idle": "device idle the trace does not explain (launch latency, hidden dependencies)",
    "other": "unexplained idle time",
}
_EPS = 1e-6


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length (µs) of the union of ``[start, end)`` intervals."""
    return sum(e - s for s, e in merge(intervals))


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as a sorted list of disjoint ``(start, end)`` pairs (intervals
    that touch are joined)."""
    if len(intervals) < 64:
        out: list[list[float]] = []
        for s, e in sorted(intervals):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return [(s, e) for s, e in out]
    a = np.fromiter(chain.from_iterable(intervals), float, 2 * len(intervals)).reshape(-1, 2)
    a = a[np.lexsort((a[:, 1], a[:, 0]))]
    reach = np.maximum.accumulate(a[:, 1])   # the furthest end so far
    new = np.empty(len(a), dtype=bool)
    new[0] = True
    new[1:] = a[1:, 0] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(a) - 1)
    return list(zip(a[first, 0].tolist(), reach[last].tolist()))


def subtract_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length (µs) of the union of ``a`` minus the union of ``b``."""
    return _subtract_merged(merge(a), merge(b))


def _subtract_merged(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """:func:`subtract_length` of two unions (outputs of :func:`merge`)."""
    total, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


def exposed_us(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Exposed communication (µs): the union of communication intervals minus the union of
    compute intervals (``[start, end)`` pairs in µs)."""
    return subtract_length(comm, compute)


def amdahl_ceiling(fraction: float) -> float:
    """The most any change to a component that takes ``fraction`` of the step (0..1) can speed
    the step up (Amdahl's law): ``1 / (1 − fraction)``; ``inf`` for 1.

    Raises:
        ModelError: ``fraction`` outside [0, 1] or not finite.
    """
    if not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
        raise ModelError(f"fraction must be in [0, 1], got {fraction!r}")
    return math.inf if fraction == 1.0 else 1.0 / (1.0 - fraction)


@dataclass(frozen=True)
class CollectiveSplit:
    """One collective seen from every rank (µs).

    Attributes:
        transfer_us: the last rank's time in it (from its entry to its exit): the transfer.
        skew_us: per rank, the time it waited in the collective for the last rank to enter.
        straggler: the rank that entered last.
    """

    transfer_us: float
    skew_us: dict[int, float]
    straggler: int


def split_collective(enter_us: dict[int, float], exit_us: dict[int, float]) -> CollectiveSplit:
    """Split a collective's time on each rank into arrival skew and transfer: it cannot finish
    before the last rank enters, so transfer is read from that rank, never from the mean.

    Args:
        enter_us / exit_us: per rank, the instants (µs) it entered and left the collective.

    Raises:
        ModelError: no ranks, the two maps name different ranks, or a rank leaves before it
            enters.
    """
    if not enter_us or set(enter_us) != set(exit_us):
        raise ModelError(f"enter_us and exit_us must name the same ranks, got "
                         f"{sorted(enter_us)} and {sorted(exit_us)}")
    for r in enter_us:
        if exit_us[r] < enter_us[r]:
            raise ModelError(f"rank {r} leaves the collective ({exit_us[r]}) before it enters "
                             f"({enter_us[r]})")
    last = max(enter_us, key=lambda r: (enter_us[r], r))
    t_last = enter_us[last]
    return CollectiveSplit(exit_us[last] - t_last, {r: t_last - t for r, t in enter_us.items()},
                           last)


@dataclass(frozen=True)
class CollectiveStat:
    """One collective task of the summarised rank, per step (µs).

    ``observed_us`` is what a profiler shows as the kernel (entry to exit, skew included);
    ``apparent_busbw_gbps`` the bus bandwidth read naively from it; ``busbw_gbps`` the one
    from the transfer alone (0 without bytes).
    """

    task: str
    name: str
    bytes: int
    observed_us: float
    skew_us: float
    transfer_us: float
    apparent_busbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True)
class Hole:
    """One idle interval of the scarce lane: ``start_us`` (instant), ``dur_us``, and its
    attribution ``causes`` (key → µs, summing to ``dur_us``)."""

    start_us: float
    dur_us: float
    causes: dict[str, float]


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


INPUT_WAIT_SHARE = 0.10
"""The host waiting on ``next()`` for this share of the step means the producer sets the pace."""
POOL_SATURATED = 0.90
"""The CPU pool counts as saturated above this busy fraction of its cores."""
CORE_WAIT_SHARE = 0.05
"""Runnable-without-a-core time of the host thread (share of the step) that counts."""
WORKERS_STARVED = 0.25
"""Share of the workers' producing time spent waiting for a core that makes them core-bound."""


def name_bottleneck(shares: dict[str, float], input_wait: float, host_core_wait: float,
                    workers_starved: float, pool_busy: float) -> str:
    """The resource whose relief would shorten the step, in three rules, first match wins:

    1. **Cores**: the CPU pool is saturated (busy ≥ ``POOL_SATURATED`` of its cores) and
       threads wait for cores (the host ≥ ``CORE_WAIT_SHARE`` of the step, or the workers
       ≥ ``WORKERS_STARVED`` of their producing time): more cores (or fewer threads) help,
       speeding up any one thread's code mostly hands its core to another → ``cpu_cores``.
    2. **Producer sets the pace**: the host waits on ``next()`` for ≥ ``INPUT_WAIT_SHARE`` of
       the step. In a producer/consumer pipeline at steady state that wait means the loader is
       the slower stage: shortening the consumer's work only lengthens the wait → ``input``
       (``cpu_cores`` when the workers are core-starved).
    3. Otherwise the largest critical-path share (see the module docstring).

    Args:
        shares: critical-path shares (fractions of the step).
        input_wait / host_core_wait: the host thread's waits on ``next()`` / for a core, as
            fractions of the step.
        workers_starved: fraction of the workers' producing time spent waiting for a core.
        pool_busy: busy fraction of the CPU pool (0..1).
    """
    if pool_busy >= POOL_SATURATED and (host_core_wait >= CORE_WAIT_SHARE
                                         or workers_starved >= WORKERS_STARVED):
        return "cpu_cores"
    if input_wait >= INPUT_WAIT_SHARE:
        return "cpu_cores" if workers_starved >= WORKERS_STARVED else "input"
    return max(shares, key=lambda k: shares[k]) if shares else "host_compute"


def label(key: str) -> str:
    """The bottleneck key in words (``compute:gemm`` → ``device compute: gemm``)."""
    if key.startswith("compute:"):
        return f"device compute: {key.split(':', 1)[1]}"
    return BOTTLENECK_LABELS.get(key, key)


def _clip(spans, w0: float, w1: float):
    for sp in spans:
        s, e = max(sp.start_us, w0), min(sp.start_us + sp.dur_us, w1)
        if e > s:
            yield sp, s, e


def _host_key(kind: str, category: str, cause: str) -> str | None:
    """The attribution key of a host-lane span (None: follow a wait to the device)."""
    if kind == "busy":
        return {"launch": "launch", "data": "input"}.get(category, "host_compute")
    if cause in ("sync", "h2d", "d2h"):
        return None
    return {"input": "input", "cpu_cores": "cpu_cores", "launch_queue": "launch"}.get(cause, "other")


class _Blame:
    """Gap attribution for one rank: follows each idle interval back through the task runs, the
    host spans and the host's blocking waits (see the module docstring)."""

    def __init__(self, result: SimResult, rank: int):
        model = result.model
        self.tasks = model.task_map() if model is not None else {}
        self.runs = [r for r in result.runs if r.rank == rank]
        self.by_key = {(r.step, r.task): r for r in self.runs}
        self.prev: dict[tuple[int, str], TaskRun] = {}
        last: dict[str, TaskRun] = {}
        for r in self.runs:   # appended as they finish: stream order within a stream
            if r.stream in last:
                self.prev[(r.step, r.task)] = last[r.stream]
            last[r.stream] = r
        self.host_lane = f"rank{rank}.host"
        lane = self.host_lane
        self.host = sorted([sp for sp in result.spans if sp[0] == lane], key=itemgetter(3))
        self.host_ends = [sp.start_us + sp.dur_us for sp in self.host]
        self.waits = {(w.start_us, w.cause): w for w in result.host_waits if w.rank == rank}
        self.acc: dict[str, float] = defaultdict(float)
        self._keys: dict[str, list[tuple[str, float]]] = {}
        self._compute: dict[str, bool] = {}
        self._deps: dict[str, tuple] = {}

    def task_keys(self, run: TaskRun) -> list[tuple[str, float]]:
        """(key, fraction) pairs a running task is charged to (computed once per task)."""
        got = self._keys.get(run.task)
        if got is None:
            got = self._keys[run.task] = self._task_keys(run.task)
        return got

    def _task_keys(self, task: str) -> list[tuple[str, float]]:
        t = self.tasks.get(task)
        if t is None:
            return [("other", 1.0)]
        if t.kind == "collective":
            return [("comm", 1.0)]
        if t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h"):
            return [(t.copy_kind, 1.0)]
        cats = t.category_us()
        total = sum(cats.values())
        if total <= 0:
            return [(f"compute:{t.category}", 1.0)]
        return [(f"compute:{c}", v / total) for c, v in cats.items() if v > 0]

    def is_compute(self, run: TaskRun) -> bool:
        got = self._compute.get(run.task)
        if got is None:
            t = self.tasks.get(run.task)
            got = self._compute[run.task] = t is not None and t.kind != "collective" and not (
                t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h"))
        return got

    def _add(self, key: str, us: float):
        if us > _EPS:
            self.acc[key] += us

    def blame(self, item: tuple) -> None:
        """Charge an interval: ``("start", run, a, b)`` (waiting for ``run`` to start,
        ``b ≤ run.start_us``), ``("finish", run, a, b)`` (waiting for it to finish) or
        ``("host", None, a, b)`` (waiting for the host to issue something)."""
        stack = [item]
        while stack:
            kind, run, a, b = stack.pop()
            if b - a <= _EPS:
                continue
            if kind == "finish":   # (x if x > y else y: max(y, x) without the call)
                st = run.start_us
                lo = st if st > a else a
                for k, f in self.task_keys(run):
                    self._add(k, (b - lo) * f)
                stack.append(("start", run, a, st if st < b else b))
            elif kind == "start":
                entered = run.ready_us + run.gap_us
                if run.start_us > entered + _EPS:
                    t = self.tasks.get(run.task)
                    key = "arrival_skew" if t is not None and t.kind == "collective" else (
                        t.copy_kind if t is not None and t.copy_kind else "other")
                    self._add(key, b - max(a, entered))
                    b = min(b, entered)
                    if b - a <= _EPS:
                        continue
                if run.gap_us > _EPS:
                    self._add("device_idle", b - max(a, run.ready_us))
                    b = min(b, run.ready_us)
                    if b - a <= _EPS:
                        continue
                stack.append(self._binding(run, a, b))
            else:
                self._host(a, b, stack)

    def _binding(self, run: TaskRun, a: float, b: float) -> tuple:
        """What made ``run`` ready last: a dependency, its stream predecessor or its launch."""
        best, best_t = None, -math.inf
        deps = self._deps.get(run.task)
        if deps is None:
            t = self.tasks.get(run.task)
            deps = self._deps[run.task] = (
                tuple((0, w) for w in t.waits) + tuple((-1, w) for w in t.prev_waits)
                if t is not None else ())
        by_key, step = self.by_key, run.step
        for ds, w in deps:
            r = by_key.get((step + ds, w))
            if r is not None and r.end_us > best_t:
                best, best_t = r, r.end_us
        p = self.prev.get((run.step, run.task))
        if p is not None and p.end_us > best_t + _EPS:
            best, best_t = p, p.end_us
        if run.launch_us is not None and run.launch_us > best_t + _EPS:
            return ("host", None, a, min(b, run.launch_us))
        if best is None or best_t <= a + _EPS:
            self._add("other", b - a)
            return ("host", None, a, a)
        return ("finish", best, a, min(b, best_t))

    def _host(self, a: float, b: float, stack: list) -> None:
        i = bisect.bisect_right(self.host_ends, a)
        cur, host, n = a, self.host, len(self.host)
        while i < n and cur < b:
            sp = host[i]
            s, e = sp.start_us, self.host_ends[i]
            s, e = (cur if cur > s else s), (b if b < e else e)   # max(s, cur), min(e, b)
            if s > cur:
                self._add("other", (b if b < s else s) - cur)
            if e > s:
                key = _host_key(sp.kind, sp.category, sp.cause)
                w = self.waits.get((sp.start_us, sp.cause)) if key is None else None
                if w is not None:
                    runs = [self.by_key.get(x) for x in w.tasks]
                    runs = [r for r in runs if r is not None]
                    if runs:
                        stack.append(("finish", max(runs, key=lambda r: r.end_us), s, e))
                    else:
                        self._add("sync", e - s)
                else:
                    self._add(key or "sync", e - s)
            cur = e if e > cur else cur
            i += 1
        if cur < b:
            self._add("other", b - cur)


def gap_attribution(result: SimResult, rank: int | None = None
                    ) -> tuple[str, dict[str, float], dict[str, float], list[Hole]]:
    """Critical path of one rank over its measured window.

    Returns:
        ``(scarce_lane, busy_us, gap_us, holes)``: the scarce lane (``compute`` or the host
        lane), its busy time by ``compute:<category>`` and its idle time by cause, as window
        totals (µs), which together cover the window exactly; and every idle interval of the
        compute lane with its own attribution. When the host thread is the scarce lane its
        busy time is keyed by what it did (``host_compute``, ``launch``, ``input``) and its
        waits are followed to their causes; ``holes`` is then empty.
    """
    rank = result.ranks[0] if rank is None else rank
    return _critical_path(_Blame(result, rank), *result.rank_window_us(rank),
                          device_paced(result, rank))


def device_paced(result: SimResult, rank: int) -> bool:
    """Whether most measured steps of ``rank`` ended when its device finished the step's work
    after the host had already started the next one (the device sets the pace, whatever the
    host's busy time)."""
    i = result.ranks.index(rank)
    marks, starts = result.step_marks_us[i], result.step_starts_us[i]
    ks = range(result.warmup + 1, result.warmup + result.step_us.shape[1] + 1)
    later = sum(1 for k in ks if k < len(starts) and marks[k] > starts[k] + _EPS)
    return later * 2 > len(ks)


def _critical_path(bl: _Blame, w0: float, w1: float, paced_by_device: bool,
                   union: list[tuple[float, float]] | None = None,
                   holes_in: tuple[float, float] | None = None
                   ) -> tuple[str, dict[str, float], dict[str, float], list[Hole]]:
    """:func:`gap_attribution` of ``bl``'s rank in ``[w0, w1)``; ``union``: the merged compute
    runs when known; ``holes_in``: only the holes starting in this ``[start, end)`` are
    returned (all by default)."""
    compute = sorted([r for r in bl.runs if bl.is_compute(r)], key=attrgetter("start_us"))
    if union is None:
        union = merge([(max(r.start_us, w0), min(r.end_us, w1)) for r in compute
                       if r.end_us > w0 and r.start_us < w1 and r.end_us > r.start_us])
    host_busy = 0
    for sp, end in zip(bl.host, bl.host_ends):
        st = sp.start_us
        if sp.kind == "busy" and st < w1 and end > w0:
            host_busy += (w1 if w1 < end else end) - (w0 if w0 > st else st)
    if host_busy > sum(e - s for s, e in union) and not paced_by_device:
        busy_h: dict[str, float] = defaultdict(float)
        for sp, s, e in _clip(bl.host, w0, w1):
            if sp.kind == "busy":
                busy_h[_host_key("busy", sp.category, "")] += e - s
            else:
                bl.blame(("host", None, s, e))
        bl._add("other", (w1 - w0) - sum(busy_h.values()) - sum(bl.acc.values()))
        return bl.host_lane, dict(busy_h), dict(bl.acc), []
    raw: dict[str, float] = defaultdict(float)
    for r in compute:
        s, e = r.start_us, r.end_us
        s, e = (w0 if w0 > s else s), (w1 if w1 < e else e)   # max(s, w0), min(e, w1)
        if e > s:
            for k, f in bl.task_keys(r):
                raw[k] += (e - s) * f
    scale = sum(e - s for s, e in union) / max(sum(raw.values()), _EPS)
    busy = {k: v * scale for k, v in raw.items()}
    starts = [r.start_us for r in compute]
    edges = [w0] + [x for se in union for x in se] + [w1]
    holes = []
    h0, h1 = holes_in if holes_in is not None else (-math.inf, math.inf)
    for g0, g1 in zip(edges[::2], edges[1::2]):
        if g1 - g0 <= _EPS:
            continue
        kept = h0 <= g0 < h1
        before = dict(bl.acc) if kept else None
        j = bisect.bisect_left(starts, g1 - _EPS)
        if j < len(compute):
            bl.blame(("start", compute[j], g0, min(g1, compute[j].start_us)))
        else:
            bl.blame(("host", None, g0, g1))
        if kept:
            holes.append(Hole(g0, g1 - g0, {k: v - before.get(k, 0.0) for k, v in bl.acc.items()
                                            if v - before.get(k, 0.0) > _EPS}))
    return "compute", busy, dict(bl.acc), holes


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


def _collectives(result: SimResult, rank: int, w0: float, w1: float, steps: int
                 ) -> tuple[list[CollectiveStat], int | None]:
    model = result.model
    if model is None:
        return [], None
    tasks = model.task_map()
    n = model.comm.world_size
    mine: dict[str, list[TaskRun]] = defaultdict(list)
    entries: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    for r in result.runs:
        t = tasks.get(r.task)
        if t is None or t.kind != "collective":
            continue
        entries[(r.step, r.task)][r.rank] = r.ready_us + r.gap_us   # entered
        if r.rank == rank and w0 <= r.ready_us < w1:
            mine[r.task].append(r)
    stats = []
    for tid, rs in mine.items():
        t = tasks[tid]
        obs = sum(r.end_us - r.ready_us - r.gap_us for r in rs) / steps
        skew = sum(r.start_us - r.ready_us - r.gap_us for r in rs) / steps
        xfer = sum(r.end_us - r.start_us for r in rs) / steps
        moved = ring_bus_bytes(t.bytes or 0, n) * len(rs) / steps
        stats.append(CollectiveStat(tid, t.name or tid, t.bytes or 0, obs, skew, xfer,
                                    moved / obs / 1e3 if obs > 0 else 0.0,
                                    moved / xfer / 1e3 if xfer > 0 else 0.0))
    lateness: dict[int, float] = defaultdict(float)   # rank -> skew it caused, summed
    for ent in entries.values():
        late = max(ent, key=lambda r: (ent[r], r))
        if len(ent) > 1 and ent[late] - min(ent.values()) > _EPS:
            lateness[late] += ent[late] - min(ent.values())
    straggler = max(lateness, key=lambda r: lateness[r]) if lateness else None
    return stats, straggler


@gc_paused
def summarize(result: SimResult, rank: int | None = None) -> Summary:
    """Compute the :class:`Summary` of ``result`` for ``rank`` (default: the first rank).

    Raises:
        ModelError: ``rank`` was not simulated.
    """
    rank = result.ranks[0] if rank is None else rank
    if rank not in result.ranks:
        raise ModelError(f"rank {rank} was not simulated (ranks: {result.ranks})")
    w0, w1 = result.rank_window_us(rank)
    steps = result.step_us.shape[1]
    per = 1.0 / steps
    width = max(w1 - w0, _EPS)
    job = result.job_step_us
    windows = {r: result.rank_window_us(r) for r in result.ranks}
    busy: dict[str, list] = defaultdict(list)
    lane_rank: dict[str, int] = {}
    host_split: dict[str, float] = defaultdict(float)
    dev_cat: dict[str, float] = defaultdict(float)
    skew = 0.0
    loader_core_us = 0.0
    worker_busy = worker_starved = 0.0
    host_lane = f"rank{rank}.host"
    tpw = result.model.loader.threads_per_worker if result.model is not None else 1
    lanes: dict[str, int] = {}   # lane -> 0 host thread, 1 stream, 2 worker, 3 pin, 4 other
    for lane, _, kind, start, dur, _, sp_rank, cause, category in result.spans:
        a, b = windows[sp_rank]
        e = start + dur
        s, e = (a if a > start else start), (b if b < e else e)   # max(start, a), min(end, b)
        if e <= s:
            continue
        if kind == "busy":
            busy[lane].append((s, e))
            lane_rank[lane] = sp_rank
        if sp_rank != rank:
            continue
        where = lanes.get(lane)
        if where is None:
            where = lanes[lane] = (0 if lane == host_lane else 1 if ".stream:" in lane
                                   else 2 if ".worker" in lane
                                   else 3 if lane.endswith(".pin_memory") else 4)
        if where == 0:
            host_split[f"busy:{category}" if kind == "busy" else f"wait:{cause}"] += e - s
        elif where == 1:
            if kind == "busy":
                dev_cat[category] += e - s
            elif cause == "arrival_skew":
                skew += e - s
        elif where != 4:
            worker = where == 2
            if kind == "busy":
                loader_core_us += (e - s) * (tpw if worker else 1)
                worker_busy += (e - s) if worker else 0.0
            elif worker and cause == "cpu_cores":
                worker_starved += e - s
    lane_busy = {lane: union_length(iv) / max(windows[lane_rank[lane]][1]
                                              - windows[lane_rank[lane]][0], _EPS)
                 for lane, iv in sorted(busy.items())}
    bl = _Blame(result, rank)
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
    exposed = _subtract_merged(comm_union, compute_union) * per
    comm_busy = sum(e - s for s, e in comm_union) * per
    marks = result.step_marks_us[result.ranks.index(rank)]
    last0, last1 = marks[result.warmup + steps - 1], marks[result.warmup + steps]
    scarce, cp_busy, cp_gap, holes = _critical_path(bl, w0, w1, device_paced(result, rank),
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
    key = name_bottleneck(shares, host_split.get("wait:input", 0.0) / width,
                          host_split.get("wait:cpu_cores", 0.0) / width, starved, pool_busy)
    collectives, straggler = _collectives(result, rank, w0, w1, steps)
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
        rank_comm=rank_comm(result))


def _batches_per_step(result: SimResult) -> int:
    model = result.model
    return 0 if model is None else sum(op.kind == "next_batch" for op in model.host.ops)
