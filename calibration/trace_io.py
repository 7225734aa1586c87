"""Loading PyTorch-profiler (Kineto) Chrome traces.

:func:`load_trace` reads one trace file; :func:`load_rank_traces` reads a directory of per-rank
files. Both only read: input files are never modified.

Accepted input (facts from the shared sample traces, ``../shared/traces/SOURCES.md``):

* ``.json`` or ``.json.gz``; gzip is detected by its magic bytes ``1f 8b``, not by the suffix;
* an object with a ``traceEvents`` array (other top-level keys may come before or after it and
  are kept in :attr:`RawTrace.metadata`), or a bare JSON array of events (the Dec 2020 Kineto
  samples);
* ``ts`` as a JSON number or a numeric string, in µs (Kineto's unit; ``displayTimeUnit`` only
  affects display and is ignored).

Exact timestamps: a JSON float cannot hold epoch-scale µs with sub-µs digits (a double keeps
about 16 significant digits, ``1606910596297023.125`` needs 19), so the ``ts`` texts are also
read from the raw bytes and turned into int64 **nanoseconds** exactly
(:attr:`RawTrace.ts_ns`). Digits below 1 ns are truncated.

Size limits: a file (compressed or not) and its decompressed JSON may each hold at most
:data:`MAX_JSON_BYTES` (2 GiB). The largest shared sample is 54 MB of JSON, and parsing takes
about 5 bytes of memory per JSON byte, so a 2 GiB trace already needs ~10 GiB; gzip is
decompressed as a stream and stops at the limit, so a small "gzip bomb" cannot exhaust memory.

Time limits: every ``ts`` must be finite and within ±:data:`MAX_ABS_TS_US` (what int64 ns can
hold, about 292 years around the epoch), and the ``ts`` of the events (metadata ``M`` events
aside) may spread over at most :data:`MAX_SPAN_US` (30 days): a profiler trace covers seconds
to hours, so anything wider is a corrupt timestamp.

Errors: every problem with the input raises :class:`simcore.errors.InputError` with the file
and, where it applies, the place (``line L, column C, byte N`` of the decompressed JSON,
``event N`` = index in ``traceEvents``): missing or unreadable file, a directory or device, empty file, a file over
the size limit, truncated or corrupt gzip, invalid JSON, JSON without trace events (a stepsim
capture sidecar is named as such), an event without ``ts``, a non-numeric, non-finite or
out-of-range ``ts``, timestamps spread over more than 30 days.
"""
from __future__ import annotations

import gzip
import math
import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from stepsim.models.params import MAX_RANK_ID
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import open_input
from stepsim.simcore.parsing import parse_json

__all__ = ["RawTrace", "load_trace", "load_rank_traces", "TRACE_SUFFIXES", "MAX_JSON_BYTES",
           "MAX_ABS_TS_US", "MAX_SPAN_US"]

GZIP_MAGIC = b"\x1f\x8b"
TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
MAX_JSON_BYTES = 2 * 1024**3
"""Largest trace file, and largest decompressed JSON, that is read (bytes; see the module
docstring for why 2 GiB)."""
MAX_ABS_TS_US = 9.2e15
"""Largest ``|ts|`` accepted (µs): ``ts`` is held as int64 ns, whose range is ±9.22e18 ns."""
MAX_SPAN_US = 30 * 86_400 * 1e6
"""Widest spread of the events' ``ts``, and longest ``dur``, accepted (µs; 30 days)."""
SIDECAR_NAME = "sidecar.json"
"""File name of the capture harness's sidecar (:mod:`calibration.capture`), never a trace."""
_SIDECAR_KEY = "stepsim_sidecar"
_CHUNK = 16 * 1024**2
_TS_RE = re.compile(rb'"ts"\s*:\s*"?(-?\d+)(?:\.(\d*))?([eE][-+]?\d+)?')
_NO_TS_OK = frozenset(("M",))
"""Phases allowed to lack ``ts`` (Chrome-format metadata events)."""


