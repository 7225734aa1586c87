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

Errors: every problem with the input raises :class:`simcore.errors.InputError` with the file
and, where it applies, the place (``byte N`` of the decompressed JSON, ``event N`` = index in
``traceEvents``): missing file, a directory, empty file, truncated or corrupt gzip, invalid
JSON, JSON without trace events, an event without ``ts``, a non-numeric ``ts``.
"""
from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np
import orjson

from simcore.errors import InputError

__all__ = ["RawTrace", "load_trace", "load_rank_traces", "TRACE_SUFFIXES"]

GZIP_MAGIC = b"\x1f\x8b"
TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
_TS_RE = re.compile(rb'"ts"\s*:\s*"?(-?\d+)(?:\.(\d*))?([eE][-+]?\d+)?')
_NO_TS_OK = frozenset(("M",))
"""Phases allowed to lack ``ts`` (Chrome-format metadata events)."""


@dataclass
class RawTrace:
    """One trace file as read, before normalisation.

    Attributes:
        path: the file.
        events: the ``traceEvents`` list, as parsed (dicts; never modified here).
        metadata: every top-level key except ``traceEvents`` (``distributedInfo``,
            ``deviceProperties``, ``baseTimeNanoseconds``, …); empty for the bare-array form.
        ts_ns: shape (len(events),), int64: each event's ``ts`` in ns, parsed exactly from its
            text (no offset applied). Events without ``ts`` (metadata only) hold the minimum of
            the others.
        file_bytes: size of the file on disk (bytes).
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


def _read_bytes(p: Path) -> tuple[bytes, int]:
    if p.is_dir():
        raise InputError(p, "is a directory, expected a trace file (.json or .json.gz)")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(p, "no such file") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror}") from None
    size = len(raw)
    if size == 0:
        raise InputError(p, "file is empty")
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise InputError(p, "gzip stream is truncated (file cut short?)") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise InputError(p, f"corrupt gzip data: {e}") from None
        if not raw.strip():
            raise InputError(p, "file is empty (after decompression)")
    elif not raw.strip():
        raise InputError(p, "file holds only whitespace")
    return raw, size


def _byte_offset(raw: bytes, char_pos: int) -> int:
    """orjson reports a character position; turn it into a byte offset."""
    text = raw.decode("utf-8", errors="surrogateescape")
    return len(text[:char_pos].encode("utf-8", errors="surrogateescape"))


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


def _check_ts(p: Path, events: list) -> tuple[list, np.ndarray]:
    """The ``ts`` of every event and which events have one; raises InputError naming the
    first bad event. Fast path: every event a dict with a finite numeric ``ts``."""
    try:
        ts_vals = [e.get("ts") for e in events]
    except AttributeError:
        ts_vals = None
    if ts_vals is not None:
        types = set(map(type, ts_vals))
        if types <= {int, float}:
            arr = np.fromiter(ts_vals, dtype=float, count=len(ts_vals))
            if np.isfinite(arr).all():
                return ts_vals, np.ones(len(events), dtype=bool)
    ts_vals = []
    has_ts = np.ones(len(events), dtype=bool)
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
        fv = v
        if isinstance(v, str):
            try:
                fv = float(v)
            except ValueError:
                raise InputError(p, f"non-numeric ts {v!r}", f"event {i}") from None
        if fv != fv or fv in (float("inf"), float("-inf")):
            raise InputError(p, f"non-finite ts {v!r}", f"event {i}")
        ts_vals.append(v)
    return ts_vals, has_ts


def load_trace(path: str | Path) -> RawTrace:
    """Read one Kineto trace file.

    Args:
        path: a ``.json`` or ``.json.gz`` file (gzip detected by magic bytes).

    Returns:
        a :class:`RawTrace` with the events, the other top-level keys and exact ``ts_ns``.

    Raises:
        InputError: missing file, directory, empty file, truncated/corrupt gzip, invalid JSON
            (with the byte offset), no trace events, an event that is not an object, an event
            without ``ts`` or with a non-numeric ``ts`` (with the event index).
    """
    p = Path(path)
    raw, size = _read_bytes(p)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        first = str(e).split(":")[0]
        raise InputError(p, f"invalid JSON: {first}", f"byte {_byte_offset(raw, e.pos)}") from None
    if isinstance(data, list):
        events, metadata = data, {}
    elif isinstance(data, dict):
        if "traceEvents" not in data:
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
    ts_vals, has_ts = _check_ts(p, events)
    if not has_ts.any():
        raise InputError(p, "no event has a 'ts'")
    try:
        ns_present, exact = _exact_ts(raw, ts_vals, has_ts)
    except (ValueError, InvalidOperation, OverflowError):  # pragma: no cover - defensive
        ns_present = np.array([_value_to_ns(v) for v, h in zip(ts_vals, has_ts) if h], np.int64)
        exact = False
    ts_ns = np.empty(len(events), np.int64)
    ts_ns[has_ts] = ns_present
    ts_ns[~has_ts] = ns_present.min()
    warnings = [] if exact else [
        f"{p.name}: could not match every 'ts' text to its event; sub-µs digits may be rounded"]
    return RawTrace(path=p, events=events, metadata=metadata, ts_ns=ts_ns, file_bytes=size,
                    json_bytes=len(raw), exact_ts=exact, warnings=warnings)


def _is_trace_file(p: Path) -> bool:
    n = p.name.lower()
    return p.is_file() and (n.endswith(".json") or n.endswith(".json.gz") or n.endswith(".gz"))


def load_rank_traces(path: str | Path) -> list[RawTrace]:
    """Read every trace file (``*.json``, ``*.json.gz``) directly inside a directory, sorted by
    file name. A single file is also accepted (a list of one).

    Raises:
        InputError: the path does not exist, the directory holds no trace file, or any file is
            bad (see :func:`load_trace`).
    """
    p = Path(path)
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if p.is_file():
        return [load_trace(p)]
    files = sorted(f for f in p.iterdir() if _is_trace_file(f))
    if not files:
        raise InputError(p, "directory holds no trace files (*.json, *.json.gz)")
    return [load_trace(f) for f in files]
