"""Reading a user's input file: one place that turns every way a file can be unusable into an
:class:`~simcore.errors.InputError` naming it. Inputs are only read, never changed."""
from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stepsim.simcore.errors import InputError, shown


FIFO_WRITER_WAIT_S = 5.0
"""How long (s) reading a named pipe waits for a process to open it for writing."""


class _Pipe(io.RawIOBase):
    """A pipe's file descriptor, with the bytes already read from it put back in front."""

    def __init__(self, fd: int, head: bytes):
        self.fd, self.head = fd, head

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.head:
            n = min(len(b), len(self.head))
            b[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = os.read(self.fd, len(b))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
        super().close()


def open_input(path: str | Path) -> BinaryIO:
    """Open ``path`` for buffered binary reading without ever blocking forever in ``open``.

    A named pipe is opened non-blocking: a read then tells a pipe with a writer (data, or
    "would block") from one without (end of file). Without a writer it is retried for
    ``FIFO_WRITER_WAIT_S``, then read as empty, instead of hanging; with one, it is read
    blocking as usual.

    Raises:
        OSError: as ``open`` does.
    """
    p = Path(path)
    if not stat.S_ISFIFO(p.stat().st_mode):
        return open(p, "rb")
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    deadline = time.monotonic() + FIFO_WRITER_WAIT_S
    head = b""
    while True:
        try:
            head = os.read(fd, 1 << 16)
        except BlockingIOError:   # a writer, no data yet
            break
        if head or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    os.set_blocking(fd, True)
    while len(head) < 2:   # callers peek at two bytes (gzip's magic number)
        more = os.read(fd, 1 << 16)
        if not more:
            break
        head += more
    return io.BufferedReader(_Pipe(fd, head))


def missing(path: str | Path, what: str = "file") -> InputError:
    """The error for an input ``path`` that cannot be found: ``no such {what}``, or what stands
    in its place (a symbolic link loop, a broken symbolic link and where it points)."""
    p = Path(path)
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return InputError(p, "a loop of symbolic links (too many levels of symbolic links)")
    if p.is_symlink():
        return InputError(p, f"broken symbolic link (to {shown(os.readlink(p))})")
    return InputError(p, f"no such {what}")


MAX_INPUT_BYTES = 256 * 1024**2
"""Largest model, scenario, sidecar or ledger file that is read (bytes). The largest model
calibrated from the shared sample traces is a few MB; validating one takes several times its
size in memory, so a file beyond this is refused before it is read."""


def read_input(path: str | Path, kind: str, empty_ok: bool = False) -> bytes:
    """The bytes of the file at ``path``, which should hold a ``kind`` (``"sidecar"``,
    ``"StepModel"``, ``"scenario"`` …, used in messages). Never reads more than
    :data:`MAX_INPUT_BYTES`, and never from a device (``/dev/zero`` would never end).

    Raises:
        InputError: the file is missing, a directory, a device, unreadable, larger than
            :data:`MAX_INPUT_BYTES`, or (unless ``empty_ok``) empty (whitespace only).
    """
    p = Path(path)
    try:
        st = p.stat()
        if stat.S_ISDIR(st.st_mode):
            raise InputError(p, f"is a directory, expected a {kind} file")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            raise InputError(p, f"is a device, expected a {kind} file")
        if stat.S_ISREG(st.st_mode) and st.st_size > MAX_INPUT_BYTES:
            raise _too_big(p, kind)
        with open_input(p) as f:
            raw = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise _unreadable(p, kind, e) from None
    if len(raw) > MAX_INPUT_BYTES:   # a pipe, or a file that grew
        raise _too_big(p, kind)
    if not empty_ok and not raw.strip():
        raise InputError(p, f"the {kind} file is empty")
    return raw


def _unreadable(p: Path, kind: str, e: OSError) -> InputError:
    """The one-line error for an input that could not be opened or read."""
    if isinstance(e, FileNotFoundError):
        return missing(p, f"{kind} file")
    if e.errno == errno.ELOOP:
        return missing(p)
    return InputError(p, f"cannot read: {e.strerror or e}")


def _too_big(p: Path, kind: str) -> InputError:
    return InputError(p, f"larger than {MAX_INPUT_BYTES // 1024**2} MiB, the limit on a {kind} "
                         "file (simcore.files.MAX_INPUT_BYTES)")


def gunzip_chunks(p: Path, f: BinaryIO, size: int, notes: list[str]) -> Iterator[bytes]:
    """The decompressed bytes of the gzip stream ``f`` (the file ``p``), ``size`` at a time.
    Bytes after its last complete member that are not another member (a download's trailing
    junk) end it: what came before is whole, so it is kept, and ``notes`` receives a line
    saying so.

    Raises:
        InputError: a truncated or corrupt member, naming ``p``.
    """
    try:
        yield from _gunzip(f, size, notes)
    except EOFError:
        raise InputError(p, "gzip stream is truncated (file cut short?)") from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise InputError(p, f"corrupt gzip data: {e}") from None


def _gunzip(f: BinaryIO, size: int, notes: list[str]) -> Iterator[bytes]:
    g = gzip.GzipFile(fileobj=f)
    buf, got = bytearray(), False
    while True:
        try:   # read1: a read that fails at the junk loses none of what came before
            piece = g.read1(size - len(buf))
        except gzip.BadGzipFile as e:
            if not (got or buf) or "Not a gzipped file" not in str(e):
                raise
            notes.append("ignored the bytes after the gzip data (not gzip: trailing junk)")
            piece = b""
        if piece:
            buf += piece
            if len(buf) < size:
                continue
        if buf:
            got = True
            yield bytes(buf)
            buf = bytearray()
        if not piece:
            return


def _tail_start(raw: bytes, n: int, lo: int = 0) -> tuple[int, bool]:
    """The offset in ``raw`` of the first of the last ``n`` non-blank lines of ``raw[lo:]``
    (``lo`` if there are not more), and whether there are more than ``n`` of them."""
    end, count = len(raw), 0
    while end > lo:
        start = max(lo, raw.rfind(b"\n", lo, end - 1) + 1 if raw[end - 1:end] == b"\n" else
                    raw.rfind(b"\n", lo, end) + 1)
        if raw[start:end].strip():
            count += 1
            if count > n:
                return end, True
        end = start
    return lo, False


def latest_lines(raw: bytes, n: int) -> tuple[int, list[bytes]]:
    """The number (1-based) of the first of the last ``n`` non-blank lines of ``raw``, and
    those lines from it on (blank ones among them kept)."""
    end, _ = _tail_start(raw, n)
    return raw.count(b"\n", 0, end) + 1, raw[end:].splitlines()


LINE_COUNT_BYTES = 4 * MAX_INPUT_BYTES
"""Most bytes before a long file's latest lines that are read to count them, so that its lines
keep their numbers (1 GiB, about a second); past it, lines are numbered from the end."""


@dataclass
class Tail:
    """The latest lines of a file (:func:`read_latest_lines`)."""
    lines: list[bytes]
    first: int | None
    """The line number (1-based) of ``lines[0]``; None: not counted (numbered from the end)."""
    before: int
    """Bytes before ``lines[0]``, not read as lines (0: the whole file)."""
    by_count: bool
    """Whether the file holds more non-blank lines than were asked for (else ``before`` is
    there because the file is larger than :data:`MAX_INPUT_BYTES`)."""
    whole: bytes | None
    """The whole file, when it was read whole."""


def read_latest_lines(path: str | Path, kind: str, n: int) -> Tail:
    """The last ``n`` non-blank lines of the file at ``path`` (blank ones among them kept),
    reading at most :data:`MAX_INPUT_BYTES` of them: a regular file larger than that is read
    from its end (a multi-GB ledger takes bounded memory), its earlier bytes left unread.

    Raises:
        InputError: as :func:`read_input` (a pipe or device, a directory, unreadable).
    """
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size <= MAX_INPUT_BYTES:
            raw = read_input(p, kind, empty_ok=True)
            end, more = _tail_start(raw, n)
            return Tail(raw[end:].splitlines(), raw.count(b"\n", 0, end) + 1, end, more, raw)
        with open(p, "rb") as f:
            return _read_tail(f, n)
    except OSError as e:
        raise _unreadable(p, kind, e) from None


def _read_tail(f: BinaryIO, n: int) -> Tail:
    size = os.fstat(f.fileno()).st_size
    want = min(size, 1 << 20, MAX_INPUT_BYTES)
    while True:   # read the last `want` bytes, twice as many each time, up to the limit
        f.seek(size - want)
        buf = b""   # (the last read's bytes go first: they are read again)
        buf = f.read(want)
        lo = 0 if want >= size else (buf.find(b"\n") + 1 or len(buf))  # a line cut: not one
        end, more = _tail_start(buf, n, lo)
        if more or want >= min(size, MAX_INPUT_BYTES):
            break
        want = min(2 * want, size, MAX_INPUT_BYTES)
    before = size - len(buf) + end
    first = None
    if before <= LINE_COUNT_BYTES:
        f.seek(0)
        first, left = 1, before
        while left:
            piece = f.read(min(left, 16 << 20))
            if not piece:
                break
            first += piece.count(b"\n")
            left -= len(piece)
    return Tail(buf[end:].splitlines(), first, before, more, None)
