"""Error types. Every error a user can cause is a :class:`StepsimError`; the CLI turns it into
one line and exit code 2. Anything else is a bug and keeps its traceback."""
from __future__ import annotations

from pathlib import Path


def shown(path: str | Path) -> str:
    """``path`` as text that prints on one line: bytes that are not UTF-8 as ``\\xNN``,
    control characters (a newline in a file name) escaped."""
    text = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    if text.isprintable():   # the usual name, in one pass (a ledger reads 3 a line)
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def printable(value):
    """:func:`shown` applied to a string or to each string of a list (a pydantic validator's
    helper for fields that hold file names); anything else is returned as is."""
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list):
        return [shown(x) if isinstance(x, str) else x for x in value]
    return value


class StepsimError(Exception):
    """Base class of every error caused by the user's input or request."""


class InputError(StepsimError):
    """A file the user gave cannot be used.

    Args:
        path: the file (or directory) at fault.
        problem: what is wrong, in a few words.
        where: optional location inside the file (``"byte 1234"``, ``"event 17"``).
    """

    def __init__(self, path: str | Path, problem: str, where: str | None = None):
        self.path = shown(path)
        self.problem = problem
        self.where = where
        loc = f" (at {where})" if where else ""
        super().__init__(f"{self.path}: {problem}{loc}")


class ModelError(StepsimError):
    """A StepModel, scenario or parameter value is invalid or cannot be simulated."""


class NotApplicable(ModelError):
    """A what-if that does not apply to the model: the model lacks what it needs (no DDP
    gradients, unsized all-reduces, no such rank or phase). The CLI names the model file."""


class SimulationError(ModelError):
    """A model that is valid but cannot be simulated (a deadlock, a dependency that never
    resolves): the CLI names the model file."""
