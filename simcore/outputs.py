"""Outputs checked before anything is written: an output never replaces an input (a trace, a
sidecar, a model, a scenario), nor lands as a JSON file inside an input folder (where it would
later be read as one of its traces), nor shares its file with another output. The CLI and the
Python API both call it."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from stepsim.simcore.errors import StepsimError, shown

_TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and a.samefile(b))
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link loop (Python < 3.13)
        return False


def refuse_overwriting_inputs(inputs: Iterable[Any], outputs: Iterable[tuple[str, Any]]) -> None:
    """Check every ``(option, path)`` of ``outputs`` (None or empty: not written) against
    ``inputs`` (paths; anything else, such as a model object, is skipped). An option named
    ``ledger`` must also be a regular file when it exists (it is appended to and rewritten).

    Raises:
        StepsimError: naming the option and the file.
    """
    ins = [Path(i) for i in inputs if isinstance(i, (str, Path)) and str(i)]
    given: list[tuple[str, Path]] = []
    for flag, v in outputs:
        if not v:
            continue
        out = Path(v)
        for other, prev in given:   # (--plot and --chrome-trace on one file: one was lost)
            if _same(out, prev):
                raise StepsimError(f"{flag} {shown(v)}: also given as {other}; two outputs "
                                   "cannot share a file")
        given.append((flag, out))
        if flag.lstrip("-") == "ledger" and out.exists() and not out.is_file():
            raise StepsimError(f"{flag} {shown(v)}: a ledger is appended to and rewritten: it "
                               "must be a regular file")
        for i in ins:
            inside = (i.is_dir() and _same(out.parent, i)
                      and out.name.lower().endswith(_TRACE_SUFFIXES))
            if _same(out, i) or inside:
                what = ("that is an input file" if not inside
                        else f"that is inside the input folder {i}")
                raise StepsimError(f"{flag} {v}: {what}; refusing to overwrite it")
