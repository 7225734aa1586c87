"""Reading a whole plain trace's events into columns a block at a time.

:func:`load_blocks` is the first try of :func:`calibration.trace_io.load_trace`: the
``traceEvents`` text is cut between events into blocks of about :data:`BLOCK_BYTES`; each
block is decoded (msgspec structs of the fields the table reads, ``args`` the keys of
:data:`calibration.event_aliases.ARG_ALIASES` only) and turned into numpy columns
(:func:`calibration.fast_columns.fast_columns`, pid/tid codes shared between blocks), and its
structs go before the next block is decoded. So a whole-file read holds the JSON bytes, the
columns and one block's structs (before, every event's structs and texts at once: 7× the
file at its peak on the 500 MB synthetic trace). An event's dict is parsed from its block's
text when asked for (:class:`BlockEvents`).

The same table as :func:`calibration.columnar.decode` gives: every rule is the per-event one
of :mod:`calibration.fast_columns`, and what is decided over all events (the ``ts`` span) is
decided once the blocks are read. Anything not plainly a trace returns None, and the trace is
read as before (the whole-text decode, then the general reader, with its messages).

A cut is taken at a ``}`` ``,`` only where the block before it decodes as complete events: a
``},`` inside a string or a nested object leaves the text unclosed, so it does not decode
(as in :mod:`calibration.stream`).
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from stepsim.calibration.columnar import ARG_FIELDS, ABSENT, Decoded, EventFields, Num
from stepsim.calibration.event_rows import Columns, Idents
from stepsim.calibration.fast_columns import fast_columns
from stepsim.calibration.trace_ts import block_ts, check_span
from stepsim.simcore.errors import InputError

__all__ = ["load_columns", "BlockEvents", "BLOCK_BYTES"]

BLOCK_BYTES = 16 * 1024**2
"""Bytes of ``traceEvents`` text decoded at a time."""
_TRIES = 4
"""Cuts tried per block, newest first, before the trace is read the whole-text way."""
_SPLIT = re.compile(rb"\}\s*,")
_I64_MIN = -(2**63)

_BArgs = msgspec.defstruct("_BArgs", [(f, Any, ABSENT) for f, _ in ARG_FIELDS],
                           rename=dict(ARG_FIELDS), frozen=True, gc=False)
_NO_ARGS = _BArgs()


class _BEvent(EventFields, gc=False):
    args: _BArgs = _NO_ARGS   # "args": null, or not an object: not plain (the decode fails)


_EVENTS = msgspec.json.Decoder(list[_BEvent], float_hook=Num)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_FIELDS = ("name", "cat", "ph", "pid", "tid", "ts", "dur", "id")


class BlockEvents(Sequence):
    """The ``traceEvents`` list read in blocks: each event parsed (by orjson) from its text
    when asked for, a fresh dict each time; a block's event texts are found once and kept
    while its events are asked for in turn."""

    def __init__(self, raw, spans: list[tuple[int, int]], starts: list[int]):
        self._raw, self._spans, self._starts = raw, spans, starts   # starts[-1]: the count
        self._cached: tuple[int, list] = (-1, [])

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = range(len(self))[i]
        k = bisect.bisect_right(self._starts, i) - 1
        if self._cached[0] != k:
            lo, hi = self._spans[k]
            self._cached = (k, _RAWS.decode(_wrap(self._raw, lo, hi)))
        return orjson.loads(memoryview(self._cached[1][i - self._starts[k]]))

    def texts(self, rows: list[int]) -> "EventTexts":
        """The events of ``rows`` (ascending) as their texts (copied out of the blocks), each
        parsed when read: what a slimmed table keeps (:meth:`calibration.events.EventTable.slim`)."""
        out, k, raws = EventTexts(), -1, []
        for i in rows:
            b = bisect.bisect_right(self._starts, i) - 1
            if b != k:
                k, (lo, hi) = b, self._spans[b]
                raws = _RAWS.decode(_wrap(self._raw, lo, hi))
            dict.__setitem__(out, i, bytes(memoryview(raws[i - self._starts[k]])))
        return out


class EventTexts(dict):
    """``{row: event text}`` whose ``[row]`` is the event's dict, parsed from its text (a fresh
    dict each time, as :class:`BlockEvents` gives)."""

    def __getitem__(self, i):
        return orjson.loads(dict.__getitem__(self, i))


def _wrap(raw, lo: int, hi: int) -> bytes:
    """``raw[lo:hi]`` in brackets (one copy)."""
    return b"".join((b"[", memoryview(raw)[lo:hi], b"]"))


def _body(raw) -> tuple[int, int, dict] | None:
    """(first byte, end) of the text inside the ``traceEvents`` brackets of ``raw``, and the
    other top-level keys; None when ``raw`` is not plainly a trace."""
    head = raw[:64].lstrip()[:1]
    try:
        if head == b"[":
            body, metadata = _stripped(raw), {}
        elif head == b"{":
            top = _TOP.decode(raw)
            body = top.pop("traceEvents", None)
            if body is None:
                return None
            metadata = {k: orjson.loads(memoryview(v)) for k, v in top.items()}
        else:
            return None
    except (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError,
            RecursionError):
        return None
    view = np.frombuffer(body, np.uint8)
    start = view.ctypes.data - np.frombuffer(raw, np.uint8).ctypes.data
    if view[:1].tobytes() != b"[" or view[-1:].tobytes() != b"]" or \
            not 0 <= start <= len(raw) - len(view):
        return None
    return start + 1, start + len(view) - 1, metadata


def _stripped(raw) -> memoryview:
    """``raw`` without its leading and trailing whitespace (a view, not a copy)."""
    a, b = 0, len(raw)
    while a < b and raw[a] in b" \t\r\n":
        a += 1
    while b > a and raw[b - 1] in b" \t\r\n":
        b -= 1
    return memoryview(raw)[a:b]


def _decode(raw, lo: int, hi: int) -> list | None:
    text = _wrap(raw, lo, hi)
    if not text.isascii():
        try:
            text.decode("utf-8")   # msgspec does not check strings it skips
        except UnicodeDecodeError:
            return None
    try:
        return _EVENTS.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _blocks(raw, lo: int, end: int, block: int):
    """(first byte, end, events) of each block of the text ``raw[lo:end]``; a block is None
    where no cut decodes (the caller then reads the trace the whole-text way)."""
    while lo < end:
        evs = None
        if end - lo > block:
            cands = list(_SPLIT.finditer(raw, max(lo, lo + block - 1024**2), lo + block))
            if not cands:
                m = _SPLIT.search(raw, lo + block, end)
                cands = [m] if m else []
            for m in cands[::-1][:_TRIES]:
                evs = _decode(raw, lo, m.start() + 1)
                if evs is not None:
                    yield lo, m.start() + 1, evs
                    lo = m.end()
                    if lo >= end:   # '},]': a trailing comma, not JSON
                        yield lo, end, None
                        return
                    break
        if evs is None:
            yield lo, end, _decode(raw, lo, end)
            return


def _block_columns(evs: list, seen: dict, ident: Idents):
    """(columns, ns, has ts, µs) of one block's events, or None."""
    if not evs:
        return None
    cols = {f: list(map(attrgetter(f), evs)) for f in _FIELDS}
    args = list(map(attrgetter("args"), evs))
    del evs
    argcols = {f: list(map(attrgetter(f), args)) for f, _ in ARG_FIELDS}
    del args
    for f in ("name", "cat", "ph"):     # one str per distinct text, not one per event
        if set(map(type, cols[f])) <= {str, type(None)}:   # (1 == 1.0 == True as keys)
            d = seen.setdefault(f, {})
            cols[f] = list(map(d.setdefault, cols[f], cols[f]))
    dec = Decoded(events=None, metadata={}, names=cols.pop("name"), args=[], **cols)
    got = block_ts(dec)
    if got is None:
        return None
    out = fast_columns(dec, None, ident, argcols)
    if out is None or (out.pid == _I64_MIN).any() or (out.tid == _I64_MIN).any():
        return None   # (a whole-text read gives -2**63 a code where some id is not an int)
    return (out, *got)


