"""Atomic file output: write to a temporary file beside the target (same folder, so the rename
cannot cross file systems), flush it to disk (``fsync``), then rename it over the target
(``os.replace``), so a reader never sees a half-written file and a failure leaves the old file
intact. The temporary file is removed whatever stops the write: an exception, Ctrl-C, or a
SIGTERM that arrives while it exists (which then exits with status 143 after removing it)."""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stepsim.simcore.errors import InputError, shown

__all__ = ["write_atomic", "atomic_path", "make_folder", "updating"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_folder(folder: Path, output: Path | None = None) -> None:
    """Create ``folder`` and its parents (``output``: the file to be written there, named in
    the error instead of the folder).

    Raises:
        InputError: a part of the path exists and is not a folder (``-o notes.txt/m.json``
            where ``notes.txt`` is a file; before, ``File exists``), or its folder makes no
            new folder (``/proc``).
        OSError: the folder cannot be created (read-only), with ``filename`` the output.
    """
    folder = Path(folder)
    for part in (folder, *folder.parents):
        if part.is_dir():
            break
        # not a folder, checked again: another process (the other DDP rank) may have made it
        # since the check above
        if (part.exists() or part.is_symlink()) and not part.is_dir():
            if part.is_symlink() and not part.exists():   # dangling, or a loop
                raise InputError(output or folder, f"cannot be {'written' if output else 'made'}"
                                 f": {shown(part)} is a symbolic link to nothing (its target "
                                 "is missing, or the links form a loop)")
            if output is None and part == folder:
                raise InputError(folder, "is a file, expected a folder")
            raise InputError(output or folder, f"cannot be {'written' if output else 'made'}: "
                                               f"{shown(part)} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        there = next((q for q in folder.parents if q.is_dir()), None)
        if e.errno == errno.ENOENT and there is not None:
            raise _takes_nothing(output or folder, there) from None
        raise OSError(e.errno, e.strerror, str(output or folder)) from None


def _takes_nothing(path: Path, folder: Path) -> InputError:
    """The error for ``path``, whose ``folder`` exists but makes no new file or folder: the
    kernel's "No such file or directory" (``-o /proc/version``) named a file that is there,
    or none the user gave (the temporary file of the atomic write)."""
    return InputError(path, f"cannot be written: {shown(folder)} takes no new file or folder "
                            "(a kernel's pseudo file system such as /proc, not a disk)")


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises SystemExit (so ``finally`` removes the temporary
    file) where it would have killed the process outright; a handler someone else installed
    (or SIG_IGN) is kept."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; a file system that cannot fsync a folder is left as it is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _follow_links(path: Path) -> Path:
    """The file a symbolic link at ``path`` names (followed link by link, relative targets
    from the link's folder), so the rename replaces the real file and keeps the link; ``path``
    itself where it is not a link. Before, ``-o link`` replaced the link with a file.

    Raises:
        InputError: the links form a loop (or a chain longer than 40, as the kernel's limit).
    """
    real, hops = path, 0
    while real.is_symlink():
        hops += 1
        if hops > 40:
            raise InputError(path, "is a symbolic link loop; cannot write through it")
        target = Path(os.readlink(real))
        real = target if target.is_absolute() else real.parent / target
    return real


def _link_target(path: Path) -> Path:
    """:func:`_follow_links`, refusing a dangling link whose target's folder is missing: the
    file is written where the link points, as ``open()`` would, but no folder is made there
    (``-o link``, a link to ``/nonexistent/dir``, made ``/nonexistent`` at the root).

    Raises:
        InputError: a loop, or such a dangling link."""
    real = _follow_links(path)
    if real != path and not real.parent.is_dir():
        raise InputError(path, f"is a symbolic link to {shown(real)}, whose folder does not "
                               "exist (no folder is made through a link)")
    return real


def _refuse_folder(path: Path, text: str) -> None:
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise InputError(path, "is a directory, expected an output file name")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file's path beside ``path`` for the block to write (a tool that takes a
    file name, such as the profiler's ``export_chrome_trace``); when the block ends normally
    it is flushed to disk and renamed over ``path``, else removed.

    Raises:
        InputError: ``path`` is a directory or a special file, or a part of its folder is a
            file.
        OSError: as :func:`write_atomic`.
    """
    text, path = str(path), Path(path)
    _refuse_folder(path, text)
    path = _link_target(path)
    if path.exists() and not path.is_file():
        raise InputError(path, "is not a regular file; refusing to replace it")
    make_folder(path.parent, path)
    with _sigterm_exits():
        try:
            # the name's first 100 bytes: a 250-byte name is valid, and the temporary
            # file's must be too (a file name holds at most 255 bytes)
            short = path.name.encode("utf-8", "surrogateescape")[:100].decode("utf-8", "ignore")
            fd, tmp = tempfile.mkstemp(prefix=f".{short}.", suffix=".tmp", dir=path.parent)
        except OSError as e:   # a read-only folder: name the output, not the temporary file
            if e.errno == errno.ENOENT and path.parent.is_dir():
                raise _takes_nothing(path, path.parent) from None
            raise OSError(e.errno, e.strerror, str(path)) from None
        os.close(fd)
        done = False
        try:
            yield Path(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
            os.replace(tmp, path)
            done = True
        except OSError as e:   # a full disk: the write names no file
            raise OSError(e.errno, e.strerror, str(path)) from None
        finally:
            if not done:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        _fsync_folder(path.parent)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` (bytes) to ``path`` atomically, creating parent folders. A path that
    names a character device or a named pipe (``/dev/null``, ``/dev/stdout``) is written
    through instead: replacing it with a file would destroy it.

    Raises:
        InputError: ``path`` is a directory, ends with a path separator, is another kind of
            special file, or a part of its folder is a file.
        OSError: if the folder cannot be created or written (a read-only folder, a full
            disk), with ``filename`` the output ``path``, never the temporary file.
    """
    text = str(path)
    path = Path(path)
    _refuse_folder(path, text)
    path = _link_target(path)
    if path.exists() and not path.is_file():
        mode = path.stat().st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise InputError(path, "is not a regular file; refusing to replace it")
        try:   # a named pipe without a reader would block the open forever
            fd = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(mode) else 0))
        except OSError as e:
            raise InputError(path, f"cannot write: {e.strerror or e}"
                             + (" (no process reads this named pipe)" if stat.S_ISFIFO(mode)
                                else "")) from None
        os.set_blocking(fd, True)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as e:   # /dev/full
            raise OSError(e.errno, e.strerror, str(path)) from None
        return
    with atomic_path(path) as tmp:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as f:
            f.write(data)


@contextmanager
def updating(path: str | Path) -> Iterator[None]:
    """Hold the lock of ``path``'s folder (``flock`` on the folder of the file a link names)
    while a read, rewrite and rename of ``path`` runs: two processes rewriting one file at
    once otherwise each rename their copy over the other's, and one's change is lost (4
    processes appending 25 ledger records each left 29 of the 100, 2026-12-06). A folder
    that is not there yet is made first (as the write would make it), so the first writers
    lock it too: unlocked, 4 processes appending 10 records each to a ledger in a new folder
    kept 38-39 of the 40. A folder that takes no lock runs unlocked.

    Raises:
        InputError, OSError: the folder cannot be made (:func:`make_folder`)."""
    target = _link_target(Path(path))
    folder = target.parent
    make_folder(folder, target)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)     # the lock goes with it
