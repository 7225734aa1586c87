"""A whole trace's ``traceEvents`` text read in two parts at once (:func:`halves`): the first
(:data:`FIRST_SHARE` of it) here, the second in a forked process
(:func:`calibration.rank_pool.beside`), each a block at a time as
:mod:`calibration.block_reader` reads a whole text; the second part's columns are copied in
after the first's, so the table is the one a read in one process gives.

What is decided in the order of the events is kept: a ``dur`` problem's index counts the first
part's events; a text pid or tid gets its code in the order of first sight
(:class:`calibration.event_rows.Idents`), so the second part's codes are given again after the
first part's (where a number in the second part could be taken for one of its codes, that part
is read again here, after the first).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stepsim.calibration.block_reader import (_ARRAYS, _HAS, _NS, _SPLIT, _US, _Columns,
                                              _block_columns, _blocks)
from stepsim.calibration.event_rows import Idents

__all__ = ["halves", "SPLIT_BYTES"]

SPLIT_BYTES = 16 * 1024**2
"""A ``traceEvents`` text of at least this many bytes (one block,
:data:`calibration.block_reader.BLOCK_BYTES`) is read in two parts at once; below it, one
process reads it (a fork and the columns sent back cost more than half of a smaller read)."""

FIRST_SHARE = 0.58
"""The share of the text this process reads (measured on the 54 MB trace, 2026-12-07, with a
process pool then: the forked process started reading about 25 ms after this one, and at a
half each this process waited 85-130 ms for its columns; at this share, through the pipe of
:func:`calibration.rank_pool.beside`, it waits 13-21 ms)."""


@dataclass
class _Part:
    """What :func:`_part` read of ``raw[lo:end]``: its blocks' spans and event counts, the
    ``dur`` problems (index in the part, problem) and how many events have a ``dur``. Read in
    another process: ``cols`` its columns, ``str_ids`` its text pid/tid codes, ``clash``
    whether a number could be taken for one of them."""

    lo: int
    end: int
    spans: list = field(default_factory=list)
    counts: list = field(default_factory=list)
    bad_dur: list = field(default_factory=list)
    timed: int = 0
    cols: dict | None = None
    str_ids: dict = field(default_factory=dict)
    clash: bool = False


class _Noted(Idents):
    """:class:`Idents` that notes whether a number it was given lies where text codes do
    (−2 and below): then the second part's codes cannot be told from its numbers."""

    def __init__(self):
        super().__init__()
        self.calls, self.clash = 0, False

    def __call__(self, v) -> int:
        self.calls += 1
        got = super().__call__(v)
        if got <= -2 and (type(v) in (int, float) or self.str_ids.get(str(v)) != got):
            self.clash = True
        return got


def _part(raw, lo: int, end: int, block: int, seen: dict, ident: Idents, acc: _Columns,
          whole: int) -> _Part | None:
    """``raw[lo:end]`` read a block at a time into ``acc`` (names interned in ``seen``, pid/tid
    codes given by ``ident``; ``whole``: the bytes ``acc`` is sized for); None where some
    block is not plain."""
    part = _Part(lo, end)
    for a, b, evs in _blocks(raw, lo, end, block):
        calls = getattr(ident, "calls", 0)
        got = None if evs is None else _block_columns(evs, seen, ident)
        del evs
        if got is None:
            return None
        cols, ns, has, us = got
        del got
        if isinstance(ident, _Noted) and ident.calls == calls and (
                (cols.pid <= -2).any() or (cols.tid <= -2).any()):
            ident.clash = True   # (a block of numbers only: they skip ``ident``)
        part.bad_dur += [(i + sum(part.counts), why) for i, why in cols.bad_dur]
        part.timed += cols.timed
        part.spans.append((a, b))
        part.counts.append(len(ns))
        acc.add({**{f: getattr(cols, f) for f in _ARRAYS}, **cols.ints, _NS: ns, _HAS: has,
                 _US: us}, guess=whole / max(1, b - a))
        del cols, ns, has, us
    return part


def _other_part(item: tuple) -> _Part | None:
    """:func:`_part` of ``(raw, lo, end, block)`` on its own (names and pid/tid codes of its
    own), its columns in ``cols``: the second half, read in a forked process; None where it
    did not read."""
    raw, lo, end, block = item
    acc, ident = _Columns(), _Noted()
    try:
        part = _part(raw, lo, end, block, {}, ident, acc, end - lo)
    except Exception:   # (read again in the caller, after the first half: its error, in order)
        return None
    if part is not None:
        part.cols, part.str_ids, part.clash = acc.done(), ident.str_ids, ident.clash
    return part


def _recode(cols: dict, codes: dict, ident: Idents) -> None:
    """The second half's text pid/tid ``codes`` (text → its code there) given again by
    ``ident`` (after the first half's), in the order they were given there."""
    new = np.array([ident(text) for text in codes], np.int64)   # (insertion: first sight)
    for f in ("pid", "tid"):
        a = cols[f]
        mask = (a <= -2) & (a >= -1 - len(codes))
        a[mask] = new[-2 - a[mask]]


def halves(raw, lo: int, end: int, block: int, split: int):
    """(the columns filled, the :class:`_Part` read in order, the text pid/tid codes) of the
    events of ``raw[lo:end]``; None where some block is not plain. A text of ``split`` bytes
    or more is cut at the first ``},`` past :data:`FIRST_SHARE` of it; the second part is read
    in a forked process while this one reads the first. A cut inside a string or a nested
    object leaves the first part unclosed, so it does not decode: then the whole is read here;
    a second part that did not read, or whose numbers could be taken for its codes, is read
    again here."""
    from stepsim.calibration.rank_pool import beside

    seen, ident, acc = {}, Idents(), _Columns()
    cut = _SPLIT.search(raw, lo + int((end - lo) * FIRST_SHARE), end) if end - lo >= split else None
    if cut is None or cut.end() >= end:
        part = _part(raw, lo, end, block, seen, ident, acc, end - lo)
        return None if part is None else (acc, [part], ident.str_ids)
    mid, rest = cut.start() + 1, cut.end()
    there, here = beside(_other_part, (raw, rest, end, block),
                         lambda: _part(raw, lo, mid, block, seen, ident, acc, end - lo))
    if here is None:   # (a cut inside a string or a nested object)
        del there
        return halves(raw, lo, end, block, end - lo + 1)
    if isinstance(there, _Part) and not there.clash:
        _recode(there.cols, there.str_ids, ident)
        acc.add(there.cols, guess=1.0)
        there.cols = None
    else:
        there = _part(raw, rest, end, block, seen, ident, acc, end - lo)
        if there is None:
            return None
    return acc, [here, there], ident.str_ids
