"""The event table's columns from a plain trace's fields as :func:`calibration.columnar.decode`
read them, a column at a time (:func:`fast_columns`): the same columns, warnings and dropped
events as :func:`calibration.event_rows.row_columns` gives for the same events, by the same
rules (a field that is not a plain value goes through the general reader's rule for it)."""
from __future__ import annotations

from itertools import chain, repeat

import numpy as np
from msgspec import UNSET, UnsetType

from stepsim.calibration.columnar import ABSENT, Decoded, Num, arg_columns, plain
from stepsim.calibration.event_aliases import ARG_ALIASES, LEGACY_GPU_PID
from stepsim.calibration.event_rows import (BAD_BYTES, GPU_CATS, INT_COLS, MAX_COPY_BYTES,
                                            MAX_DUR_INT, BadIdent, Columns, Idents,
                                            category, dur_ns, to_float, to_int)
from stepsim.calibration.trace_ts import MAX_SPAN_US

__all__ = ["fast_columns"]


_NONE_ABSENT = {None: ABSENT}


def _mask(vals: list, among) -> np.ndarray:
    """Boolean per value: is it one of ``among``."""
    hit = dict.fromkeys(among, True)
    return np.fromiter(map(hit.get, vals, repeat(False)), bool, len(vals))


def _spellings(args: dict, col: str) -> list[list]:
    """The per-event values of each spelling of ``col`` (:data:`ABSENT` where missing)."""
    return [args[f"{col}__{k}"] for k in range(len(ARG_ALIASES[col]))]


def _present(v) -> bool:
    return v is not None and v is not ABSENT   # msgspec fills a missing key with ABSENT itself


def _first(spellings: list[list], i: int):
    """Event ``i``'s value of the first spelling present (None if none is)."""
    for vals in spellings:
        if _present(vals[i]):
            return vals[i]
    return None


def _ints(vals: list) -> np.ndarray | None:
    """``vals`` as int64 (None and :data:`ABSENT` → ABSENT) when all are ints in int64 or
    None; else None."""
    kinds = set(map(type, vals))
    if not kinds <= {int, type(None)}:
        return None
    try:
        if kinds == {int}:   # no None to map: one C loop over the list (2.5x fromiter's)
            return np.array(vals, np.int64)
        return np.fromiter(map(_NONE_ABSENT.get, vals, vals), np.int64, len(vals))
    except OverflowError:
        return None


def _int_column(spellings: list[list]) -> np.ndarray:
    """int64 per event of the first spelling present (−1 where none is), by
    :func:`calibration.event_rows.to_int`."""
    arrs = [_ints(vals) for vals in spellings]
    if any(a is None for a in arrs):
        n = len(spellings[0])
        return np.array([to_int(plain(_first(spellings, i))) for i in range(n)], np.int64)
    out = arrs[0]
    for a in arrs[1:]:
        out = np.where(out == ABSENT, a, out)
    return np.where(out == ABSENT, -1, out)   # to_int: −2**63 is −1 too


def _rows_with(spellings: list[list], rows=None) -> list[int]:
    """The events (of ``rows``, all by default) where some spelling is present."""
    found: set[int] = set()
    for vals in spellings:
        if rows is None:
            found.update(i for i, v in enumerate(vals) if v is not ABSENT and v is not None)
        else:
            found.update(i for i in rows if vals[i] is not ABSENT and vals[i] is not None)
    return sorted(found)


def _objects(vals: list, conv) -> np.ndarray:
    """An object array of ``vals``, each that is not a str through ``conv``."""
    if set(map(type, vals)) != {str}:
        vals = [v if type(v) is str else conv(v) for v in vals]
    return np.fromiter(vals, object, len(vals))


def _all_text(vals: list) -> bool:
    """Whether every value is a string or missing (None, :data:`ABSENT`, an int)."""
    if set(map(type, vals)) <= {str, type(None)}:
        return True
    return all(type(v) is str or v is None or v is ABSENT for v in vals)


