"""Task runs held as blocks where a simulation replayed steps (``keep="brief"``, a sweep
point's), and their numpy columns, which the critical path and its holes read
(:func:`models.blame.critical_path`, :func:`models.blame_holes.charge_holes`) instead of
passing over every run in Python.

A replayed step's runs are its captured step's moved in time (:meth:`simcore.record.Block.moved`:
every instant ``x + dt``, the step ``+ ds``). :class:`BlockRuns` keeps ``(block, dt, ds)``
instead of the moved rows: a sequence whose rows are made when read, and whose columns are
each distinct block's, made once and shifted by the same ``x + dt`` (so the same floats, bit for
bit). :class:`RunLookup` stands in for :class:`models.blame.Blame`'s ``(step, task) → run``
dicts, found by ``searchsorted`` over the runs' keys; :func:`latest_ready_us` is
:meth:`models.blame.Blame.latest_ready`'s instant for many runs at once (a maximum: the same
float whichever of equal ends is picked).
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.segments import Codes, Segmented

__all__ = ["BlockRuns", "RunColumns", "RunLookup", "latest_ready_us"]



def _columns(rows: list) -> tuple:
    """``(launch, ready, start, end, gap, step, rank, task codes, tasks, stream codes,
    streams)`` of ``rows`` (a None launch is NaN)."""
    n = len(rows)
    tc, sc = Codes(), Codes()
    if not n:
        e = np.zeros(0)
        return e, e, e, e, e, np.zeros(0, np.int64), np.zeros(0, np.int64), \
            np.zeros(0, np.intp), [], np.zeros(0, np.intp), []
    rank, step, task, stream, launch, ready, start, end, gap = zip(*rows)
    return (np.array([math.nan if x is None else x for x in launch], dtype=float),
            np.array(ready, dtype=float), np.array(start, dtype=float),
            np.array(end, dtype=float), np.array(gap, dtype=float),
            np.array(step, dtype=np.int64), np.array(rank, dtype=np.int64),
            np.fromiter(map(tc.__getitem__, task), np.intp, n), list(tc),
            np.fromiter(map(sc.__getitem__, stream), np.intp, n), list(sc))


class RunColumns:
    """The runs' columns, in emission order (instants µs).

    Attributes:
        launch / ready / start / end / gap: each run's (launch NaN where None).
        step / rank: each run's step and rank.
        task / tasks: each run's task code, and the task ids by code (``code``: id → code).
        stream: each run's stream code.
        unique: whether no two runs share a (step, task) (the lookups need it).
        prev: each run's stream predecessor's index in emission order (-1: none).
    """

    def __init__(self, parts: list[tuple], shifts: list[tuple] | None = None):
        """``parts``: each segment's columns (:func:`_columns`); ``shifts``: each part's
        ``(dt µs, ds steps)`` to move it by (``(None, 0)``: as it is), added after the parts
        are joined, one ``x + dt`` per instant as :meth:`simcore.record.Block.moved` adds it
        (the same floats as moving each part on its own)."""
        tcodes, scodes = Codes(), Codes()
        cols: list[list] = [[] for _ in range(9)]
        recoded: dict[tuple[int, int], np.ndarray] = {}   # a block's codes, once (``parts``
        # holds every array, so no two alive share an id)

        def recode(codes: Codes, local: np.ndarray, names: list) -> np.ndarray:
            got = recoded.get((id(local), id(names)))
            if got is None:
                got = recoded[(id(local), id(names))] = np.array(
                    [codes[x] for x in names], dtype=np.intp)[local] if len(local) else local
            return got

        for launch, ready, start, end, gap, step, rank, task, tasks, stream, streams in parts:
            for c, x in zip(cols, (launch, ready, start, end, gap, step, rank)):
                c.append(x)
            cols[7].append(recode(tcodes, task, tasks))
            cols[8].append(recode(scodes, stream, streams))
        (self.launch, self.ready, self.start, self.end, self.gap, self.step, self.rank,
         self.task, self.stream) = (np.concatenate(c) if c else np.zeros(0) for c in cols)
        if shifts is not None and parts:
            self._move(parts, shifts)
        self.tasks, self.code = list(tcodes), dict(tcodes)
        n, t = len(self.start), max(len(self.tasks), 1)
        self._t = t
        self._lists: tuple | None = None
        keys = self.step * t + self.task
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]
        self.unique = bool(n < 2 or (np.diff(self._keys) != 0).all())
        self.prev = np.full(n, -1, dtype=np.intp)
        if n > 1:
            by = np.argsort(self.stream, kind="stable")   # emission order within a stream
            same = self.stream[by[1:]] == self.stream[by[:-1]]
            self.prev[by[1:][same]] = by[:-1][same]

    def _move(self, parts: list[tuple], shifts: list[tuple]) -> None:
        """Move each part's instants by its ``dt`` and its steps by its ``ds`` (in place)."""
        lens = [len(p[2]) for p in parts]
        moved = np.repeat(np.array([dt is not None for dt, _ in shifts], dtype=bool), lens)
        dt = np.repeat(np.array([0.0 if dt is None else dt for dt, _ in shifts]), lens)
        self.step = self.step + np.repeat(np.array([ds for _, ds in shifts], np.int64), lens)
        for name in ("launch", "ready", "start", "end"):
            x = getattr(self, name)
            setattr(self, name, np.where(moved, x + dt, x))

    def find(self, step: np.ndarray, task: np.ndarray) -> np.ndarray:
        """The index of the run of each (step, task code) (-1: none; a code < 0: none)."""
        keys = step * self._t + task
        pos = np.searchsorted(self._keys, keys, side="right") - 1
        ok = (pos >= 0) & (task >= 0)
        pos = np.where(ok, pos, 0)
        ok &= self._keys[pos] == keys if len(self._keys) else False
        return np.where(ok, self._order[pos] if len(self._order) else 0, -1)


