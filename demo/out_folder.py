"""The demo's output folder: new, empty, or an earlier demo's (whose captures are removed first,
so old runs never mix with new ones); any other folder is refused before anything runs, so a
user's files are neither mixed with the demo's nor deleted."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from stepsim.simcore.errors import InputError

__all__ = ["claim_out_folder", "DEMO_ENTRIES", "DDP_ENTRIES"]

# top-level entries an earlier demo leaves, and its capture folders (name: what they hold)
DEMO_ENTRIES = ({"model.json", "ledger.jsonl", "table.json", "report.html"},
                {"runs": re.compile(r"^nw\d+-r\d+$")})
DDP_ENTRIES = ({"model.json", "runs.json", "table.json"},
               {"capture": None, "replicates": re.compile(r"^r\d+$")})


def _refuse(out: Path, names: list[str]) -> None:
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    raise InputError(out, f"is not empty and not an earlier demo's output folder (it holds "
                          f"{names[0]!r}{more}); give a new or empty folder")


def claim_out_folder(out: Path, entries: tuple) -> bool:
    """Check ``out`` (see the module docstring); an earlier demo's capture folders are removed.
    ``entries``: :data:`DEMO_ENTRIES` or :data:`DDP_ENTRIES`. Returns whether ``out`` held an
    earlier demo's output.

    Raises:
        InputError: ``out`` holds anything a demo does not write (checked before any change).
    """
    files, folders = entries
    if not out.is_dir():
        return False           # new (or not a folder: make_folder says so)
    held = sorted(out.iterdir())
    if not held:
        return False
    foreign = [p.name for p in held if not (p.name in files and p.is_file() and not p.is_symlink())
               and not (p.name in folders and p.is_dir() and not p.is_symlink())]
    for name, rx in folders.items():
        sub = out / name
        if rx is not None and sub.is_dir() and not sub.is_symlink():
            foreign += [f"{name}/{q.name}" for q in sorted(sub.iterdir())
                        if not (rx.match(q.name) and q.is_dir() and not q.is_symlink())]
    if foreign:
        _refuse(out, foreign)
    for name in folders:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    return True