def _text(v):
    return v if v is None else str(plain(v))


def _idents(pids: list, tids: list, ident: Idents) -> tuple[np.ndarray, np.ndarray, dict] | None:
    """pid and tid columns by :class:`calibration.event_rows.Idents` (``ident``: the codes
    given so far), codes given in the order the general reader gives them (pid then tid,
    event by event); None when some is an object or an array."""
    kinds = set(map(type, pids)) | set(map(type, tids))
    if dict in kinds or list in kinds:   # the general reader drops those events, and says so
        return None
    if kinds <= {int, str}:     # hashable, and no 1 == 1.0 == True between kinds
        if kinds == {int}:
            try:
                pid, tid = np.array(pids, np.int64), np.array(tids, np.int64)
            except OverflowError:
                return None     # beyond int64: the general reader drops those events
            if (pid == -2**63).any() or (tid == -2**63).any():
                return None     # -2**63 too (Idents' range is symmetric)
            return pid, tid, ident.str_ids
        try:
            code = {v: ident(v) for v in dict.fromkeys(chain.from_iterable(zip(pids, tids)))}
        except BadIdent:        # the general reader drops those events, and says so
            return None
        return (np.array(list(map(code.__getitem__, pids)), np.int64),
                np.array(list(map(code.__getitem__, tids)), np.int64), ident.str_ids)
    pid, tid = np.empty(len(pids), np.int64), np.empty(len(pids), np.int64)
    try:
        for i, (p, t) in enumerate(zip(pids, tids)):
            pid[i], tid[i] = ident(plain(p)), ident(plain(t))
    except BadIdent:
        return None
    return pid, tid, ident.str_ids


def fast_columns(dec: Decoded, events, ident: Idents | None = None,
                 args: dict | None = None) -> Columns | None:
    """The columns :func:`calibration.event_rows.row_columns` gives for the same events, from
    what :func:`calibration.columnar.decode` read (``events``: the same, as dicts, for a
    message); None when some ``args`` is not an object, or some ``pid`` or ``tid`` is an object
    or an array (the general reader then drops and counts those events). ``ident``: the pid/tid codes of the events before these (a trace read in blocks,
    :mod:`calibration.block_reader`); ``args``: their :func:`calibration.columnar.arg_columns`
    when already read."""
    args = arg_columns(dec.args) if args is None else args
    if args is None:
        return None
    n = len(dec.names)
    if not _all_text(dec.names) or not _all_text(dec.ph):
        return None   # the general reader drops and counts those events
    names = _objects(dec.names, lambda v: "" if v is None else str(plain(v)))
    raw_cat, ph = _objects(dec.cat, _text), _objects(dec.ph, _text)
    cats, phs = raw_cat.tolist(), ph.tolist()
    by_cat = {c: category(c, "X") for c in set(cats)}
    cat = np.fromiter(map(by_cat.__getitem__, cats), object, n)
    cat[_mask(phs, ("i", "I"))] = "instant"    # the phase overrides the cat by meaning
    cat[_mask(phs, ("M",))] = "metadata"
    if None in by_cat:          # the pre-Kineto autograd profiler writes no cat
        for i in [i for i, c in enumerate(cats) if c is None]:
            if phs[i] == "X":
                cat[i] = "kernel" if dec.pid[i] == LEGACY_GPU_PID else "cpu_op"
    got = _idents(dec.pid, dec.tid, Idents() if ident is None else ident)
    if got is None:
        return None
    pid, tid, str_ids = got
    dur, bad_dur, timed = _durations(dec)
    flow = _mask(phs, ("s", "f", "t"))
    flow_id = np.where(flow, _int_column([dec.id]), -1)
    ints = {c: np.full(n, -1, dtype=np.int64) for c in INT_COLS}
    ints["correlation"] = _int_column(_spellings(args, "correlation"))
    ints["external_id"] = _int_column(_spellings(args, "external_id"))
    gpu = _mask(cat.tolist(), (*GPU_CATS, "gpu_user_annotation"))
    for col in ("stream", "device"):
        ints[col] = np.where(gpu, _int_column(_spellings(args, col)), -1)
    sp = _spellings(args, "bytes")
    given = np.zeros(n, dtype=bool)
    given[_rows_with(sp, np.nonzero(gpu)[0].tolist())] = True
    nbytes = _int_column(sp)
    ints["bytes"] = np.where(given & ((nbytes < 0) | (nbytes > MAX_COPY_BYTES)), BAD_BYTES,
                             np.where(given, nbytes, -1))
    gbps = np.full(n, np.nan)
    sp = _spellings(args, "gbps")
    for i in _rows_with(sp, np.nonzero(gpu)[0].tolist()):
        gbps[i] = to_float(plain(_first(sp, i)))
    coll = np.full(n, "", dtype=object)
    dtype = np.full(n, "", dtype=object)
    sp = _spellings(args, "coll_name")
    rows = _rows_with(sp)
    for i in rows:
        coll[i] = str(plain(_first(sp, i)))
    if rows:
        for c in ("in_nelems", "out_nelems", "group_size"):
            col = _int_column(_spellings(args, c))
            ints[c][rows] = col[rows]
        sp = _spellings(args, "dtype")
        for i in rows:
            v = _first(sp, i)
            dtype[i] = "" if v is None else str(plain(v))
    return Columns(names=names, cat=cat, raw_cat=raw_cat, ph=ph, pid=pid, tid=tid, dur=dur,
                   ints=ints, flow_id=flow_id, gbps=gbps, coll=coll, dtype=dtype,
                   str_ids=str_ids, bad_args=[], bad_dur=bad_dur, timed=timed)