class BlockRuns(Segmented):
    """The task runs of a result whose repeated steps were held as blocks: ``rows`` (those of
    the steps solved, in emission order) with ``blocks`` (``(where they go in rows, block,
    shift µs, steps)``) moved in. Reads as the list of every run; :attr:`cols` are made from
    each block's columns once."""

    def __init__(self, rows: list, blocks: list):
        self._segment(blocks, len(rows), lambda pos, at: rows[pos:at], lambda block: block)
        self._cols: RunColumns | None = None

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"BlockRuns({len(self)} runs, {len(self.segs)} segments)"

    @property
    def cols(self) -> RunColumns:
        if self._cols is None:
            parts, shifts = [], []
            for _, rows, dt, ds in self.segs:
                if dt is None:
                    parts.append(_columns(rows))
                    shifts.append((None, 0))
                    continue
                got = rows.memo.get("run_columns")
                if got is None:
                    got = rows.memo["run_columns"] = _columns(rows.rows)
                parts.append(got)
                shifts.append((dt, ds))
            self._cols = RunColumns(parts, shifts)
        return self._cols


class RunLookup:
    """``(step, task) → run`` (``prev``: its stream predecessor) with ``get``, as the dicts of
    :class:`models.blame.Blame` (which need each (step, task) once: :attr:`RunColumns.unique`)."""

    def __init__(self, runs: BlockRuns, cols: RunColumns, prev: bool):
        self.runs, self.cols, self.prev = runs, cols, prev

    def index(self, key: tuple) -> int:
        step, task = key
        cols = self.cols
        c = cols.code.get(task)
        if c is None:
            return -1
        if cols._lists is None:   # searched one at a time: Python lists and bisect
            cols._lists = (cols._keys.tolist(), cols._order.tolist(), cols.prev.tolist())
        keys, order, prev = cols._lists
        k = step * cols._t + c
        pos = bisect.bisect_right(keys, k) - 1
        if pos < 0 or keys[pos] != k:
            return -1
        i = order[pos]
        return prev[i] if self.prev else i

    def get(self, key: tuple, default=None):
        i = self.index(key)
        return self.runs[i] if i >= 0 else default


def latest_ready_us(bl, ri: np.ndarray) -> np.ndarray:
    """:meth:`models.blame.Blame.latest_ready`'s instant (µs; -inf: none) of the runs at
    indexes ``ri`` of ``bl.run_cols``: the latest end of the run's dependencies in its step
    (``waits``) and the step before (``prev_waits``), then its stream predecessor's where
    later by more than EPS."""
    cols = bl.run_cols
    tc = cols.task[ri]
    # the distinct codes in order (np.unique's), by counting: np.unique hashes and sorts
    uniq = np.flatnonzero(np.bincount(tc, minlength=len(cols.tasks)))
    deps = [bl.deps_of(cols.tasks[u]) for u in uniq.tolist()]
    k = max((len(d) for d in deps), default=0)
    dtask = np.full((len(cols.tasks), max(k, 1)), -1, dtype=np.intp)
    dstep = np.zeros((len(cols.tasks), max(k, 1)), dtype=np.int64)
    for u, d in zip(uniq.tolist(), deps):
        for j, (ds, w) in enumerate(d):
            dtask[u, j] = cols.code.get(w, -1)
            dstep[u, j] = ds
    step = cols.step[ri]
    best = np.full(len(ri), -np.inf)
    for j in range(k):
        found = cols.find(step + dstep[tc, j], dtask[tc, j])
        e = cols.end[np.maximum(found, 0)]
        best = np.where((found >= 0) & (e > best), e, best)
    p = cols.prev[ri]
    pe = cols.end[np.maximum(p, 0)]
    return np.where((p >= 0) & (pe > best + _EPS), pe, best)


def block_columns(result, rank: int) -> RunColumns | None:
    """The columns of ``result``'s runs where they are held as blocks, of ``rank`` alone, each
    (step, task) once; else None."""
    runs = result.runs
    if not isinstance(runs, BlockRuns) or result.ranks != [rank]:
        return None
    cols = runs.cols
    return cols if cols.unique else None


class Picked(Sequence):
    """The runs at indexes ``idx`` of ``runs`` (rows made when read), with their columns."""

    def __init__(self, runs: BlockRuns, cols: RunColumns, idx: np.ndarray):
        self.runs, self.cols, self.idx = runs, cols, idx

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, j):
        return self.runs[int(self.idx[j])]

    def first_codes(self) -> tuple[np.ndarray, list[str]]:
        """Each run's task as the rank of its first run among the tasks (codes), and the task
        ids in order of first run."""
        tc = self.cols.task[self.idx]
        uniq, first = np.unique(tc, return_index=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(uniq), dtype=np.intp)
        rank[order] = np.arange(len(uniq))
        return rank[np.searchsorted(uniq, tc)], [self.cols.tasks[u] for u in uniq[order].tolist()]


def compute_runs(bl) -> tuple[Picked, np.ndarray, np.ndarray]:
    """The compute lane's runs (:meth:`models.blame.Blame.is_compute_task`) in start order
    (a stable sort, as ``sorted`` is), and their starts and ends (µs)."""
    cols = bl.run_cols
    on = np.array([bl.is_compute_task(t) for t in cols.tasks], dtype=bool)
    idx = np.flatnonzero(on[cols.task]) if len(cols.task) else np.zeros(0, np.intp)
    st = cols.start[idx]
    if not (st[1:] >= st[:-1]).all():   # in start order already (a stable sort keeps it)
        idx = idx[np.argsort(st, kind="stable")]
    return Picked(bl.runs, cols, idx), cols.start[idx], cols.end[idx]
