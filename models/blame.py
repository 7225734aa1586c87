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
"""
from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass
from operator import attrgetter, itemgetter

from stepsim.models.device import TaskRun
from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.intervals import merge
from stepsim.models.simulate import SimResult


@dataclass(frozen=True)
class Hole:
    """One idle interval of the scarce lane: ``start_us`` (instant), ``dur_us``, and its
    attribution ``causes`` (key → µs, summing to ``dur_us``)."""

    start_us: float
    dur_us: float
    causes: dict[str, float]


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


class Blame:
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
