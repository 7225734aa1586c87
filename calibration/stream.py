"""Reading only some steps of a trace, as a stream (``calibrate --steps A:B``).

:func:`load_steps` reads a trace file block by block (decompressing gzip as it goes) and
never holds more than a block of it and the events it keeps, so a trace far larger than
memory calibrates from the steps asked for. Two passes over the file:

1. the ``ProfilerStep#N`` markers (CPU side, complete events): their numbers and spans;
2. the events kept: every metadata (``M``) event, every event without a plain numeric ``ts``
   (the reader then judges it), and every event whose span ``[ts, ts + dur]`` overlaps the
   open window from the start of the marker before step ``A`` to the end of the marker of step
   ``B`` (the step after the last one asked for). The neighbours are kept as context (the
   device backlog at step ``A``'s start, step ``B − 1``'s end at step ``B``'s start); the
   fit uses only steps ``A`` to ``B − 1`` (:attr:`calibration.events.EventTable.step_range`).
   When ``A`` is the trace's first step the window is open to the left, when ``B − 1`` is its
   last step, to the right (its GPU work runs on after its marker).

The kept events, with the file's other top-level keys, are the trace that is read
(:func:`calibration.trace_io.load_bytes`): the same reader, so the same table as a file
holding only those events. Which events are kept depends on each event alone, so the result
does not depend on the block size (``tests/test_stream_steps.py``).

Events are split at the ``}`` ``,`` between two events of ``traceEvents``; a split is taken
only where the text before it parses as complete events (a ``},`` inside a string or a
nested object does not), so any valid JSON is split right. A file that is not plainly a
trace (no ``traceEvents`` array, invalid JSON) is refused in one line; the size limit of a
whole read (:data:`calibration.trace_io.MAX_JSON_BYTES`) does not apply.

Bounded on bad input: a prefix of valid JSON never fails to parse before its end, so a split
whose text fails earlier is the file's error, refused at once with its byte (before, each
block tried every candidate, each a parse of the block: minutes); a split is looked for among
a block's last :data:`_TRIES` candidates; at most :data:`MAX_PREFIX_BYTES` are read looking
for the array, and at most :data:`MAX_EVENT_BYTES` may pass without a split. Damage that
still parses as JSON (invalid UTF-8 in a string) is seen only in the events kept. The array
is the top-level object's (a nested ``traceEvents`` key is not it; two top-level ones are
refused, as the whole read refuses them), and ``event N`` in what the reader says is the
event's place in the file (:func:`steps_table`).
"""
from __future__ import annotations

import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from stepsim.calibration.event_rows import category
from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.steps import PROFILER_STEP_RE
from stepsim.calibration.trace_io import GZIP_MAGIC, TWO_ARRAYS, RawTrace, load_bytes
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import gunzip_chunks, missing, open_input

__all__ = ["load_steps", "steps_table", "BLOCK_BYTES"]

BLOCK_BYTES = 32 * 1024**2
"""Bytes of (decompressed) JSON read at a time."""
MAX_PREFIX_BYTES = 256 * 1024**2
"""Most bytes (decompressed) read looking for the ``traceEvents`` array before the file is
refused: a profiler trace's other keys come to kilobytes."""
MAX_EVENT_BYTES = 4 * BLOCK_BYTES
"""Most bytes (decompressed) of text that may pass without a split between two events."""
_TRIES = 16
"""Candidate splits tried per block, newest first: in a trace the last ``},`` of a block is
almost always between events, and each try parses the block."""
_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_SPLIT = re.compile(rb"\}\s*,")
_END = re.compile(rb"\}\s*\]")
_CPU_SIDE = ("cpu_op", "user_annotation")


class _Name(msgspec.Struct):
    name: Any = None


class _Brief(msgspec.Struct):
    name: Any = None
    cat: Any = None
    ph: Any = None
    ts: Any = None
    dur: Any = None


class _Span(msgspec.Struct):
    ph: Any = None
    ts: Any = None
    dur: Any = None


