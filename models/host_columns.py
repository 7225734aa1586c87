"""The host lane's spans as numpy columns, built once per summary and read by its three passes
over them (:func:`models.span_pass.host_split`, :class:`models.blame.Blame`,
:func:`models.blame.critical_path` and its hole walk), which each read every span's fields in
Python before.

Where a simulation held its repeated steps' spans as blocks (``keep="brief"``, a sweep
point's: :attr:`models.simulate.SimResult.span_blocks`), the lane is a :class:`BlockSpans`:
its rows are made only when read (the scalar walks read a few hundred of some 80,000 on
ResNet-50 at 200 steps) and its columns are each block's, made once and shifted.

The sums stay those of the Python loops, bit for bit: an element-wise ``+ - min max`` is one
IEEE operation either way (written with ``numpy.where`` as the loops' conditional expressions
are, so the same operand is picked; a moved row's instant is the block's plus the shift,
as :meth:`simcore.record.Block.moved` adds it), and a running total is a ``numpy.cumsum``
over the charges in emission order (a sequential sum; ``numpy.sum`` would sum pairwise).
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

from stepsim.models.segments import Codes, Segmented

__all__ = ["HostSpans", "BlockSpans", "HostColumns", "host_split_columns", "lane_spans_of",
           "first_seen"]

_START, _DUR, _RANK = itemgetter(3), itemgetter(4), itemgetter(6)
_SHAPE = itemgetter(2, 8, 7)   # kind, category, cause


class HostColumns:
    """Columns of the host lane's spans, in emission order (µs).

    Attributes:
        start / dur / end: each span's start, duration and ``start + dur``.
        rank: each span's rank.
        shape: each span's code in ``shapes`` (its ``(kind, category, cause)``).
        shapes: the distinct ``(kind, category, cause)``, in order of first appearance.
        busy: whether each span is a ``busy`` one.
        sorted: whether the starts never decrease (emission order is start order).
    """

    def __init__(self, host, made: tuple | None = None):
        """``host``: the spans (a list); ``made``: their ``(start, dur, rank, shape,
        shapes)`` when already made (:class:`BlockSpans`)."""
        self.start, self.dur, self.rank, self.shape, self.shapes = (
            _columns(host) if made is None else made)
        n = len(self.start)
        self.end = self.start + self.dur
        is_busy = np.array([k == "busy" for k, _, _ in self.shapes], dtype=bool)
        self.busy = is_busy[self.shape] if n else np.zeros(0, dtype=bool)
        self.sorted = bool(n < 2 or (np.diff(self.start) >= 0).all())


class HostSpans(list):
    """A rank's host-lane spans (a list, emission order) with their :class:`HostColumns`,
    made on first use."""

    _cols: HostColumns | None = None

    @property
    def cols(self) -> HostColumns:
        if self._cols is None:
            self._cols = HostColumns(self)
        return self._cols


class BlockSpans(Segmented):
    """A lane's spans, in emission order, where a simulation held its repeated steps' spans as
    blocks (``keep="brief"``: :attr:`models.simulate.SimResult.span_blocks`): a sequence
    whose rows are made one at a time when read, and whose :class:`HostColumns` are made from
    each block's columns once, shifted (the same ``x + shift`` the move makes).

    Args:
        spans / blocks: the result's spans and blocks.
        lane: the lane kept.
    """

    def __init__(self, spans: list, blocks: list, lane: str):
        self._segment(blocks, len(spans),
                      lambda pos, at: [sp for sp in spans[pos:at] if sp[0] == lane],
                      lambda block: block.part(("lane", lane), lambda r: r[0] == lane))
        self._cols: HostColumns | None = None

    @property
    def cols(self) -> HostColumns:
        if self._cols is None:
            self._cols = HostColumns(self, self._made())
        return self._cols

    def _made(self) -> tuple:
        codes = Codes()
        parts: list[tuple] = []
        recoded: dict[int, np.ndarray] = {}   # a block's shape codes, once (keyed by its
        # shape array, which lives in the block's memo)
        shifts: list[float | None] = []
        for _, rows, dt, _ in self.segs:
            if dt is None:
                start, dur, rank, shape, shapes = _columns(rows)
            else:
                got = rows.memo.get("columns")
                if got is None:
                    got = rows.memo["columns"] = _columns(rows.rows)
                start, dur, rank, shape, shapes = got
            got = recoded.get(id(shape)) if dt is not None else None
            if got is None:
                got = np.array([codes[x] for x in shapes], dtype=np.intp)[shape]
                if dt is not None:
                    recoded[id(shape)] = got
            parts.append((start, dur, rank, got))
            shifts.append(dt)
        if not parts:
            return (np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.intp), [])
        start, dur, rank, shape = (np.concatenate([p[i] for p in parts]) for i in range(4))
        # each moved block's starts + its shift, after the join (the same x + dt as one by one)
        lens = [len(p[0]) for p in parts]
        moved = np.repeat(np.array([dt is not None for dt in shifts], dtype=bool), lens)
        dts = np.repeat(np.array([0.0 if dt is None else dt for dt in shifts]), lens)
        return np.where(moved, start + dts, start), dur, rank, shape, list(codes)


def _columns(rows: list) -> tuple:
    """``(start, dur, rank, shape codes, shapes)`` of ``rows``."""
    n = len(rows)
    codes = Codes()
    return (np.fromiter(map(_START, rows), float, n), np.fromiter(map(_DUR, rows), float, n),
            np.fromiter(map(_RANK, rows), np.int64, n),
            np.fromiter(map(codes.__getitem__, map(_SHAPE, rows)), np.intp, n), list(codes))


def lane_spans_of(result, lane: str):
    """``lane``'s spans in ``result``, in emission order, with their columns: a
    :class:`BlockSpans` where the result holds repeated steps as blocks, else a
    :class:`HostSpans`."""
    if result.span_blocks:
        return BlockSpans(result.spans, result.span_blocks, lane)
    return HostSpans(sp for sp in result.spans if sp[0] == lane)


def host_split_columns(cols: HostColumns, rank: int, window: tuple[float, float],
                       busy: list | None = None) -> dict[str, float]:
    """:func:`models.span_pass.host_split` over ``cols`` (the same floats, keys in the same
    order)."""
    a, b = window
    s = np.where(a > cols.start, a, cols.start)   # a if a > start else start
    e = np.where(b < cols.end, b, cols.end)       # b if b < e else e
    kept = (e > s) & (cols.rank == rank)
    if busy is not None:
        on = kept & cols.busy
        busy.extend(zip(s[on].tolist(), e[on].tolist()))
    # each shape's key: busy:<category> or wait:<cause>
    key_of = [f"busy:{cat}" if kind == "busy" else f"wait:{cause}"
              for kind, cat, cause in cols.shapes]
    names = list(dict.fromkeys(key_of))
    kcode = np.array([names.index(k) for k in key_of], dtype=np.intp)
    idx = np.flatnonzero(kept)
    if not len(idx):
        return {}
    keys = kcode[cols.shape[idx]]
    d = (e - s)[idx]
    # each key's total is a sequential sum in emission order (numpy.bincount adds its weights
    # one by one, from 0.0: the same float as the cumsum before)
    totals = np.bincount(keys, weights=d, minlength=len(names)).tolist()
    return {names[c]: totals[c] for c in first_seen(keys, len(names))}


def first_seen(codes: np.ndarray, n: int) -> list[int]:
    """The distinct ``codes`` (each below ``n``) in order of first appearance, read from a
    prefix that grows fourfold until it holds them all (repeated steps show every code
    early)."""
    need = int(np.count_nonzero(np.bincount(codes, minlength=n)))
    at, size = 0, 256
    first: dict[int, int] = {}
    while len(first) < need:
        u, i = np.unique(codes[at:at + size], return_index=True)
        for c, j in zip(u.tolist(), i.tolist()):
            first.setdefault(c, at + j)
        at, size = at + size, size * 4
    return sorted(first, key=first.__getitem__)
