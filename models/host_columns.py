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

__all__ = ["HostSpans", "HostColumns", "host_split_columns"]

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

    def __init__(self, host: list):
        n = len(host)
        self.start = np.fromiter(map(_START, host), float, n)
        self.dur = np.fromiter(map(_DUR, host), float, n)
        self.end = self.start + self.dur
        self.rank = np.fromiter(map(_RANK, host), np.int64, n)
        codes = _Codes()
        self.shape = np.fromiter(map(codes.__getitem__, map(_SHAPE, host)), np.intp, n)
        self.shapes = list(codes)
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
    made on first use."""

    _cols: HostColumns | None = None

    @property
    def cols(self) -> HostColumns:
        if self._cols is None:
            self._cols = HostColumns(self)
        return self._cols


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