_NAMES = msgspec.json.Decoder(list[_Name])
_BRIEF = msgspec.json.Decoder(_Brief, float_hook=float)   # 1e400: inf, not an error
_SPANS = msgspec.json.Decoder(list[_Span], float_hook=float)
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _blocks(p: Path, block: int, notes: list[str]) -> Iterator[bytes]:
    """The (decompressed) bytes of ``p``, ``block`` at a time (``notes``: what was left out,
    as :func:`simcore.files.gunzip_chunks` says)."""
    try:
        if stat.S_ISCHR(mode := p.stat().st_mode) or stat.S_ISBLK(mode):   # as load_trace
            raise InputError(p, "is a device, expected a trace file (.json or .json.gz)")
        with open_input(p) as f:
            gz = f.peek(2)[:2] == GZIP_MAGIC
            yield from (gunzip_chunks(p, f, block, notes) if gz else
                        iter(lambda: f.read(block), b""))
    except FileNotFoundError:
        raise missing(p) from None
    except IsADirectoryError:
        raise InputError(p, "is a directory, expected a trace file (.json or .json.gz)") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None


def _events(p: Path, block: int, head: list, notes: list[str] | None = None
            ) -> Iterator[bytes]:
    """The text of ``traceEvents`` of ``p``, cut between events: each item is ``[`` + some
    events + ``]`` (valid JSON). ``head`` receives the document's text before and after the
    array (None for a bare array). At most :data:`MAX_PREFIX_BYTES` are read looking for the
    array; text that is not valid JSON is refused at the first block holding it."""
    it = _blocks(p, block, [] if notes is None else notes)
    buf = b""
    for chunk in it:
        seen = len(buf)
        buf += chunk
        s = buf.lstrip()
        if s[:1] == b"[":
            head[:] = [None, None]
            at = len(buf) - len(s) + 1
            buf = s[1:]
            break
        m = _START.search(buf, max(0, seen - 4096))
        while m and not _top_level(p, buf, m.start()):   # a key of a nested object, say
            m = _START.search(buf, m.end())
        if m:
            head[:] = [buf[:m.start()], None]
            at = m.end()
            buf = buf[at:]
            break
        if s[:1] != b"{" and s:
            raise InputError(p, "no 'traceEvents' array found; not a profiler trace")
        if len(buf) > MAX_PREFIX_BYTES:
            raise InputError(p, f"no 'traceEvents' array in the first {_mb(MAX_PREFIX_BYTES)} "
                                "(the most read looking for it); not a profiler trace")
    else:
        raise InputError(p, "file is empty" if not buf else "file holds only whitespace"
                         if not buf.strip() else
                         "no 'traceEvents' array found; not a profiler trace")
    for chunk in it:
        buf += chunk
        while len(buf) >= block:
            cut = _split(p, buf, at)
            if cut is None:
                if len(buf) > MAX_EVENT_BYTES:
                    raise InputError(p, f"an event of traceEvents runs over "
                                        f"{_mb(MAX_EVENT_BYTES)} without ending (not valid "
                                        "JSON?)", _where(at))
                break
            yield b"[" + buf[:cut] + b"]"
            rest = buf[cut:].lstrip()[1:]   # the comma
            at += len(buf) - len(rest)
            buf = rest
    s = buf.lstrip()
    if s[:1] == b"]":                      # an empty array, or a split just before its end
        head[1] = s[1:]
    else:
        end = _close(p, buf, at)
        yield b"[" + buf[:end] + b"]"
        head[1] = buf[end:].lstrip()[1:]
    if head[0] is not None and _another_array(head[1]):
        raise InputError(p, TWO_ARRAYS)


def _top_level(p: Path, buf: bytes, at: int) -> bool:
    """Whether a key starting at byte ``at`` of ``buf`` (the document's start) is one of the
    top-level object's: the text before it then opens that object and holds whole values.
    InputError when that text is not valid JSON (an error before byte ``at``)."""
    try:
        return isinstance(_TOP.decode(buf[:at] + b'"traceEvents": 0}'), dict)
    except msgspec.ValidationError:
        return False
    except msgspec.DecodeError as e:
        m = _BYTE.search(str(e))
        if m and int(m.group(1)) < at:
            why = str(e).split(": ", 1)[-1].split(" (byte")[0]
            raise InputError(p, f"not valid JSON before traceEvents: {why}",
                             _where(int(m.group(1)))) from None
        return False


def _another_array(after: bytes) -> bool:
    """Whether the document's text after the ``traceEvents`` array holds another top-level
    ``traceEvents`` key."""
    if b'"traceEvents"' not in after:
        return False
    rest = after.lstrip()
    try:
        return "traceEvents" in _TOP.decode(b"{" + (rest[1:] if rest[:1] == b"," else rest))
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False   # invalid JSON: the reader of the kept events says so