def _durations(dec: Decoded) -> tuple[np.ndarray, list, int]:
    """(dur in ns per event, the events whose ``dur`` cannot be right, how many have one),
    as :func:`calibration.event_rows.row_columns` reads them (a ``dur`` the event lacks is
    ``msgspec.UNSET``; ``"dur": null`` is one that cannot be right)."""
    durs = dec.dur
    n = len(durs)
    dur = np.zeros(n, dtype=np.int64)
    timed = n - durs.count(UNSET)
    kinds = set(map(type, durs))
    todo = np.zeros(n, bool)
    us = np.zeros(n)
    fast = kinds <= {int, Num, UnsetType}
    if fast:   # the type of each dur once; the tests on it in C
        types = np.fromiter(map(type, durs), object, n)
        isint = types == int
        try:
            whole = np.zeros(n, dtype=np.int64)
            whole[isint] = list(map(durs.__getitem__, np.flatnonzero(isint).tolist()))
        except OverflowError:
            whole = None
    if fast and whole is not None:
        ok = isint & (whole >= 0) & (whole <= MAX_DUR_INT)
        dur[ok] = whole[ok] * 1000
        todo = isint & ~ok
        if Num in kinds:
            rows = np.flatnonzero(types == Num)
            us = np.fromiter(map(float, map(durs.__getitem__, rows.tolist())), float, len(rows))
            fine = (us >= 0) & (us <= MAX_SPAN_US)
            dur[rows[fine]] = np.rint(us[fine] * 1000).astype(np.int64)
            todo[rows[~fine]] = True
    else:                       # some dur is not a plain number: each by the general rule
        todo = np.array([d is not UNSET for d in durs], dtype=bool)
    bad: list[tuple[int, str]] = []
    for i in np.nonzero(todo)[0].tolist():
        # the event's name and cat for the message, not the event (orjson refuses 1e400)
        who = {k: v for k, v in (("name", dec.names[i]), ("cat", dec.cat[i])) if v is not None}
        dur[i], problem = dur_ns(who, plain(durs[i]))
        if problem:
            bad.append((i, problem))
    return dur, bad, timed
