"""The host lane's spans as numpy columns, built once per summary and read by its three passes
over them (:func:`models.span_pass.host_split`, :class:`models.blame.Blame`,
:func:`models.blame.critical_path` and its hole walk), which each read every span's fields in
Python before.

The sums stay those of the Python loops, bit for bit: an element-wise ``+ - min max`` is one
IEEE operation either way (written with ``numpy.where`` as the loops' conditional expressions
are, so the same operand is picked), and a running total is a ``numpy.cumsum`` over the
charges in emission order (a sequential sum; ``numpy.sum`` would sum pairwise).
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

__all__ = ["HostSpans", "HostColumns", "host_split_columns", "lane_columns"]

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

    def __init__(self, host: list, made: tuple | None = None):
        """``host``: the spans; ``made``: their ``(start, dur, rank, shape, shapes)`` when
        already made (:func:`lane_columns`)."""
        n = len(host)
        if made is None:
            start = np.fromiter(map(_START, host), float, n)
            dur = np.fromiter(map(_DUR, host), float, n)
            rank = np.fromiter(map(_RANK, host), np.int64, n)
            codes = _Codes()
            shape = np.fromiter(map(codes.__getitem__, map(_SHAPE, host)), np.intp, n)
            made = start, dur, rank, shape, list(codes)
        self.start, self.dur, self.rank, self.shape, self.shapes = made
        self.end = self.start + self.dur
        is_busy = np.array([k == "busy" for k, _, _ in self.shapes], dtype=bool)
        self.busy = is_busy[self.shape] if n else np.zeros(0, dtype=bool)
        self.sorted = bool(n < 2 or (np.diff(self.start) >= 0).all())


class _Codes(dict):
    """Item → its code, the next one for an item not seen before."""

    def __missing__(self, item) -> int:
        c = self[item] = len(self)
        return c


class HostSpans(list):
    """A rank's host-lane spans (a list, emission order) with their :class:`HostColumns`,
    made on first use: from ``source`` when given (``(every span, the blocks they were
    partly moved from, the lane)``: :func:`lane_columns`), else span by span."""

    _cols: HostColumns | None = None
    source: tuple | None = None

    @property
    def cols(self) -> HostColumns:
        if self._cols is None:
            made = lane_columns(*self.source, len(self)) if self.source else None
            self._cols = HostColumns(self, made)
        return self._cols


def _block_lane(block, lane: str) -> tuple:
    """The rows of ``block`` on ``lane``: ``(start, dur, rank, shape codes, shapes)``, made once
    per block and lane."""
    key = ("lane columns", lane)
    got = block.memo.get(key)
    if got is None:
        rows = [r for r in block.rows if r[0] == lane]
        n = len(rows)
        codes = _Codes()
        got = block.memo[key] = (
            np.fromiter(map(_START, rows), float, n), np.fromiter(map(_DUR, rows), float, n),
            np.fromiter(map(_RANK, rows), np.int64, n),
            np.fromiter(map(codes.__getitem__, map(_SHAPE, rows)), np.intp, n), list(codes))
    return got


def lane_columns(spans: list, blocks: list, lane: str, n: int) -> tuple | None:
    """The columns of ``lane``'s spans among ``spans`` (``(start, dur, rank, shape, shapes)``
    as :class:`HostColumns` holds them), where ``blocks`` (``(index of the first, block,
    shift µs)``, in order: :attr:`simcore.record.HostSideRecorder.blocks`) say which runs of
    ``spans`` are a block's rows moved in time: those are the block's columns, shifted (the
    same ``x + shift`` the move made), the others read span by span. None when the blocks do
    not tile ``spans`` as said or the lane's spans are not ``n``."""
    codes = _Codes()
    parts: list[tuple] = []
    pos = 0

    def live(a: int, b: int) -> None:
        rows = [sp for sp in spans[a:b] if sp[0] == lane]
        if rows:
            k = len(rows)
            parts.append((np.fromiter(map(_START, rows), float, k),
                          np.fromiter(map(_DUR, rows), float, k),
                          np.fromiter(map(_RANK, rows), np.int64, k),
                          np.fromiter(map(codes.__getitem__, map(_SHAPE, rows)), np.intp, k)))

    for at, block, dt in blocks:
        if at < pos or at + len(block.rows) > len(spans):
            return None
        live(pos, at)
        start, dur, rank, shape, shapes = _block_lane(block, lane)
        if len(start):
            parts.append((start + dt, dur, rank,
                          np.array([codes[x] for x in shapes], dtype=np.intp)[shape]))
        pos = at + len(block.rows)
    live(pos, len(spans))
    if sum(len(p[0]) for p in parts) != n:
        return None
    if not parts:
        return (np.zeros(0), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.intp), [])
    return (*(np.concatenate([p[i] for p in parts]) for i in range(4)), list(codes))


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
    first: dict[int, int] = {}
    totals: dict[int, float] = {}
    for c in np.unique(keys).tolist():
        sel = keys == c
        first[c] = int(np.argmax(sel))
        totals[c] = float(np.cumsum(d[sel])[-1])
    return {names[c]: totals[c] for c in sorted(first, key=first.__getitem__)}