def _where(at: int) -> str:
    """Byte ``at`` of the file's (decompressed) JSON, as the error's place."""
    return f"byte {at:,} of the decompressed JSON"


def _mb(n: int) -> str:
    return f"{n // 1024**2:,} MB"


_BYTE = re.compile(r"\(byte (\d+)\)")
_AFTER_ARRAY = re.compile(rb'\s*(,\s*)?["}]')   # what follows traceEvents' closing ]


def _parses(p: Path, buf: bytes, cut: int, at: int) -> bool:
    """Whether ``buf[:cut]`` is a list of complete events. False when the text is fine as far
    as it goes (the cut is inside a string or a nested object); InputError when the text before
    the cut is not valid JSON: a prefix of valid JSON never fails before its end, so an error
    before the closing ``]`` (byte ``cut + 1`` of the wrapped text) is the file's."""
    try:
        _RAWS.decode(b"[" + buf[:cut] + b"]")
        return True
    except msgspec.DecodeError as e:
        m = _BYTE.search(str(e))
        if not m or int(m.group(1)) >= cut + 1:
            return False
        i = int(m.group(1)) - 1   # in buf
        why = str(e).split(": ", 1)[-1].split(" (byte")[0]
        if why == "trailing characters":   # placed one byte past the first of them
            i -= 1
            if _AFTER_ARRAY.match(buf, i):
                return False   # the cut is past the array's end, in the document's other keys
        raise InputError(p, f"traceEvents is not valid JSON: {why}", _where(at + i)) from None


def _split(p: Path, buf: bytes, at: int) -> int | None:
    """The end of the last complete event in ``buf`` followed by a comma (after its ``}``),
    None when none of the last :data:`_TRIES` candidates is one (more text may bring one)."""
    lo = max(0, len(buf) - 4 * 1024**2)
    for m in list(_SPLIT.finditer(buf, lo))[::-1][:_TRIES]:
        if _parses(p, buf, m.start() + 1, at):
            return m.start() + 1
    return None


def _close(p: Path, buf: bytes, at: int) -> int:
    """Where the events in ``buf`` end (after the last one's ``}``), the array closing after."""
    for m in list(_END.finditer(buf))[::-1][:_TRIES]:
        if _parses(p, buf, m.start() + 1, at):
            return m.start() + 1
    raise InputError(p, "traceEvents is not a complete JSON array (file cut short, or not "
                        "valid JSON)")


def _us(vals: list) -> tuple[np.ndarray, np.ndarray]:
    """(µs as floats, known) of JSON values: a number is known, anything else is not. Floats
    are enough here: which events are kept only has to be decided the same way for an event
    wherever the blocks split the file (the table is read from the kept events' own text)."""
    out = np.fromiter((v if type(v) in (int, float) else np.nan for v in vals), float,
                      len(vals))
    return out, np.isfinite(out)


def _decoded(p: Path, dec, text: bytes) -> list:
    try:
        return dec.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InputError(p, f"traceEvents is not valid JSON: {e}") from None


def _markers(p: Path, block: int) -> list[tuple[int, float, float]]:
    """(N, start µs, end µs) of every CPU-side complete ``ProfilerStep#N`` event, in time
    order."""
    out = []
    for text in _events(p, block, []):
        if b"ProfilerStep#" not in text:
            continue
        hits = [i for i, e in enumerate(_decoded(p, _NAMES, text))
                if type(e.name) is str and PROFILER_STEP_RE.match(e.name)]
        raws = _RAWS.decode(text) if hits else []
        for i in hits:
            e = _BRIEF.decode(raws[i])
            if e.ph != "X" or category(e.cat if type(e.cat) is str else None, "X") not in _CPU_SIDE:
                continue
            (ts, dur), ok = _us([e.ts, 0 if e.dur is None else e.dur])
            if ok[0]:
                out.append((int(PROFILER_STEP_RE.match(e.name).group(1)), float(ts),
                            float(ts + (dur if ok[1] and dur > 0 else 0))))
    return sorted(out, key=lambda m: (m[1], m[0]))


