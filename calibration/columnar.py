"""Reading a trace's events as columns, without a dict per event.

:func:`decode` parses the ``traceEvents`` of a trace's JSON with msgspec into small structs
that hold only the fields the event table reads (``name``, ``cat``, ``ph``, ``pid``, ``tid``,
``ts``, ``dur``, ``id``; ``args`` kept as its raw JSON text), and the text of every event
(:class:`LazyEvents`: an event's dict is parsed from it when asked for). The ``args`` the
table reads (:data:`calibration.event_aliases.ARG_ALIASES`) are parsed in one pass over the
joined ``args`` texts, skipping every other key (:func:`arg_columns`). A float is kept as its
JSON text (:class:`Num`), so ``ts`` is read to the ns exactly without a second scan of the
bytes.

This is the fast path of :func:`calibration.trace_io.load_trace`: when anything in the input
is not what a profiler writes (invalid JSON or UTF-8, an event that is not an object, a ``ts``
or ``dur`` that is not a plain number, an exponent, ``args`` that is not an object, an integer
beyond 64 bits), :func:`decode` or :func:`arg_columns` returns None and the caller reads the
file the general way (orjson, a dict per event), whose checks and messages then apply. Both
ways give the same table (``tests/test_columnar.py``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from operator import attrgetter
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import orjson

from stepsim.calibration.event_aliases import ARG_ALIASES

__all__ = ["Num", "EventFields", "Decoded", "LazyEvents", "decode", "arg_columns", "texts_to_ns",
           "plain"]


class Num(str):
    """The JSON text of a float as msgspec read it (``float_hook``)."""


_NO_ARGS = msgspec.Raw(b"{}")
ABSENT = -(2**63)
"""What an ``args`` struct holds for a key the event lacks (an int no column can hold: a
column reads it as −1, as it reads a missing key)."""


class EventFields(msgspec.Struct):
    """The fields of a trace event that both plain readers decode (this module's whole-text
    one and :mod:`calibration.block_reader`'s); each adds ``args`` its own way."""

    name: Any = None
    cat: Any = None
    ph: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = msgspec.UNSET   # a missing dur, told from "dur": null (which cannot be right)
    id: Any = None


class _Event(EventFields):
    args: msgspec.Raw = _NO_ARGS


ARG_FIELDS = [(f"{col}__{k}", key) for col, keys in ARG_ALIASES.items()
               for k, key in enumerate(keys)]
_Args = msgspec.defstruct("_Args", [(f, Any, ABSENT) for f, _ in ARG_FIELDS],
                          rename=dict(ARG_FIELDS))
_EVENTS = msgspec.json.Decoder(list[_Event], float_hook=Num)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ARGS = msgspec.json.Decoder(list[_Args], float_hook=Num)
_U64 = 2**64 - 1
_SPACE = re.compile(rb"[ \t\r\n]*")
_FIELDS = ("name", "cat", "ph", "pid", "tid", "ts", "dur", "id", "args")
_I64_MIN = -(2**63)


def plain(v):
    """``v`` as orjson would have parsed it: a float's text → float, an integer beyond 64 bits
    → float."""
    if type(v) is Num:
        return float(v)
    if type(v) is int and not _I64_MIN <= v <= _U64:
        return float(v)
    return v


class LazyEvents(Sequence):
    """The ``traceEvents`` list, each event parsed (by orjson) from its JSON text when asked
    for: a fresh dict each time, so changing one changes nothing."""

    def __init__(self, raws: list):
        self._raws = raws

    def __len__(self) -> int:
        return len(self._raws)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        try:
            return orjson.loads(memoryview(self._raws[i]))
        except orjson.JSONDecodeError:   # 1e400, which orjson refuses: inf, as the general
            return json.loads(bytes(self._raws[i]))   # reader reads it (its event dropped)


@dataclass
class Decoded:
    """What :func:`decode` read: the events' fields as lists (file order), every top-level key
    but ``traceEvents``, and the events themselves (:class:`LazyEvents`)."""

    events: LazyEvents
    metadata: dict
    names: list
    cat: list
    ph: list
    pid: list
    tid: list
    ts: list
    dur: list
    id: list
    args: list


def decode(raw: bytes | bytearray) -> Decoded | None:
    """The events of the trace JSON ``raw`` (an object with ``traceEvents``, or a bare array),
    or None when it is not plainly one (the general reader then says what is wrong)."""
    if not raw.isascii():
        try:
            bytes(raw).decode("utf-8")   # msgspec does not check strings it skips
        except UnicodeDecodeError:
            return None
    try:
        head = raw[_SPACE.match(raw).end():][:1]
        if head == b"{":
            top = _TOP.decode(raw)
            body = top.pop("traceEvents", None)
            if body is None:
                return None
            metadata = {k: orjson.loads(memoryview(v)) for k, v in top.items()}
        elif head == b"[":
            body, metadata = raw, {}
        else:
            return None
        evs = _EVENTS.decode(body)
        raws = _RAWS.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError,
            RecursionError):   # nested too deep for msgspec: the general reader says so
        return None
    if not evs:
        return None
    cols = {("names" if f == "name" else f): list(map(attrgetter(f), evs)) for f in _FIELDS}
    del evs
    for f in ("names", "cat", "ph"):     # one str per distinct text, not one per event
        seen: dict = {}
        if set(map(type, cols[f])) <= {str, type(None)}:   # (1 == 1.0 == True as keys)
            cols[f] = list(map(seen.setdefault, cols[f], cols[f]))
    return Decoded(events=LazyEvents(raws), metadata=metadata, **cols)


def arg_columns(args: list) -> dict[str, list] | None:
    """The ``args`` the table reads, parsed from their texts in one pass: for each spelling
    ``k`` of each column of :data:`calibration.event_aliases.ARG_ALIASES`, ``<column>__<k>``
    → its value per event (:data:`ABSENT` where the key is missing). None when some ``args``
    is not an object (the general reader says what it does with it)."""
    try:
        parsed = _ARGS.decode(b"[" + b",".join(args) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return {f: list(map(attrgetter(f), parsed)) for f, _ in ARG_FIELDS}


_POW10 = 10 ** np.arange(19, dtype=np.int64)
_CHUNK = 1 << 20


def texts_to_ns(texts: list[str]) -> np.ndarray | None:
    """ns (int64) of JSON number texts in µs without an exponent, digits below 1 ns truncated
    (as :func:`calibration.trace_ts.text_to_ns`); None when a text has an exponent or more
    than 16 integer digits."""
    out = np.empty(len(texts), np.int64)
    for lo in range(0, len(texts), _CHUNK):
        b = np.array(texts[lo:lo + _CHUNK], dtype="S")
        w = b.dtype.itemsize
        m = b.view(np.uint8).reshape(len(b), w).astype(np.int64)
        digit = (m >= 48) & (m <= 57)
        dot = m == 46
        if ((~digit & ~dot & (m != 0) & (m != 45)).any()) or (m[:, 1:] == 45).any():
            return None          # an exponent, or something no plain number holds
        p = np.where(dot.any(1), dot.argmax(1), (m != 0).sum(1))[:, None]
        if (p > 17).any():
            return None
        j = np.arange(w)[None, :]
        e = np.where(j < p, p - j + 2, p - j + 3)
        use = digit & (e >= 0)
        ns = np.where(use, (m - 48) * _POW10[np.clip(e, 0, 18)], 0).sum(1)
        out[lo:lo + len(b)] = np.where(m[:, 0] == 45, -ns, ns)
    return out

