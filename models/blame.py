"""Gap attribution and the critical path of one rank over its measured window (µs).

**Gap attribution.** The *scarce lane* is the busier of two: the union of the rank's compute
kernels (every device task but collectives and host↔device copies) and the host thread; but
the compute lane whenever the device sets the pace (:func:`device_paced`: the steps end when
the device finishes, after the host has moved on), however busy the host is. Each
idle interval of the scarce lane is charged to what the next task to run waited on, followed
back through the chain that made it late (:class:`Blame`): a dependency that was still running (a
copy → ``h2d`` / ``d2h``, a collective → ``comm``, a kernel on another stream →
``compute:<category>``), a collective waiting for other ranks (``arrival_skew``), a copy
waiting for its engine, the idle a calibration could not explain (``device_idle``: a task's
``gap_us``), or its launch, in which case the host thread's activity in the interval is
charged: launch calls (``launch``), other CPU work (``host_compute``), ``next()`` on the
DataLoader and main-thread loading (``input``), runnable without a core (``cpu_cores``), and
blocking syncs or pageable copies, which are followed to the device task awaited. The scarce
lane's busy time plus its attributed gaps is the *critical path*; its shares sum to the step.

**Exact sums.** Loops over every span or run of a window are done with numpy where that gives
the same floats as a Python loop: element-wise ``+ - * min max`` are IEEE operations either
way, and a running total is ``numpy.cumsum`` (a sequential sum, in the same order; not
``numpy.sum``, which sums pairwise), so a summary is the same, bit for bit, as before.
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import compress
from operator import add, itemgetter

import numpy as np

from stepsim.models.blame_busy import busy_by_key, running_total
from stepsim.models.blame_holes import charge_holes
from stepsim.models.blame_host import host_walk
from stepsim.models.device import TaskRun
from stepsim.models.host_columns import lane_spans_of
from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.intervals import merged_arrays
from stepsim.models.run_columns import RunLookup, block_columns, compute_runs
from stepsim.models.simulate import SimResult


@dataclass(frozen=True)
class Hole:
    """One idle interval of the scarce lane: ``start_us`` (instant), ``dur_us``, and its
    attribution ``causes`` (key → µs, summing to ``dur_us``)."""

    start_us: float
    dur_us: float
    causes: dict[str, float]


_STEP, _TASK, _START, _DUR = itemgetter(1), itemgetter(2), itemgetter(3), itemgetter(4)
_RUN_START, _RUN_END = itemgetter(6), itemgetter(7)
_KIND, _BUSY = itemgetter(2), "busy".__eq__


def lane_spans(spans: list, lane: str) -> list:
    """The spans on ``lane``, in emission order."""
    return list(compress(spans, map(lane.__eq__, map(itemgetter(0), spans))))


def _clip(spans, w0: float, w1: float):
    for sp in spans:
        s, e = max(sp.start_us, w0), min(sp.start_us + sp.dur_us, w1)
        if e > s:
            yield sp, s, e


_BUSY_KEYS = {"launch": "launch", "data": "input"}
_WAIT_KEYS = {"input": "input", "cpu_cores": "cpu_cores", "launch_queue": "launch"}
_FOLLOWED = ("sync", "h2d", "d2h")


def _host_key(kind: str, category: str, cause: str) -> str | None:
    """The attribution key of a host-lane span (None: follow a wait to the device)."""
    if kind == "busy":
        return _BUSY_KEYS.get(category, "host_compute")
    if cause in _FOLLOWED:
        return None
    return _WAIT_KEYS.get(cause, "other")


class Blame:
    """Gap attribution for one rank: follows each idle interval back through the task runs, the
    host spans and the host's blocking waits (see the module docstring)."""

    def __init__(self, result: SimResult, rank: int, host: list | None = None):
        """``host``: the rank's host-lane spans in emission order, when the caller has them."""
        model = result.model
        self.tasks = model.task_map() if model is not None else {}
        self.run_cols = block_columns(result, rank)
        """The runs' columns (:mod:`models.run_columns`) where the result held repeated steps'
        runs as blocks (None: read run by run)."""
        if self.run_cols is not None:
            self.runs = result.runs
            self.by_key = RunLookup(result.runs, self.run_cols, prev=False)
            self.prev = RunLookup(result.runs, self.run_cols, prev=True)
        else:
            self.runs = (list(result.runs) if result.ranks == [rank]
                         else [r for r in result.runs if r.rank == rank])
            runs = self.runs
            self.by_key = dict(zip(zip(map(_STEP, runs), map(_TASK, runs)), runs))
            self.prev = {}
            last: dict[str, TaskRun] = {}
            prev = self.prev
            for r in runs:   # appended as they finish: stream order within a stream
                stream = r[3]
                p = last.get(stream)
                if p is not None:
                    prev[(r[1], r[2])] = p
                last[stream] = r
        self.host_lane = f"rank{rank}.host"
        if host is None:
            host = lane_spans_of(result, self.host_lane) if result.span_blocks else \
                lane_spans(result.spans, self.host_lane)
        cols = getattr(host, "cols", None)
        self.host_cols = cols if cols is not None and cols.sorted else None
        """The host spans' columns (:mod:`models.host_columns`) when ``host`` came with them
        in start order (None: read span by span)."""
        if self.host_cols is not None:
            self.host, self.host_ends = host, cols.end.tolist()
        else:
            self.host = sorted(host, key=_START)
            self.host_ends = list(map(add, map(_START, self.host), map(_DUR, self.host)))
        self.waits = {(w.start_us, w.cause): w for w in result.host_waits if w.rank == rank}
        self.acc: dict[str, float] = defaultdict(float)
        self._keys: dict[str, list[tuple[str, float]]] = {}
        self._compute: dict[str, bool] = {}
        self._deps: dict[str, tuple] = {}
        self._shape_keys: list | None = None   # each host shape's key (models.blame_host)

    def task_keys(self, run: TaskRun) -> list[tuple[str, float]]:
        """(key, fraction) pairs a running task is charged to (computed once per task)."""
        return self.task_keys_of(run.task)

    def task_keys_of(self, task: str) -> list[tuple[str, float]]:
        """:meth:`task_keys` of a task id."""
        got = self._keys.get(task)
        if got is None:
            got = self._keys[task] = self._task_keys(task)
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
        return self.is_compute_task(run.task)

    def is_compute_task(self, task: str) -> bool:
        """Whether ``task`` runs on the compute lane (not a collective, not a host↔device
        copy; computed once per task)."""
        got = self._compute.get(task)
        if got is None:
            t = self.tasks.get(task)
            got = self._compute[task] = t is not None and t.kind != "collective" and not (
                t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h"))
        return got

    def _add(self, key: str, us: float):
        if us > _EPS:
            self.acc[key] += us

    def follow_wait(self, start_us: float, cause, s: float, e: float, stack: list) -> None:
        """Charge ``s``–``e`` (µs) of the host's wait that began at ``start_us`` to the device
        tasks it waited for (pushed on ``stack`` to finish), else to ``sync``."""
        w = self.waits.get((start_us, cause))
        runs = ([r for r in map(self.by_key.get, w.tasks) if r is not None]
                if w is not None else [])
        if runs:
            stack.append(("finish", max(runs, key=lambda r: r.end_us), s, e))
        else:
            self._add("sync", e - s)

    def blame(self, item: tuple) -> None:
        """Charge an interval: ``("start", run, a, b)`` (waiting for ``run`` to start,
        ``b ≤ run.start_us``), ``("finish", run, a, b)`` (waiting for it to finish) or
        ``("host", None, a, b)`` (waiting for the host to issue something)."""
        stack = [item]
        acc = self.acc
        while stack:
            kind, run, a, b = stack.pop()
            if b - a <= _EPS:
                continue
            if kind == "finish":   # (x if x > y else y: max(y, x) without the call)
                st = run.start_us
                lo = st if st > a else a
                keys = self._keys.get(run.task)
                for k, f in (keys if keys is not None else self.task_keys_of(run.task)):
                    us = (b - lo) * f
                    if us > _EPS:
                        acc[k] += us
                stack.append(("start", run, a, st if st < b else b))
            elif kind == "start":
                ready = run.ready_us
                entered = ready + run.gap_us
                if run.start_us > entered + _EPS:
                    self._add(self.late_key(run.task), b - max(a, entered))
                    b = min(b, entered)
                    if b - a <= _EPS:
                        continue
                if run.gap_us > _EPS:
                    us = b - (a if a > ready else ready)   # b - max(a, ready)
                    if us > _EPS:
                        acc["device_idle"] += us
                    b = ready if ready < b else b
                    if b - a <= _EPS:
                        continue
                stack.append(self._binding(run, a, b))
            else:
                self._host(a, b, stack)

    def late_key(self, task: str) -> str:
        """What a run of ``task`` that started after it was ready waited on: other ranks (a
        collective), its copy engine, or something else."""
        t = self.tasks.get(task)
        return "arrival_skew" if t is not None and t.kind == "collective" else (
            t.copy_kind if t is not None and t.copy_kind else "other")

    def _binding(self, run: TaskRun, a: float, b: float) -> tuple:
        """What made ``run`` ready last: a dependency, its stream predecessor or its launch."""
        best, best_t = self.latest_ready(run)
        if run.launch_us is not None and run.launch_us > best_t + _EPS:
            return ("host", None, a, min(b, run.launch_us))
        if best is None or best_t <= a + _EPS:
            self._add("other", b - a)
            return ("host", None, a, a)
        return ("finish", best, a, min(b, best_t))

    def latest_ready(self, run: TaskRun) -> tuple[TaskRun | None, float]:
        """The dependency or stream predecessor of ``run`` that finished last, and when (µs;
        ``(None, -inf)``: none)."""
        best, best_t = None, -math.inf
        deps = self._deps.get(run.task)
        if deps is None:
            deps = self.deps_of(run.task)
        by_key, step = self.by_key, run.step
        for ds, w in deps:
            r = by_key.get((step + ds, w))
            if r is not None and r.end_us > best_t:
                best, best_t = r, r.end_us
        p = self.prev.get((run.step, run.task))
        if p is not None and p.end_us > best_t + _EPS:
            best, best_t = p, p.end_us
        return best, best_t

    def deps_of(self, task: str) -> tuple:
        """``task``'s dependencies as ``(step offset, task id)``: its waits in its step,
        then its waits on the step before (computed once per task)."""
        deps = self._deps.get(task)
        if deps is None:
            t = self.tasks.get(task)
            deps = self._deps[task] = (
                tuple((0, w) for w in t.waits) + tuple((-1, w) for w in t.prev_waits)
                if t is not None else ())
        return deps

    def _host(self, a: float, b: float, stack: list) -> None:
        if self.host_cols is not None:   # read as columns (models.blame_host)
            if self._shape_keys is None:
                self._shape_keys = [_host_key(*sh) for sh in self.host_cols.shapes]
            return host_walk(self, a, b, stack)
        ends = self.host_ends
        i = bisect.bisect_right(ends, a)
        cur, host, n = a, self.host, len(self.host)
        acc = self.acc
        busy_keys, wait_keys = _BUSY_KEYS.get, _WAIT_KEYS.get
        while i < n and cur < b:
            sp = host[i]
            s, e = sp[3], ends[i]
            s, e = (cur if cur > s else s), (b if b < e else e)   # max(s, cur), min(e, b)
            if s > cur:
                us = (b if b < s else s) - cur
                if us > _EPS:
                    acc["other"] += us
            if e > s:   # _host_key inlined
                if sp[2] == "busy":
                    key = busy_keys(sp[8], "host_compute")
                else:
                    key = None if sp[7] in _FOLLOWED else wait_keys(sp[7], "other")
                if key is None:
                    self.follow_wait(sp.start_us, sp.cause, s, e, stack)
                elif e - s > _EPS:
                    acc[key] += e - s
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
    return critical_path(Blame(result, rank), *result.rank_window_us(rank),
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


def critical_path(bl: Blame, w0: float, w1: float, paced_by_device: bool,
                  union: list[tuple[float, float]] | None = None,
                  holes_in: tuple[float, float] | None = None
                  ) -> tuple[str, dict[str, float], dict[str, float], list[Hole]]:
    """:func:`gap_attribution` of ``bl``'s rank in ``[w0, w1)``; ``union``: the merged compute
    runs when known; ``holes_in``: only the holes starting in this ``[start, end)`` are
    returned (all by default)."""
    runs = bl.runs
    if bl.run_cols is not None:
        compute, st, en = compute_runs(bl)
    else:
        on_lane = {t for t in set(map(_TASK, runs)) if bl.is_compute_task(t)}
        compute = sorted(compress(runs, map(on_lane.__contains__, map(_TASK, runs))),
                         key=_RUN_START)
        st = np.fromiter(map(_RUN_START, compute), float, len(compute))
        en = np.fromiter(map(_RUN_END, compute), float, len(compute))
    n = len(compute)
    if union is None:
        inside = (en > w0) & (st < w1) & (en > st)
        us, ue = merged_arrays(np.maximum(st[inside], w0), np.minimum(en[inside], w1))
    else:
        u = np.array(union, dtype=float).reshape(-1, 2)
        us, ue = u[:, 0], u[:, 1]
    union_us = running_total(ue - us)   # sum(e - s for s, e in union), in order
    m, cols = len(bl.host), bl.host_cols
    if cols is not None:
        hs, he, inside = cols.start, cols.end, cols.busy & (cols.start < w1) & (cols.end > w0)
    else:
        hs = np.fromiter(map(_START, bl.host), float, m)
        he = np.array(bl.host_ends, dtype=float)
        inside = np.fromiter(map(_BUSY, map(_KIND, bl.host)), bool, m) & (hs < w1) & (he > w0)
    host_busy = running_total(np.minimum(he[inside], w1) - np.maximum(hs[inside], w0))
    if host_busy > union_us and not paced_by_device:
        busy_h: dict[str, float] = defaultdict(float)
        for sp, s, e in _clip(bl.host, w0, w1):
            if sp.kind == "busy":
                busy_h[_host_key("busy", sp.category, "")] += e - s
            else:
                bl.blame(("host", None, s, e))
        bl._add("other", (w1 - w0) - sum(busy_h.values()) - sum(bl.acc.values()))
        return bl.host_lane, dict(busy_h), dict(bl.acc), []
    s_c, e_c = np.maximum(st, w0), np.minimum(en, w1)
    ran = e_c > s_c
    raw = busy_by_key(bl, compute, (e_c - s_c)[ran], ran)
    scale = union_us / max(sum(raw.values()), _EPS)
    busy = {k: v * scale for k, v in raw.items()}
    g0s = np.concatenate(([w0], ue))
    g1s = np.concatenate((us, [w1]))
    gap = g1s - g0s > _EPS
    g0s, g1s = g0s[gap], g1s[gap]
    js = np.searchsorted(st, g1s - _EPS, side="left")   # the next compute run's index
    bs = np.minimum(g1s, st[np.minimum(js, max(n - 1, 0))]) if n else g1s
    h0, h1 = holes_in if holes_in is not None else (-math.inf, math.inf)
    holes = [Hole(*h) for h in charge_holes(bl, compute, g0s, g1s, js, bs, h0, h1, hs, he)]
    return "compute", busy, dict(bl.acc), holes
