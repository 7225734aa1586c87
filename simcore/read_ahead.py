"""A gzip trace's bytes decompressed in a thread while the process imports the modules that read
them (:func:`start`, then :func:`take`).

``stepsim calibrate FILE.json.gz`` imports its modules for about 0.06 s after its arguments
are read (pydantic's parameter types, the calibration and fitting packages) and only then
decompressed the trace (0.07 s for the 54 MB one), on one core while the other idled. zlib
decompresses without the interpreter lock, so a thread started before those imports
decompresses beside them. Measured on the 54 MB trace (2026-12-07 17:46-17:48, alone, 16
interleaved pairs in two runs): 14 of 16 ended sooner, by 0.03 s at the median (0.12 s at
most); not the whole 0.07 s, since the imports beside the thread took 97-123 ms instead of
63-65 ms (the thread takes the interpreter lock back at each block of zlib's output, and
copies the whole into one ``bytes`` at the end). It reads what the verb's own reader would
(:func:`calibration.trace_io.load_trace`) only where that is plain: one complete gzip
member, no more than :data:`MAX_AHEAD_BYTES` decompressed, the same file (device, inode,
size and modification time) when it is taken. Anything else (a pipe, a plain JSON file,
trailing bytes, a truncated or corrupt stream, a file changed meanwhile) gives None, and the
reader reads the file itself, with its checks and its messages. Nothing is written; the file
is only read.
"""
from __future__ import annotations

import os
import stat
import threading
import zlib
from pathlib import Path

__all__ = ["start", "take", "forget", "MAX_AHEAD_BYTES"]

MAX_AHEAD_BYTES = 512 * 1024**2
"""Most decompressed bytes read ahead (a larger trace is left to the verb's own reader, whose
pieces and limits hold its memory; ahead of the imports it would only hold it longer)."""

_AHEAD: dict[str, "_Ahead"] = {}
"""The reads started, by the path as :class:`~pathlib.Path` spells it (one process, one
verb)."""


class _Ahead:
    """One file's read in its thread: ``key`` its identity as opened, ``data`` the
    decompressed bytes, or None where the read was not plain."""

    def __init__(self, path: str):
        self.path, self.key, self.data = path, None, None
        self.thread = threading.Thread(target=self._read, name="stepsim-read-ahead", daemon=True)

    def _read(self) -> None:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or f.read(2) != b"\x1f\x8b":
                    return
                f.seek(-4, os.SEEK_END)   # a member's last 4 bytes: its size, mod 2^32
                if int.from_bytes(f.read(4), "little") > MAX_AHEAD_BYTES:
                    return   # (not decompressed only to be dropped)
                f.seek(0)
                packed = f.read()
            d = zlib.decompressobj(31)   # one gzip member: its header and its CRC checked
            data = d.decompress(packed, MAX_AHEAD_BYTES + 1)
            if not d.eof or d.unused_data or d.unconsumed_tail or len(data) > MAX_AHEAD_BYTES:
                return
            self.key, self.data = _identity(st), data
        except Exception:   # (whatever it is, the reader reads the file itself and says it)
            return


def _identity(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def start(path: str | os.PathLike) -> None:
    """Begin reading ``path`` in a thread (a regular gzip file; anything else is left to the
    reader)."""
    key = os.fspath(Path(path))
    if key in _AHEAD:
        return
    try:
        if not stat.S_ISREG(os.stat(key).st_mode):
            return
    except (OSError, ValueError):
        return
    ahead = _AHEAD[key] = _Ahead(key)
    ahead.thread.start()


def take(path: Path, st: os.stat_result) -> bytes | None:
    """The decompressed bytes of ``path`` read ahead (once: the read is then forgotten) where a
    read was started, was plain and is of the file ``st`` describes; else None."""
    ahead = _AHEAD.pop(os.fspath(Path(path)), None)
    if ahead is None:
        return None
    ahead.thread.join()
    if ahead.data is None or ahead.key != _identity(st):
        return None
    return ahead.data


def forget() -> None:
    """Drop every read not taken (a verb that ended before it read its trace: a process that
    runs verbs one after another must not keep their bytes)."""
    _AHEAD.clear()