def _window(p: Path, marks: list[tuple[int, float, float]], a: int | None,
            b: int | None) -> tuple[float, float]:
    """The span (µs) whose events are kept for steps ``a ≤ N < b`` (see the module
    docstring); InputError naming the trace's steps when the range is not in it."""
    if not marks:
        raise InputError(p, "--steps needs ProfilerStep#N markers, and the trace has none "
                            "(calibrate it without --steps)")
    nums = [m[0] for m in marks]
    lo_n, hi_n = min(nums), max(nums)
    asked = f"{'' if a is None else a}:{'' if b is None else b}"
    if (a is not None and not lo_n <= a <= hi_n) or (b is not None and not lo_n < b <= hi_n + 1):
        raise InputError(p, f"--steps {asked} is outside the trace's steps, {lo_n} to {hi_n} "
                            f"(A:B keeps A to B-1)")
    sel = [i for i, m in enumerate(marks) if (a is None or m[0] >= a) and (b is None or m[0] < b)]
    if not sel:
        raise InputError(p, f"--steps {asked} holds none of the trace's steps ({lo_n} to {hi_n})")
    lo = marks[sel[0] - 1][1] if sel[0] > 0 else -np.inf
    hi = marks[sel[-1] + 1][2] if sel[-1] + 1 < len(marks) else np.inf
    return lo, hi


def load_steps(path: str | Path, a: int | None, b: int | None,
               block: int = BLOCK_BYTES) -> RawTrace:
    """The trace ``path`` reduced to the events of steps ``a ≤ N < b`` and their neighbours
    (see the module docstring), read as a stream, ``block`` bytes at a time. Its warnings'
    ``event N`` are places in the file.

    Raises:
        InputError: unreadable file, no ``traceEvents`` array, invalid JSON, no
            ``ProfilerStep#N`` marker, or a range outside the trace's step numbers.
    """
    rt, index = _load(Path(path), a, b, block)
    rt.warnings = [_in_file(w, index) for w in rt.warnings]
    return rt


def steps_table(path: str | Path, a: int | None, b: int | None,
                block: int = BLOCK_BYTES) -> EventTable:
    """:func:`calibration.events.build_table` of :func:`load_steps`, its warnings' and
    errors' ``event N`` places in the file (not among the kept events)."""
    p = Path(path)
    rt, index = _load(p, a, b, block)
    try:
        table = build_table(rt)
    except InputError as e:
        raise InputError(p, _in_file(e.problem, index),
                         e.where and _in_file(e.where, index)) from None
    table.warnings = [_in_file(w, index) for w in table.warnings]
    return table


def _load(p: Path, a: int | None, b: int | None, block: int) -> tuple[RawTrace, list[int]]:
    """:func:`load_steps` with its warnings' places among the kept events, and each kept
    event's place in the file's ``traceEvents``."""
    lo, hi = _window(p, _markers(p, block), a, b)
    kept: list[bytes] = []
    index: list[int] = []
    head: list = []
    notes: list[str] = []
    seen = 0
    for text in _events(p, block, head, notes):
        evs = _decoded(p, _SPANS, text)
        ts, known = _us([e.ts for e in evs])
        dur, dk = _us([e.dur for e in evs])
        dur = np.where(dk & (dur > 0), dur, 0)
        meta = np.fromiter((e.ph == "M" for e in evs), bool, len(evs))
        keep = meta | ~known | ((ts < hi) & (ts + dur > lo))
        if keep.any():
            raws = _RAWS.decode(text)
            rows = np.nonzero(keep)[0].tolist()
            kept += [bytes(raws[i]) for i in rows]
            index += [seen + i for i in rows]
        seen += len(evs)
    before, after = head
    body = b"[" + b",".join(kept) + b"]"
    raw = body if before is None else before + b'"traceEvents": ' + body + after
    try:
        rt = load_bytes(p, raw, p.stat().st_size)
    except InputError as e:   # a line or byte of the kept text is no place in the file
        if e.where is None:
            raise
        where = _in_file(e.where, index) if e.where.startswith("event ") else \
            "an event of the steps kept by --steps"
        raise InputError(p, _in_file(e.problem, index), where) from None
    rt.warnings += [f"{p.name}: {n}" for n in notes]
    return rt, index


_EVENT = re.compile(r"\bevent (\d+)\b")


def _in_file(text: str, index: list[int]) -> str:
    """``text`` with each ``event N`` (N: a place among the kept events) as the event's
    place in the file."""
    return _EVENT.sub(lambda m: f"event {index[int(m.group(1))]}"
                      if int(m.group(1)) < len(index) else m.group(0), text)
