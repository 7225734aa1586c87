"""A trace's timestamps: every ``ts`` checked and read to the ns exactly.

:func:`check_ts` checks the parsed events' ``ts`` (numeric, finite, in range) and
:func:`exact_ts` reads their texts from the raw bytes (a JSON float cannot hold epoch-scale µs
with sub-µs digits); :func:`columnar_ts` does both for the events
:func:`calibration.columnar.decode` read (whose float texts it has). :func:`check_span`
refuses ``ts`` spread over more than :data:`MAX_SPAN_US`. The rules and messages are those
of :mod:`calibration.trace_io`'s docstring.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np

from stepsim.calibration.columnar import Decoded, Num, plain, texts_to_ns
from stepsim.simcore.errors import InputError
from stepsim.simcore.parsing import json_type

__all__ = ["MAX_ABS_TS_US", "MAX_SPAN_US", "check_ts", "exact_ts", "check_span", "columnar_ts",
           "block_ts", "drop_bad_events", "drop_far_events", "text_to_ns", "value_to_ns"]

MAX_ABS_TS_US = 9.2e15
"""Largest ``|ts|`` accepted (µs): ``ts`` is held as int64 ns, whose range is ±9.22e18 ns."""
MAX_SPAN_US = 30 * 86_400 * 1e6
"""Widest spread of the events' ``ts``, and longest ``dur``, accepted (µs; 30 days)."""
_TS_RE = re.compile(rb'"ts"\s*:\s*"?(-?\d+)(?:\.(\d*))?([eE][-+]?\d+)?')
NO_TS_OK = frozenset(("M",))
"""Phases allowed to lack ``ts`` (Chrome-format metadata events)."""


def text_to_ns(int_part: bytes, frac: bytes, exp: bytes) -> int:
    if not exp:
        f = (frac + b"000")[:3]
        sign = -1 if int_part.startswith(b"-") else 1
        return int(int_part) * 1000 + sign * int(f)
    d = Decimal((int_part + (b"." + frac if frac else b"") + exp).decode()) * 1000
    return int(d)


def value_to_ns(v) -> int:
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, float):
        return int(round(v * 1000))
    d = Decimal(str(v).strip()) * 1000
    return int(d)


_RTOL = 1e-15
"""How far a ``ts`` text's value may be from its parsed float and still be its text (relative;
a double holds 2.2e-16, the text's ns / 1000 adds one rounding): 1e-12 was 5.6 µs at epoch
scale, wider than the gap between two events, so a text one event off matched and every later
event took its neighbour's ``ts`` (breaker finding)."""


def exact_ts(raw: bytes, ts_vals: list, has_ts: np.ndarray) -> tuple[np.ndarray | None, bool]:
    """Match the ``"ts": <text>`` occurrences of the raw JSON to the events in order.

    Returns (ns per event with ts, exact?). The fast path needs as many texts as events with a
    ``ts`` and every text's float equal to the parsed value; otherwise a greedy walk skips
    texts that belong to something else (a ``ts`` key nested in ``args``)."""
    found = _TS_RE.findall(raw)
    want = [v for v, h in zip(ts_vals, has_ts) if h]
    n = len(want)
    if not n:
        return np.zeros(0, np.int64), True
    if len(found) == n and not any(e for _, _, e in found):
        ints = np.array([f[0] for f in found]).astype(np.int64)
        fr = np.array([(f[1] + b"000")[:3] for f in found]).astype(np.int64)
        ns = ints * 1000 + np.where(ints < 0, -fr, fr)
        parsed = np.array([float(v) for v in want], dtype=float)
        if np.allclose(ns / 1000.0, parsed, rtol=_RTOL, atol=1e-3):
            return ns, True
    # slow path: greedy alignment
    out = np.empty(n, np.int64)
    j = 0
    exact = True
    for i, v in enumerate(want):
        fv = float(v)
        k = j
        hit = None
        while k < len(found) and k < j + 8:
            ns = text_to_ns(*found[k])   # past int64 ("ts": 1e400): a dropped event's text
            if abs(ns) < 2**63 and abs(ns / 1000.0 - fv) <= max(1e-3, abs(fv) * _RTOL):
                hit = ns
                break
            k += 1
        if hit is None:
            out[i] = value_to_ns(v)
            exact = False
        else:
            out[i] = hit
            j = k + 1
    return out, exact


