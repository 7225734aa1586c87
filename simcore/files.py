"""Reading a user's input file: one place that turns every way a file can be unusable into an
:class:`~simcore.errors.InputError` naming it. Inputs are only read, never changed."""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from simcore.errors import InputError


def open_input(path: str | Path) -> BinaryIO:
    """Open ``path`` for buffered binary reading without ever blocking in ``open``: a named
    pipe is opened non-blocking and then switched back, so one that no process writes reads
    as empty (POSIX: a read on a FIFO without writers returns end of file) instead of hanging.

    Raises:
        OSError: as ``open`` does.
    """
    p = Path(path)
    if not stat.S_ISFIFO(p.stat().st_mode):
        return open(p, "rb")
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_input(path: str | Path, kind: str) -> bytes:
    """The bytes of the file at ``path``, which should hold a ``kind`` (``"sidecar"``,
    ``"StepModel"``, ``"scenario"`` …, used in messages).

    Raises:
        InputError: the file is missing, a directory, unreadable, or empty (whitespace only).
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(p, f"is a directory, expected a {kind} file")
    try:
        with open_input(p) as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputError(p, f"no such {kind} file") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror}") from None
    if not raw.strip():
        raise InputError(p, f"the {kind} file is empty")
    return raw
