"""Error types. Every error a user can cause is a :class:`StepsimError`; the CLI turns it into
one line and exit code 2. Anything else is a bug and keeps its traceback."""
from __future__ import annotations

from pathlib import Path


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
        self.path = str(path)
        self.problem = problem
        self.where = where
        loc = f" (at {where})" if where else ""
        super().__init__(f"{self.path}: {problem}{loc}")


class ModelError(StepsimError):
    """A StepModel, scenario or parameter value is invalid or cannot be simulated."""