def check_ts(p: Path, events: list) -> tuple[list, np.ndarray, np.ndarray]:
    """The ``ts`` of every event, which events have one, and the ``ts`` as float µs (0 where
    absent); raises InputError naming the first bad event. Fast path: every event a dict with
    an in-range numeric ``ts``."""
    try:
        ts_vals = [e.get("ts") for e in events]
    except AttributeError:
        ts_vals = None
    if ts_vals is not None and set(map(type, ts_vals)) <= {int, float}:
        try:
            arr = np.fromiter(ts_vals, dtype=float, count=len(ts_vals))
        except OverflowError:  # an int beyond a double: the slow path names it
            arr = None
        if arr is not None and (np.abs(arr) <= MAX_ABS_TS_US).all():  # False for NaN
            return ts_vals, np.ones(len(events), dtype=bool), arr
    ts_vals = []
    has_ts = np.ones(len(events), dtype=bool)
    arr = np.zeros(len(events))
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise InputError(p, f"event is {json_type(e)}, expected an object", f"event {i}")
        v = e.get("ts")
        if v is None:
            if e.get("ph") in NO_TS_OK:
                has_ts[i] = False
                ts_vals.append(0)
                continue
            raise InputError(p, f"event {e.get('name', '?')!r} has no 'ts'", f"event {i}")
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise InputError(p, f"non-numeric ts {v!r}", f"event {i}")
        try:
            fv = float(v)
        except ValueError:
            raise InputError(p, f"non-numeric ts {v!r}", f"event {i}") from None
        except OverflowError:  # an int too large for a double
            fv = math.inf
        if math.isnan(fv) or (math.isinf(fv) and not isinstance(v, int)):
            raise InputError(p, f"non-finite ts {v!r}", f"event {i}")
        if abs(fv) > MAX_ABS_TS_US:
            raise InputError(p, f"ts {v!r} µs is out of range (|ts| above {MAX_ABS_TS_US:.3g} µs "
                                "cannot be held as int64 ns)", f"event {i}")
        ts_vals.append(v)
        arr[i] = fv
    return ts_vals, has_ts, arr


def check_span(p: Path, phases, ts_vals: list, ts_us: np.ndarray,
                has_ts: np.ndarray) -> np.ndarray | None:
    """Raise InputError when the events' ``ts`` (metadata ``M`` events aside: Chrome ignores
    their ``ts``) spread over more than MAX_SPAN_US, naming the event farthest from the median
    ``ts``. Returns None, or, when only metadata events lie that far out, the mask of the
    events that are not metadata (the others' ``ts`` are to be clamped into their range).
    ``phases``: a callable giving every event's ``ph``."""
    if np.ptp(ts_us[has_ts]) <= MAX_SPAN_US:
        return None
    timed = has_ts & np.fromiter((ph != "M" for ph in phases()), dtype=bool, count=len(ts_us))
    rows = np.nonzero(timed)[0]
    if not len(rows):
        return None
    t = ts_us[rows]
    off = np.abs(t - np.median(t))
    k = int(np.argmax(off))
    if t.max() - t.min() > MAX_SPAN_US:
        i = int(rows[k])
        raise InputError(p, f"ts {plain(ts_vals[i])!r} µs lies {off[k] / 86_400e6:.3g} days from the "
                            f"median ts of the trace; a trace may span at most "
                            f"{MAX_SPAN_US / 86_400e6:.0f} days (corrupt timestamp?)",
                         f"event {i}")
    return timed


