"""Reading a user's input file: one place that turns every way a file can be unusable into an
:class:`~simcore.errors.InputError` naming it. Inputs are only read, never changed."""
from __future__ import annotations

from pathlib import Path

from simcore.errors import InputError


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
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InputError(p, f"no such {kind} file") from None
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror}") from None
    if not raw.strip():
        raise InputError(p, f"the {kind} file is empty")
    return raw