@dataclass
class RawTrace:
    """One trace file as read, before normalisation.

    Attributes:
        path: the file.
        events: the ``traceEvents`` list, as parsed (dicts; never modified here); in a table
            slimmed by :meth:`calibration.events.EventTable.slim`, a dict of the few events it
            keeps, by index.
        metadata: every top-level key except ``traceEvents`` (``distributedInfo``,
            ``deviceProperties``, ``baseTimeNanoseconds``, …); empty for the bare-array form.
        ts_ns: shape (len(events),), int64: each event's ``ts`` in ns, parsed exactly from its
            text (no offset applied). Events without ``ts`` (metadata only) hold the minimum of
            the others; a metadata event's ``ts`` far outside the others' range is clamped
            into it.
        file_bytes: size of the file on disk (bytes; 0 for a pipe).
        json_bytes: size of the (decompressed) JSON text (bytes).
        exact_ts: False when the ``ts`` texts could not be matched to events and ``ts_ns`` was
            computed from the parsed floats instead (sub-µs digits may then be lost).
    """

    path: Path
    events: list
    metadata: dict
    ts_ns: np.ndarray
    file_bytes: int = 0
    json_bytes: int = 0
    exact_ts: bool = True
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB"


def _too_big(p: Path, what: str) -> InputError:
    return InputError(p, f"{what} exceeds {_gib(MAX_JSON_BYTES)}, the limit on a trace "
                         "(calibration.trace_io.MAX_JSON_BYTES)")


def _read_capped(p: Path, stream, what: str) -> bytearray:
    """Read ``stream`` to its end in chunks, stopping once more than MAX_JSON_BYTES came."""
    out = bytearray()
    while chunk := stream.read(_CHUNK):
        out += chunk
        if len(out) > MAX_JSON_BYTES:
            raise _too_big(p, what)
    return out


def _read_bytes(p: Path) -> tuple[bytes | bytearray, int]:
    """The (decompressed) JSON bytes of ``p`` and the file's size on disk (bytes; 0 for a
    pipe). Reads as a stream, never more than MAX_JSON_BYTES of input or output."""
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise InputError(p, "is a directory, expected a trace file (.json or .json.gz)")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise InputError(p, "is a device, expected a trace file (.json or .json.gz)")
        regular = stat.S_ISREG(st.st_mode)
        size = st.st_size if regular else 0
        if size > MAX_JSON_BYTES:
            raise _too_big(p, f"file size {_gib(size)}")
        with open_input(p) as f:
            gz = f.peek(2)[:2] == GZIP_MAGIC
            if not gz:
                raw = f.read() if regular else _read_capped(p, f, "size")
            else:
                try:
                    with gzip.GzipFile(fileobj=f) as g:
                        raw = _read_capped(p, g, "decompressed size")
                except EOFError:
                    raise InputError(p, "gzip stream is truncated (file cut short?)") from None
                except (gzip.BadGzipFile, zlib.error) as e:
                    raise InputError(p, f"corrupt gzip data: {e}") from None
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_JSON_BYTES:  # a regular file that grew after the size check
        raise _too_big(p, "size")
    after = " (after decompression)" if gz else ""
    if not raw:
        raise InputError(p, f"file is empty{after}")
    if raw.isspace():
        raise InputError(p, f"file holds only whitespace{after}")
    return raw, size


def _text_to_ns(int_part: bytes, frac: bytes, exp: bytes) -> int:
    if not exp:
        f = (frac + b"000")[:3]
        sign = -1 if int_part.startswith(b"-") else 1
        return int(int_part) * 1000 + sign * int(f)
    d = Decimal((int_part + (b"." + frac if frac else b"") + exp).decode()) * 1000
    return int(d)


def _value_to_ns(v) -> int:
    if isinstance(v, int):
        return v * 1000
    if isinstance(v, float):
        return int(round(v * 1000))
    d = Decimal(str(v).strip()) * 1000
    return int(d)


def _exact_ts(raw: bytes, ts_vals: list, has_ts: np.ndarray) -> tuple[np.ndarray | None, bool]:
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
        if np.allclose(ns / 1000.0, parsed, rtol=1e-12, atol=1e-3):
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
            ns = _text_to_ns(*found[k])
            if abs(ns / 1000.0 - fv) <= max(1e-3, abs(fv) * 1e-12):
                hit = ns
                break
            k += 1
        if hit is None:
            out[i] = _value_to_ns(v)
            exact = False
        else:
            out[i] = hit
            j = k + 1
    return out, exact


