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

Two readers, one result: a plain trace is read without a dict per event
(:mod:`calibration.columnar`: the few fields the table reads, each event's text kept and
parsed when asked for); anything else (invalid JSON, an event that is not an object, a ``ts``
written as a string, ...) by the general reader (orjson, a dict per event), whose checks and
messages are the ones below. ``load_trace(path, columnar=False)`` forces the general reader.

Size limits: a file (compressed or not) and its decompressed JSON may each hold at most
:data:`MAX_JSON_BYTES` (2 GiB). The general reader takes about 5 bytes of memory per JSON
byte, so a 2 GiB trace needs ~10 GiB there; gzip is decompressed as a stream and stops at
the limit, so a small "gzip bomb" cannot exhaust memory.

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

import os
import re
import stat
from dataclasses import dataclass, field
from decimal import InvalidOperation
from pathlib import Path

import numpy as np

from stepsim.calibration.block_reader import load_columns
from stepsim.calibration.columnar import decode
from stepsim.calibration.trace_ts import (MAX_ABS_TS_US, MAX_SPAN_US, check_span, check_ts,
                                          drop_bad_events, drop_far_events,
                                          columnar_ts, exact_ts, value_to_ns)
from stepsim.models.params import MAX_RANK_ID
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import gunzip_chunks, missing, open_input
from stepsim.simcore import read_ahead
from stepsim.simcore.parsing import json_type, parse_json, top_level_key_count

__all__ = ["RawTrace", "load_trace", "load_bytes", "load_rank_traces", "TRACE_SUFFIXES", "MAX_JSON_BYTES",
           "MAX_ABS_TS_US", "MAX_SPAN_US"]

GZIP_MAGIC = b"\x1f\x8b"
TRACE_SUFFIXES = (".json", ".json.gz", ".gz")
MAX_JSON_BYTES = 2 * 1024**3
"""Largest trace file, and largest decompressed JSON, that is read (bytes; see the module
docstring for why 2 GiB)."""
SIDECAR_NAME = "sidecar.json"
"""File name of the capture harness's sidecar (:mod:`calibration.capture`), never a trace."""
_SIDECAR_KEY = "stepsim_sidecar"
_CHUNK = 16 * 1024**2
_GZ_PIECE = 1024**2
"""Decompressed bytes gathered before they join the whole text: pieces that stay in the CPU's
cache (16 MB ones are copied twice through memory: the gunzip of the 54 MB trace 0.10 -> 0.07 s)."""
TWO_ARRAYS = ("the document has two top-level 'traceEvents' keys: which array is the trace is "
              "not clear")


