"""Atomic file output: write to a temporary file beside the target, then rename over it, so a
reader never sees a half-written file and a failure leaves the old file intact."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from stepsim.simcore.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` (bytes) to ``path`` atomically, creating parent folders. A path that
    names a character device or a named pipe (``/dev/null``, ``/dev/stdout``) is written
    through instead: replacing it with a file would destroy it.

    Raises:
        InputError: ``path`` is a directory, ends with a path separator, or is another kind
            of special file.
        OSError: if the folder cannot be created or written (a read-only folder, a full
            disk), with ``filename`` the output ``path``, never the temporary file.
    """
    text = str(path)
    path = Path(path)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise InputError(path, "is a directory, expected an output file name")
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:   # a read-only folder: name the output, not the temporary file
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give what open() would
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):   # a full disk: the write names no file
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise
