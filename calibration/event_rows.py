"""The general event reader: one event dict at a time into the event table's columns
(:func:`row_columns`), for any input :func:`calibration.trace_io.load_trace` accepts, and
the per-value rules both readers share (:func:`to_int`, :func:`dur_ns`, :class:`Idents`);
:mod:`calibration.columnar` is the fast reader of plain traces. Columns and units: see
:mod:`calibration.events`."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from stepsim.calibration.event_aliases import CATEGORY_ALIASES, LEGACY_GPU_PID, arg_value
from stepsim.calibration.trace_ts import MAX_SPAN_US

__all__ = ["Columns", "row_columns", "Idents", "BadIdent", "to_int", "to_float", "dur_ns", "category",
           "GPU_CATS", "INT_COLS", "BAD_BYTES", "MAX_COPY_BYTES", "copy_bytes"]

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
INT_COLS = ("correlation", "external_id", "stream", "device", "bytes", "in_nelems",
            "out_nelems", "group_size")
_STREAM_TID = re.compile(r"^\s*stream\s+(\d+)", re.IGNORECASE)
_I64 = 2**63 - 1
MAX_DUR_INT = int(MAX_SPAN_US)
MAX_COPY_BYTES = 2**44
"""The most bytes one GPU copy or memset can move (16 TiB): past any device's memory (141 GB
on an H200) and any host's; a larger ``bytes`` cannot be right."""
BAD_BYTES = -2
"""The ``bytes`` column's mark of a ``bytes`` that is given but cannot be right (negative, not
a number, past :data:`MAX_COPY_BYTES`); −1 is one not given. The event table counts the marks
in a warning and takes them as not given (:func:`calibration.events.build_table`)."""


def copy_bytes(value: int, given: bool) -> int:
    """The ``bytes`` column's value for the :func:`to_int` of a given (or not) ``bytes``."""
    if not given:
        return -1
    return value if 0 <= value <= MAX_COPY_BYTES else BAD_BYTES


def to_int(v) -> int:
    """An int64 from an int, an integral float or a numeric string; −1 otherwise (and for
    values beyond int64)."""
    if v is None or isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v if -_I64 <= v <= _I64 else -1
    if isinstance(v, float):
        return int(v) if v == v and abs(v) < 9e18 else -1
    if isinstance(v, str):
        s = v.strip()
        try:
            return to_int(int(s))
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return -1
            return int(f) if f == f and abs(f) < 9e18 else -1
    return -1


def dur_ns(e: dict, d) -> tuple[int, str | None]:
    """(ns, None) of a ``dur`` (µs) that is not a plain in-range int, or (0, the problem) when
    it is not a finite number in [0, MAX_SPAN_US] (the record cannot be right)."""
    if d is None:
        problem = "dur is null"
    elif isinstance(d, bool) or not isinstance(d, (int, float, str)):
        problem = f"non-numeric dur {d!r}"
    else:
        try:
            fd = float(d)
        except ValueError:
            fd = None
        except OverflowError:  # an int beyond a double
            fd = math.inf
        if fd is None:
            problem = f"non-numeric dur {d!r}"
        elif math.isnan(fd) or (math.isinf(fd) and not isinstance(d, int)):
            problem = f"non-finite dur {d!r}"
        elif fd < 0:
            problem = f"negative dur {d!r} µs"
        elif fd > MAX_SPAN_US:
            problem = (f"dur {d!r} µs is longer than {MAX_SPAN_US / 86_400e6:.0f} days, the "
                       "longest a trace may span")
        else:
            return int(round(fd * 1000)), None
    name = str(e.get("name", ""))
    name = name if len(name) <= 60 else name[:57] + "..."
    return 0, f"{problem} (on {e.get('cat', 'event')} {name!r})"


def to_float(v) -> float:
    if v is None or isinstance(v, bool):
        return float("nan")
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).strip())
    except ValueError:
        return float("nan")




class BadIdent(ValueError):
    """A pid or tid that cannot be right: a number that is not a finite integer within int64
    (``1e400``, ``2.5``, a 23-digit id); its event is dropped and counted."""