@dataclass
class RawTrace:
    """One trace file as read, before normalisation.

    Attributes:
        path: the file.
        events: the ``traceEvents`` list, as parsed (dicts, or
            :class:`calibration.columnar.LazyEvents` parsing each when asked for; never
            modified here); in a table
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
    columns: object = None
    """The events' fields as :func:`calibration.columnar.decode` read them (but ``ts``,
    already in ``ts_ns``); None when the file was read the general way, or once
    :func:`calibration.events.build_table` has read them (they go, to free memory)."""

    def __len__(self) -> int:
        return len(self.events)


def _gib(n: int) -> str:
    return f"{n / 1024**3:.3g} GiB"


def _too_big(p: Path, what: str) -> InputError:
    return InputError(p, f"{what} exceeds {_gib(MAX_JSON_BYTES)}, the limit on a trace "
                         "(calibration.trace_io.MAX_JSON_BYTES)")


def _read_capped(p: Path, chunks, what: str) -> bytearray:
    """Read the iterable of byte ``chunks`` to its end, stopping once more than MAX_JSON_BYTES
    came."""
    out = bytearray()
    for chunk in chunks:
        out += chunk
        if len(out) > MAX_JSON_BYTES:
            raise _too_big(p, what)
    return out


def _read_bytes(p: Path, notes: list[str]) -> tuple[bytes | bytearray, int]:
    """The (decompressed) JSON bytes of ``p`` and the file's size on disk (bytes; 0 for a
    pipe; ``notes``: what was left out). Reads as a stream, never more than MAX_JSON_BYTES of
    input or output."""
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
        raw = read_ahead.take(p, st) if regular else None   # (decompressed beside the imports)
        raw, gz = (raw, True) if raw is not None else _read_open(p, regular, notes)
    except FileNotFoundError:
        raise missing(p) from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_JSON_BYTES:  # a regular file that grew after the size check
        raise _too_big(p, "size")
    after = " (after decompression)" if gz else ""
    if not raw:
        raise InputError(p, f"file is empty{after}")
    if raw.isspace():
        raise InputError(p, f"file holds only whitespace{after}")
    _refuse_binary(p, raw, gz)
    return raw, size


def _read_open(p: Path, regular: bool, notes: list[str]) -> tuple[bytes | bytearray, bool]:
    """(the bytes of ``p``, decompressed when it is gzip; whether it was) read here."""
    with open_input(p) as f:
        head = f.peek(64)[:64]
        gz = head[:2] == GZIP_MAGIC
        if not gz:   # binary refused before it is read: a 2 GiB file of zeros took 4 GiB
            _refuse_binary(p, head, gz)   # and 19 s to refuse (break22)
            return (f.read() if regular else
                    _read_capped(p, iter(lambda: f.read(_CHUNK), b""), "size")), gz
        return _read_capped(p, gunzip_chunks(p, f, _GZ_PIECE, notes), "decompressed size"), gz


def _refuse_binary(p: Path, raw, gz: bool) -> None:
    """InputError for bytes that cannot begin JSON text (a control byte, or one over 0x7f
    that is no UTF-8 byte-order mark), naming what the file is not: gzip (for a ``.gz``
    name without its header), or JSON."""
    head = bytes(raw[:64]).lstrip()[:1]
    if not head or (0x20 <= head[0] < 0x80) or bytes(raw[:3]) == b"\xef\xbb\xbf":
        return
    byte = f"it starts with byte 0x{head[0]:02x}"
    if gz:
        raise InputError(p, f"not a profiler trace: the gzip data decompresses to binary, not "
                            f"JSON text ({byte})")
    if p.name.lower().endswith(".gz"):
        raise InputError(p, f"not a gzip file (no gzip header) and not JSON text either "
                            f"({byte}): not a profiler trace")
    raise InputError(p, f"not a profiler trace: binary data, not JSON text ({byte})")



class SidecarNotTrace(InputError):
    """A stepsim capture sidecar given where a trace was expected."""


def load_trace(path: str | Path, columnar: bool = True) -> RawTrace:
    """Read one Kineto trace file.

    Args:
        path: a ``.json`` or ``.json.gz`` file (gzip detected by magic bytes).
        columnar: read a plain trace without a dict per event (:mod:`calibration.columnar`;
            the same result); False reads every file the general way (orjson).

    Returns:
        a :class:`RawTrace` with the events, the other top-level keys and exact ``ts_ns``.

    Raises:
        InputError: missing or unreadable file, directory, device, empty file, a file or
            decompressed JSON over :data:`MAX_JSON_BYTES`, truncated/corrupt gzip, text that is
            not UTF-8 or not valid JSON (with the line, column and byte offset), no trace events (a capture sidecar is named as such),
            no event with a good ``ts`` (one that is not an object, lacks ``ts`` or has a
            non-numeric, non-finite or out-of-range one is dropped and counted in a warning),
            ``ts`` spread over more than 30 days by more than a few events (a few far from
            the median are dropped and counted) (with the event index).
    """
    p = Path(path)
    notes: list[str] = []
    raw, size = _read_bytes(p, notes)
    rt = load_bytes(p, raw, size, columnar)
    rt.warnings += [f"{p.name}: {n}" for n in notes]
    return rt


def load_bytes(p: Path, raw: bytes | bytearray, size: int, columnar: bool = True) -> RawTrace:
    """:func:`load_trace` of the (decompressed) JSON ``raw`` read from ``p`` (``size``: the
    file's bytes on disk)."""
    if raw.count(b'"traceEvents"') > 1 and top_level_key_count(raw, "traceEvents") > 1:
        raise InputError(p, TWO_ARRAYS)
    if columnar:
        fast = _load_columnar(p, raw, size)
        if fast is not None:
            return fast
    data = parse_json(p, raw, "trace", overflow_ok=True)   # 1e400: its event is dropped
    if isinstance(data, list):
        events, metadata = data, {}
    elif isinstance(data, dict):
        if "traceEvents" not in data:
            if _SIDECAR_KEY in data:
                raise SidecarNotTrace(p, "is a stepsim capture sidecar, not a trace (give it "
                                          "as the sidecar)")
            keys = ", ".join(sorted(map(str, data))[:6]) or "none"
            raise InputError(p, f"JSON has no 'traceEvents' (top-level keys: {keys}); not a profiler trace")
        events = data["traceEvents"]
        if not isinstance(events, list):
            raise InputError(p, f"'traceEvents' is {json_type(events)}, expected an array")
        metadata = {k: v for k, v in data.items() if k != "traceEvents"}
    else:
        raise InputError(p, f"JSON top level is {json_type(data)}, expected an object or "
                            "array")
    if not events:
        raise InputError(p, "trace has no events")
    events, dropped = drop_bad_events(p, events)
    ts_vals, has_ts, ts_us = check_ts(p, events)
    if not has_ts.any():
        raise InputError(p, "no event has a 'ts'")
    events, far = drop_far_events(p, events, ts_us, has_ts)
    if far:
        ts_vals, has_ts, ts_us = check_ts(p, events)
    timed = check_span(p, lambda: [e.get("ph") for e in events], ts_vals, ts_us, has_ts)
    try:
        ns_present, exact = exact_ts(raw, ts_vals, has_ts)
    except (ValueError, InvalidOperation, OverflowError):  # pragma: no cover - defensive
        ns_present = np.array([value_to_ns(v) for v, h in zip(ts_vals, has_ts) if h], np.int64)
        exact = False
    rt = _raw_trace(p, events, metadata, ns_present, has_ts, timed, exact, size, len(raw))
    rt.warnings += [w for w in (dropped, far) if w]
    return rt


def _raw_trace(p: Path, events, metadata: dict, ns_present: np.ndarray, has_ts: np.ndarray,
               timed: np.ndarray | None, exact: bool, size: int, json_bytes: int,
               columns=None) -> RawTrace:
    """The RawTrace of the events read either way, ``ts_ns`` completed (metadata events
    without a ``ts`` or far outside the others' range moved into it)."""
    ts_ns = np.empty(len(events), np.int64)
    ts_ns[has_ts] = ns_present
    if timed is not None:
        ts_ns[~timed] = np.clip(ts_ns[~timed], ts_ns[timed].min(), ts_ns[timed].max())
    ts_ns[~has_ts] = ts_ns[has_ts].min()
    warnings = [] if exact else [
        f"{p.name}: could not match every 'ts' text to its event; sub-µs digits may be rounded"]
    return RawTrace(path=p, events=events, metadata=metadata, ts_ns=ts_ns, file_bytes=size,
                    json_bytes=json_bytes, exact_ts=exact, warnings=warnings, columns=columns)


def _load_columnar(p: Path, raw, size: int) -> RawTrace | None:
    """:func:`load_trace` of a plain trace without a dict per event
    (:mod:`calibration.columnar`); None when the file needs the general reader (which then
    reads it, with its checks and messages). Read a block at a time
    (:mod:`calibration.block_reader`) where it can be, else the whole text at once."""
    got = load_columns(raw)
    if got is not None:
        events, metadata, ns, has_ts, timed, cols = got
        return _raw_trace(p, events, metadata, ns, has_ts, timed, True, size, len(raw),
                          columns=cols)
    dec = decode(raw)
    got = None if dec is None else columnar_ts(p, dec)
    if got is None:
        return None
    ns, has_ts, timed = got
    dec.ts = None                       # read: its texts go
    return _raw_trace(p, dec.events, dec.metadata, ns, has_ts, timed, True, size, len(raw),
                      columns=dec)


def trace_candidates(d: Path) -> tuple[list[Path], list[str]]:
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
        raise missing(p, "file or directory")
    if not p.is_dir():
        return [load_trace(p)]
    files, warnings = trace_candidates(p)
    out = []
    for f in files:
        try:
            out.append(load_trace(f))
        except SidecarNotTrace:
            continue
    if not out:
        why = f" ({'; '.join(warnings)})" if warnings else ""
        from stepsim.calibration.folders import why_no_trace

        raise InputError(p, "directory holds no trace files (*.json, *.json.gz)"
                         f"{why}{why_no_trace(p)}")
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