def _check_ts(p: Path, events: list) -> tuple[list, np.ndarray, np.ndarray]:
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
            raise InputError(p, f"event is a {type(e).__name__}, expected an object", f"event {i}")
        v = e.get("ts")
        if v is None:
            if e.get("ph") in _NO_TS_OK:
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


def _check_span(p: Path, events: list, ts_vals: list, ts_us: np.ndarray,
                has_ts: np.ndarray) -> np.ndarray | None:
    """Raise InputError when the events' ``ts`` (metadata ``M`` events aside: Chrome ignores
    their ``ts``) spread over more than MAX_SPAN_US, naming the event farthest from the median
    ``ts``. Returns None, or, when only metadata events lie that far out, the mask of the
    events that are not metadata (the others' ``ts`` are to be clamped into their range)."""
    if np.ptp(ts_us[has_ts]) <= MAX_SPAN_US:
        return None
    timed = has_ts & np.fromiter((e.get("ph") != "M" for e in events), dtype=bool,
                                 count=len(events))
    rows = np.nonzero(timed)[0]
    if not len(rows):
        return None
    t = ts_us[rows]
    off = np.abs(t - np.median(t))
    k = int(np.argmax(off))
    if t.max() - t.min() > MAX_SPAN_US:
        i = int(rows[k])
        raise InputError(p, f"ts {ts_vals[i]!r} µs lies {off[k] / 86_400e6:.3g} days from the "
                            f"median ts of the trace; a trace may span at most "
                            f"{MAX_SPAN_US / 86_400e6:.0f} days (corrupt timestamp?)",
                         f"event {i}")
    return timed


class _SidecarNotTrace(InputError):
    """A stepsim capture sidecar given where a trace was expected."""


def load_trace(path: str | Path) -> RawTrace:
    """Read one Kineto trace file.

    Args:
        path: a ``.json`` or ``.json.gz`` file (gzip detected by magic bytes).

    Returns:
        a :class:`RawTrace` with the events, the other top-level keys and exact ``ts_ns``.

    Raises:
        InputError: missing or unreadable file, directory, device, empty file, a file or
            decompressed JSON over :data:`MAX_JSON_BYTES`, truncated/corrupt gzip, text that is
            not UTF-8 or not valid JSON (with the line, column and byte offset), no trace events (a capture sidecar is named as such),
            an event that is not an object, an event without ``ts`` or with a non-numeric,
            non-finite or out-of-range ``ts``, ``ts`` spread over more than 30 days (with the
            event index).
    """
    p = Path(path)
    raw, size = _read_bytes(p)
    data = parse_json(p, raw, "trace")
    if isinstance(data, list):
        events, metadata = data, {}
    elif isinstance(data, dict):
        if "traceEvents" not in data:
            if _SIDECAR_KEY in data:
                raise _SidecarNotTrace(p, "is a stepsim capture sidecar, not a trace (give it "
                                          "as the sidecar)")
            keys = ", ".join(sorted(map(str, data))[:6]) or "none"
            raise InputError(p, f"JSON has no 'traceEvents' (top-level keys: {keys}); not a profiler trace")
        events = data["traceEvents"]
        if not isinstance(events, list):
            raise InputError(p, f"'traceEvents' is a {type(events).__name__}, expected an array")
        metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    else:
        raise InputError(p, f"JSON top level is a {type(data).__name__}, expected an object or array")
    if not events:
        raise InputError(p, "trace has no events")
    ts_vals, has_ts, ts_us = _check_ts(p, events)
    if not has_ts.any():
        raise InputError(p, "no event has a 'ts'")
    timed = _check_span(p, events, ts_vals, ts_us, has_ts)
    try:
        ns_present, exact = _exact_ts(raw, ts_vals, has_ts)
    except (ValueError, InvalidOperation, OverflowError):  # pragma: no cover - defensive
        ns_present = np.array([_value_to_ns(v) for v, h in zip(ts_vals, has_ts) if h], np.int64)
        exact = False
    ts_ns = np.empty(len(events), np.int64)
    ts_ns[has_ts] = ns_present
    if timed is not None:
        ts_ns[~timed] = np.clip(ts_ns[~timed], ts_ns[timed].min(), ts_ns[timed].max())
    ts_ns[~has_ts] = ts_ns[has_ts].min()
    warnings = [] if exact else [
        f"{p.name}: could not match every 'ts' text to its event; sub-µs digits may be rounded"]
    return RawTrace(path=p, events=events, metadata=metadata, ts_ns=ts_ns, file_bytes=size,
                    json_bytes=len(raw), exact_ts=exact, warnings=warnings)