_INT_TEXT = re.compile(r"^\s*[+-]?\d+\s*$")


def _shown_id(v) -> str:
    s = repr(v) if isinstance(v, str) else str(v)
    return s if len(s) <= 32 else s[:29] + "..."


class Idents:
    """pid/tid values → int64: ints as they are, integral floats and numeric strings parsed,
    ``"stream 7"`` → 7, any other text a negative code, in order of first sight (``str_ids``
    maps text → code).

    Raises:
        BadIdent: a number (or numeric text) that is not a finite integer within int64
            (before, ``1e400`` and a 23-digit id were kept as text codes, silently).
    """

    def __init__(self):
        self.str_ids: dict[str, int] = {}

    def __call__(self, v) -> int:
        if type(v) is int and -_I64 <= v <= _I64:
            return v
        if v is None:
            return -1
        if type(v) is int or (type(v) is float and not (math.isfinite(v) and v == int(v)
                                                         and -_I64 <= v <= _I64)):
            raise BadIdent(f"{_shown_id(v)}, not a finite integer within int64")
        if type(v) is float:
            return int(v)
        s = str(v)
        m = _INT_TEXT.match(s) or _STREAM_TID.match(s)
        if m is not None:
            text = m.group(1) if m.re is _STREAM_TID else s
            n = None if len(text.strip().lstrip("+-").lstrip("0")) > 19 else int(text)
            if n is None or not -_I64 <= n <= _I64:   # (no int() of a 5000-digit text)
                raise BadIdent(f"{_shown_id(v)}, not an integer within int64")
            return n
        code = self.str_ids.get(s)  # text
        if code is None:
            code = self.str_ids[s] = -2 - len(self.str_ids)
        return code


_JSON_KIND = {list: "an array", str: "a string", int: "a number", float: "a number",
              bool: "true or false"}


def category(c, p) -> str:
    """The normalised category of raw ``cat`` ``c`` (str or None) and phase ``p``."""
    if p in ("i", "I"):
        return "instant"
    if p == "M":
        return "metadata"
    return CATEGORY_ALIASES.get(c.lower(), "other") if c is not None else "other"


@dataclass
class Columns:
    """The per-event columns of a table before its rows are fixed up (see
    :func:`calibration.events.build_table`), with what was found wrong: events whose ``args``
    is not an object or whose ``pid`` or ``tid`` is an object or an array (``bad_args``), events
    whose ``dur`` cannot be right (index, problem each), and how many events have a ``dur``."""

    names: np.ndarray
    cat: np.ndarray
    raw_cat: np.ndarray
    ph: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    dur: np.ndarray
    ints: dict
    flow_id: np.ndarray
    gbps: np.ndarray
    coll: np.ndarray
    dtype: np.ndarray
    str_ids: dict
    bad_args: list
    bad_dur: list
    timed: int
    bad_text: list = field(default_factory=list)
    """Events whose ``name`` or ``ph`` is not a string (index, problem each): the profiler
    writes both as text; a ``ph`` of 7 made the event no phase at all, a ``name`` of 12345
    no step marker, both without a word before."""