def load_columns(raw, block: int | None = None, split: int | None = None):
    """(events, metadata, ns of the events with a ``ts``, which have one, the mask of
    :func:`calibration.trace_ts.check_span`, the columns) of the trace JSON ``raw``, read a
    block at a time (``block`` bytes; default :data:`BLOCK_BYTES`), in two parts at once
    where the text has ``split`` bytes or more (default
    :data:`calibration.block_halves.SPLIT_BYTES`); None when it is not plainly a trace (see
    the module docstring)."""
    where = _body(raw)
    if where is None:
        return None
    lo, end, metadata = where
    from stepsim.calibration.block_halves import SPLIT_BYTES, halves

    got = halves(raw, lo, end, block or BLOCK_BYTES, split or SPLIT_BYTES)
    if got is None:
        return None
    acc, parts, str_ids = got
    spans, starts, bad_dur, timed_n = [], [0], [], 0
    for part in parts:
        bad_dur += [(i + starts[-1], why) for i, why in part.bad_dur]
        timed_n += part.timed
        for n in part.counts:
            starts.append(starts[-1] + n)
        spans += part.spans
    if starts[-1] == 0:
        return None
    got = acc.done()
    ns, has_ts, ts_us = got.pop(_NS), got.pop(_HAS), got.pop(_US)
    if not has_ts.any():
        return None
    cols = Columns(**{f: got.pop(f) for f in _ARRAYS}, ints=got, str_ids=str_ids, bad_args=[],
                   bad_dur=bad_dur, timed=timed_n)
    try:
        timed = check_span(Path("trace"), cols.ph.tolist, ts_us, ts_us, has_ts)
    except InputError:   # the general reader drops the few far events, or says so
        return None
    return BlockEvents(raw, spans, starts), metadata, ns[has_ts], has_ts, timed, cols


_ARRAYS = ("names", "cat", "raw_cat", "ph", "pid", "tid", "dur", "flow_id", "gbps", "coll",
           "dtype")
_NS, _HAS, _US = " ns", " has_ts", " ts_us"


class _Columns:
    """Columns filled a block at a time into arrays sized once from the first block's events
    per byte (grown by doubling if short), so the blocks' own arrays are let go as they are
    copied and the columns are never held twice."""

    def __init__(self):
        self.n, self.cols = 0, {}

    def add(self, block: dict[str, np.ndarray], guess: float) -> None:
        """``block``'s columns copied in after the rows so far, each taken out of ``block``
        as it is copied (so a large block, such as a half read apart, is not held twice)."""
        m = len(block[_NS])
        if not self.cols:
            cap = int(m * guess * 1.05) + m
            self.cols = {k: np.empty(cap, a.dtype) for k, a in block.items()}
        cap = len(self.cols[_NS])
        if self.n + m > cap:
            for k, a in self.cols.items():
                grown = np.empty(max(2 * cap, self.n + m), a.dtype)
                grown[:self.n] = a[:self.n]
                self.cols[k] = grown
                del a, grown
        for k in list(block):
            self.cols[k][self.n:self.n + m] = block.pop(k)
        self.n += m

    def done(self) -> dict[str, np.ndarray]:
        """The columns, each its own array of the events read (one copied at a time)."""
        out = {}
        for k in list(self.cols):
            a = self.cols.pop(k)
            out[k] = a if len(a) == self.n else a[:self.n].copy()
            del a
        return out