def columnar_ts(p: Path, dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(ns of each event with a ``ts``, which events have one, the mask :func:`check_span`
    returns) of the events :func:`calibration.columnar.decode` read; None when some ``ts`` is
    missing outside a metadata event, is not an int or a plain decimal, or is out of range
    (the general reader then says which)."""
    got = block_ts(dec)
    if got is None or not got[1].any():
        return None
    ns_all, has_ts, ts_us = got
    try:
        timed = check_span(p, lambda: dec.ph, dec.ts, ts_us, has_ts)
    except InputError:   # the general reader drops the few far events, or says so
        return None
    return ns_all[has_ts], has_ts, timed


def block_ts(dec: Decoded) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(ns of every event, 0 where it has no ``ts``; which events have one; µs as floats, 0
    where absent) of some events :func:`calibration.columnar.decode` read, or None (as
    :func:`columnar_ts`, the span over all events not checked)."""
    ts = dec.ts
    n = len(ts)
    kinds = np.fromiter(map(type, ts), object, n)   # one pass; the tests below in C
    has_ts = kinds != type(None)
    if any(dec.ph[i] not in NO_TS_OK for i in np.nonzero(~has_ts)[0]):
        return None
    rows_i = np.flatnonzero(kinds == int).tolist()   # (a bool's type is bool, not int)
    rows_n = np.flatnonzero(kinds == Num).tolist()
    del kinds
    if len(rows_i) + len(rows_n) != int(has_ts.sum()):
        return None
    texts = list(map(ts.__getitem__, rows_n))
    ns = texts_to_ns(texts)
    if ns is None:
        return None
    try:
        ints = np.array(list(map(ts.__getitem__, rows_i)), dtype=np.int64)
    except OverflowError:
        return None
    ts_us = np.zeros(n)
    ts_us[rows_i] = ints
    ts_us[rows_n] = np.fromiter(map(float, texts), float, len(texts))
    if not (np.abs(ts_us) <= MAX_ABS_TS_US).all():
        return None
    ns_all = np.zeros(n, np.int64)
    ns_all[rows_i] = ints * 1000
    ns_all[rows_n] = ns
    return ns_all, has_ts, ts_us


def drop_bad_events(p: Path, events: list) -> tuple[list, str | None]:
    """``events`` without those whose ``ts`` cannot be right (not an object, no ``ts`` outside
    a metadata event, non-numeric, non-finite or out of range), and a warning counting them
    with the first one's reason (None when none is dropped; ``events`` itself then). A
    trace whose every event is bad keeps them, so :func:`check_ts` refuses it naming one."""
    try:
        check_ts(p, events)
        return events, None
    except InputError as e:
        first = f"{e.where}: {e.problem}" if e.where else e.problem
    kept = []
    for e in events:
        try:
            check_ts(p, [e])
        except InputError:
            continue
        kept.append(e)
    if not kept:
        return events, None
    n = len(events) - len(kept)
    return kept, f"{p.name}: {n} event(s) whose ts cannot be right were dropped (first: {first})"


def drop_far_events(p: Path, events: list, ts_us: np.ndarray,
                    has_ts: np.ndarray) -> tuple[list, str | None]:
    """``events`` without the few (at most 1 %, or one, of those with a ``ts``, metadata
    aside) whose ``ts`` lies more than half of :data:`MAX_SPAN_US` from the median ``ts``: a
    corrupt timestamp (0, -7) among epoch-scale ones, which cannot be right. With a warning
    counting them and naming the first (None, and ``events`` itself, when there are none, or
    when so many lie far out that :func:`check_span` is to refuse the trace: two captures
    pasted together are not a few bad records)."""
    timed = has_ts & np.fromiter((e.get("ph") != "M" for e in events), bool, len(events))
    rows = np.nonzero(timed)[0]
    if not len(rows) or np.ptp(ts_us[rows]) <= MAX_SPAN_US:
        return events, None
    off = np.abs(ts_us[rows] - np.median(ts_us[rows]))
    far = rows[off > MAX_SPAN_US / 2]
    if not len(far) or len(far) > max(1, len(rows) // 100):
        return events, None
    i = int(far[0])
    days = abs(ts_us[i] - np.median(ts_us[rows])) / 86_400e6
    gone = set(far.tolist())
    kept = [e for k, e in enumerate(events) if k not in gone]
    return kept, (f"{p.name}: dropped {len(far)} of {len(rows)} event(s) whose ts lies more than "
                  f"{MAX_SPAN_US / 2 / 86_400e6:.0f} days from the median ts of the trace "
                  f"(a corrupt timestamp; first: event {i}: ts {plain(events[i].get('ts'))!r} "
                  f"µs, {days:.3g} days away)")