def row_columns(events) -> Columns:
    """The columns of ``events`` (a sequence of event dicts), one event at a time."""
    n = len(events)
    names = np.empty(n, dtype=object)
    cat = np.empty(n, dtype=object)
    raw_cat = np.empty(n, dtype=object)
    ph = np.empty(n, dtype=object)
    pid = np.empty(n, dtype=np.int64)
    tid = np.empty(n, dtype=np.int64)
    dur = np.zeros(n, dtype=np.int64)
    ints = {c: np.full(n, -1, dtype=np.int64) for c in INT_COLS}
    flow_id = np.full(n, -1, dtype=np.int64)
    gbps = np.full(n, np.nan)
    coll = np.full(n, "", dtype=object)
    dtype = np.full(n, "", dtype=object)
    cat_cache: dict = {}

    ident = Idents()
    corr, ext, stream, device, nbytes = (ints["correlation"], ints["external_id"], ints["stream"],
                                        ints["device"], ints["bytes"])
    in_n, out_n, gsize = ints["in_nelems"], ints["out_nelems"], ints["group_size"]
    bad_args: list[tuple[int, str]] = []
    bad_dur: list[tuple[int, str]] = []
    timed = 0
    bad_text: list[tuple[int, str]] = []
    for i, e in enumerate(events):
        nm = e.get("name")
        names[i] = nm if isinstance(nm, str) else ("" if nm is None else str(nm))
        c = e.get("cat")
        p = e.get("ph")
        if not (c is None or type(c) is str):
            c = str(c)
        if not (p is None or type(p) is str) or not (nm is None or type(nm) is str):
            what = "ph" if not (p is None or type(p) is str) else "name"
            v = p if what == "ph" else nm
            bad_text.append((i, f"{what} is {_JSON_KIND.get(type(v), 'not a string')}"))
            p = None if p is None else str(p)
        ph[i] = p
        raw_cat[i] = c
        key = (c, p)
        nc = cat_cache.get(key)
        if nc is None:
            nc = category(c, p)
            cat_cache[key] = nc
        if c is None and p == "X":   # the pre-Kineto autograd profiler writes no cat
            nc = "kernel" if e.get("pid") == LEGACY_GPU_PID else "cpu_op"
        cat[i] = nc
        pv, tv = e.get("pid"), e.get("tid")
        if type(pv) in (dict, list) or type(tv) in (dict, list):
            bad_args.append((i, f"{'pid' if type(pv) in (dict, list) else 'tid'} is "
                                f"{'an object' if dict in (type(pv), type(tv)) else 'an array'}"))
            pv = tv = None
        try:
            pid[i] = ident(pv)
        except BadIdent as err:
            bad_args.append((i, f"pid is {err}"))
            pid[i] = -1
        try:
            tid[i] = ident(tv)
        except BadIdent as err:
            if not bad_args or bad_args[-1][0] != i:
                bad_args.append((i, f"tid is {err}"))
            tid[i] = -1
        if "dur" in e:   # "dur": null is a dur that cannot be right, not a missing one
            d = e["dur"]
            timed += 1
            if type(d) is int and 0 <= d <= MAX_DUR_INT:
                dur[i] = d * 1000
            else:
                dur[i], problem = dur_ns(e, d)
                if problem:
                    bad_dur.append((i, problem))
        if p in ("s", "f", "t"):
            flow_id[i] = to_int(e.get("id"))
        a = e.get("args")
        if a is None:
            continue
        if type(a) is not dict:
            bad_args.append((i, f"args is {_JSON_KIND.get(type(a), 'not an object')}"))
            continue
        v = arg_value(a, "correlation")
        if v is not None:
            corr[i] = to_int(v)
        v = arg_value(a, "external_id")
        if v is not None:
            ext[i] = to_int(v)
        if nc in GPU_CATS or nc == "gpu_user_annotation":
            for col, out in ((stream, "stream"), (device, "device")):
                v = arg_value(a, out)
                if v is not None:
                    col[i] = to_int(v)
            v = arg_value(a, "bytes")
            nbytes[i] = copy_bytes(to_int(v), v is not None)
            v = arg_value(a, "gbps")
            if v is not None:
                gbps[i] = to_float(v)
        v = arg_value(a, "coll_name")
        if v is not None:
            coll[i] = str(v)
            in_n[i] = to_int(arg_value(a, "in_nelems"))
            out_n[i] = to_int(arg_value(a, "out_nelems"))
            gsize[i] = to_int(arg_value(a, "group_size"))
            dt = arg_value(a, "dtype")
            dtype[i] = "" if dt is None else str(dt)
    return Columns(names=names, cat=cat, raw_cat=raw_cat, ph=ph, pid=pid, tid=tid, dur=dur,
                   ints=ints, flow_id=flow_id, gbps=gbps, coll=coll, dtype=dtype,
                   str_ids=ident.str_ids, bad_args=bad_args, bad_dur=bad_dur, timed=timed,
                   bad_text=bad_text)