def _trace_candidates(d: Path) -> tuple[list[Path], list[str]]:
    """The trace files directly inside directory ``d`` (sorted by name, the capture sidecar
    left out) and warnings for entries that could not be looked at."""
    try:
        entries = sorted(d.iterdir())
    except OSError as e:
        raise InputError(d, f"cannot list the directory: {e.strerror or e}") from None
    files, warnings = [], []
    for f in entries:
        n = f.name.lower()
        if not n.endswith(TRACE_SUFFIXES) or n == SIDECAR_NAME:
            continue
        if f.is_symlink() and not f.exists():
            warnings.append(f"{d.name}/{f.name}: broken symbolic link (to {os.readlink(f)}); "
                            "skipped")
        elif f.is_file():
            files.append(f)
    return files, warnings


def load_rank_traces(path: str | Path) -> list[RawTrace]:
    """Read every trace file (``*.json``, ``*.json.gz``, ``*.gz``) directly inside a directory,
    sorted by file name. A single file is also accepted (a list of one).

    The capture harness's ``sidecar.json``, and any other JSON that is a stepsim sidecar (top
    level key ``stepsim_sidecar``), is not a trace and is skipped. A broken symbolic link is
    skipped with a warning (in the first trace's ``warnings``).

    Raises:
        InputError: the path does not exist, the directory cannot be listed or holds no trace
            file, or any file is bad (see :func:`load_trace`).
    """
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if not p.is_dir():
        return [load_trace(p)]
    files, warnings = _trace_candidates(p)
    out = []
    for f in files:
        try:
            out.append(load_trace(f))
        except _SidecarNotTrace:
            continue
    if not out:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        raise InputError(p, f"directory holds no trace files (*.json, *.json.gz){why}")
    out[0].warnings[:0] = warnings
    return out


_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_of(raw: RawTrace, warnings: list[str]) -> tuple[int | None, int, str]:
    """(rank, world size, where the rank came from: ``distributedInfo``, ``file name``,
    ``none``) of one trace; a rank taken from the file name adds a warning to ``warnings``."""
    info = raw.metadata.get("distributedInfo")
    got = None
    if isinstance(info, str):
        # some Kineto versions write it as a Python-repr string
        m = re.search(r"'rank':\s*(\d+)", info)
        w = re.search(r"'world_size':\s*(\d+)", info)
        if m:
            got = int(m.group(1)), int(w.group(1)) if w else 1
    elif isinstance(info, dict) and "rank" in info:
        try:
            got = int(info["rank"]), int(info.get("world_size", 1) or 1)
        except (TypeError, ValueError, OverflowError):
            pass
    if got is not None:
        if 0 <= got[0] <= MAX_RANK_ID and 1 <= got[1] <= MAX_RANK_ID + 1:
            return got[0], got[1], "distributedInfo"
        warnings.append(f"{raw.path.name}: distributedInfo gives rank {got[0]} of world size "
                        f"{got[1]}, which cannot be right (ranks are 0 to {MAX_RANK_ID}); "
                        "ignored")
    m = _RANK_IN_NAME.search(raw.path.name)
    if m and int(m.group(1)) <= MAX_RANK_ID:
        warnings.append(f"{raw.path.name}: no distributedInfo; rank {m.group(1)} taken from the file name")
        return int(m.group(1)), 1, "file name"
    return None, 1, "none"
