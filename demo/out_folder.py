"""The demo's output folder: new, empty, or an earlier demo's (whose captures are removed first,
so old runs never mix with new ones); any other folder is refused before anything runs, so a
user's files are neither mixed with the demo's nor deleted."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from stepsim.simcore.errors import InputError

__all__ = ["claim_out_folder", "DEMO_ENTRIES", "DDP_ENTRIES"]


def _made(names: str) -> re.Pattern:
    """The files a capture writes (``names``, a pattern), or the temporary file of one whose
    write was interrupted (:func:`simcore.atomic.atomic_path`: ``.NAME.XXXXXXXX.tmp``)."""
    return re.compile(rf"^(?:{names})$|^\.(?:{names})\.[A-Za-z0-9_]+\.tmp$")


# top-level entries an earlier demo leaves, and its capture folders (name: the pattern of its
# sub-folders, None where it holds a capture's files itself; the pattern of those files)
DEMO_ENTRIES = ({"model.json", "ledger.jsonl", "table.json", "report.html"},
                {"runs": (re.compile(r"^nw\d+-r\d+$"),
                          _made(r"trace\.json\.gz|sidecar\.json|\.partial\.trace\.json\.gz"))})
DDP_ENTRIES = ({"model.json", "runs.json", "table.json"},
               {name: (sub, _made(r"rank\d+\.json|rank\d+\.sidecar\.json"))
                for name, sub in (("capture", None), ("replicates", re.compile(r"^r\d+$")))})


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
    for name, (subs, made) in folders.items():
        top = out / name
        if not top.is_dir() or top.is_symlink():
            continue
        runs = [top] if subs is None else []
        for q in sorted(top.iterdir()) if subs is not None else []:
            if subs.match(q.name) and q.is_dir() and not q.is_symlink():
                runs.append(q)
            else:
                foreign.append(f"{name}/{q.name}")
        # a capture folder holds what a capture writes, nothing else: 'capture' is a name a
        # user's own folder may have (its files were removed with the old runs)
        foreign += [str(f.relative_to(out)) for run in runs for f in sorted(run.iterdir())
                    if not (made.match(f.name) and f.is_file() and not f.is_symlink())]
    if foreign:
        _refuse(out, foreign)
    for name in folders:
        if (out / name).is_dir():
            shutil.rmtree(out / name)
    return True
