"""The standard streams a verb writes to, made to take every line (:func:`streams_refused`)."""
from __future__ import annotations

import os
import sys

__all__ = ["streams_refused"]


def streams_refused() -> str | None:
    """Make the standard streams take every line, or say why stdout cannot: a closed stderr
    (``2>&-``) is ``None`` to Python, which stopped ``whatif`` at its progress bar (exit 1) and
    sent its warnings into stdout (``print(file=None)``), inside ``--json``; a stream whose
    encoding is not UTF-8 (``PYTHONIOENCODING=latin-1``, a legacy locale) raised at the first
    ``–`` or ``µ`` (a traceback, exit 1, the table cut): such characters are written as
    ``\\uXXXX`` escapes, which ``--json`` reads back exactly (break22, 2026-12-07)."""
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")
    if sys.stdout is None:
        return "standard output is closed (run with >FILE, or >/dev/null to discard it)"
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
        if enc not in ("utf-8", "utf8") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    return None
