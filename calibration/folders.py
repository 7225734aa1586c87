"""A folder of trace files: calibrate what can be calibrated, name what was skipped and why.

:func:`read_folder` reads every trace file directly inside a folder (as
:func:`calibration.trace_io.load_rank_traces` lists them) and sorts them into

* **GPU traces**, the ranks to combine (:func:`calibration.gpu.calibrate_gpu_pending`);
* **host-only traces** (no kernel, memcpy or memset): a folder of only these calibrates as
  each file does alone, with the CPU calibration, from its first file (by rank, then name;
  a CPU model is of one process), the others named in a warning; among GPU traces they are
  skipped;
* **skipped** files, each with the one-line reason it could not be read (a broken or foreign
  file does not fail the folder; the folder is refused only when nothing in it calibrates).

Each file is read in its own process (:mod:`calibration.rank_pool`), and a folder's tables keep
no raw event dicts (:meth:`calibration.events.EventTable.slim`). It also says when the files are not ranks of one job (:func:`one_job`): two files that claim
the same rank are separate runs, and files whose ``distributedInfo`` gives different world
sizes come from different jobs; then only the first file's job is used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.fitted_table import read_and_fit
from stepsim.calibration.rank_pool import Problem, map_ranks
from stepsim.calibration.trace_io import (SidecarNotTrace, trace_candidates, load_trace,
                                          rank_of)
from stepsim.simcore.errors import InputError

__all__ = ["Folder", "read_folder", "gpu_inputs", "one_job", "calibrate_cpu_folder"]


@dataclass
class Folder:
    """What a folder of traces holds (see the module docstring)."""

    path: Path
    gpu: list[EventTable] = field(default_factory=list)
    cpu: list[EventTable] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    total: int = 0

    def skip_note(self) -> list[str]:
        """One warning naming every skipped file and why (none when nothing was skipped)."""
        if not self.skipped:
            return []
        return [f"{self.path.name}/: skipped {len(self.skipped)} of {self.total} trace files: "
                + "; ".join(self.skipped)]


def read_folder(path: str | Path, fit: Callable | None = None) -> Folder:
    """Read and sort the trace files of folder ``path``; ``fit`` (a module-level function of
    a table, :func:`calibration.gpu.fit_one`): each table with GPU activity is fitted in the
    worker that read it and comes back as a :class:`calibration.fitted_table.FittedTable`.

    Raises:
        InputError: the folder cannot be listed or holds no trace file at all.
    """
    p = Path(path)
    files, warnings = trace_candidates(p)
    fold = Folder(p, warnings=list(warnings))
    each = _read if fit is None else partial(read_and_fit, _read, fit)
    for f, table in zip(files, map_ranks(each, files)):   # each file in its own process
        if table is None:   # a capture sidecar
            continue
        fold.total += 1
        if isinstance(table, Problem):
            fold.skipped.append(f"{f.name}: {table.problem}")
            continue
        (fold.gpu if table.gpu_mask().any() else fold.cpu).append(table)
    if not (fold.gpu or fold.cpu or fold.skipped):
        why = f" ({'; '.join(warnings)})" if warnings else ""

        raise InputError(p, "directory holds no trace files (*.json, *.json.gz)"
                         f"{why}{why_no_trace(p)}")
    if fold.gpu and fold.cpu:
        fold.skipped += [f"{t.path.name}: host-only trace (no GPU activity) among GPU ranks"
                         for t in fold.cpu]
        fold.cpu = []
    if not (fold.gpu or fold.cpu):
        raise InputError(p, "no trace in the folder could be read: " + "; ".join(fold.skipped))
    return fold


def _read(f: Path) -> EventTable | None:
    """The slimmed table of trace file ``f``; None for a capture sidecar."""
    try:
        return build_table(load_trace(f)).slim()
    except SidecarNotTrace:
        return None


def gpu_inputs(paths, fit: Callable | None = None):
    """What :func:`calibration.gpu.calibrate_gpu_pending` fits: (tables, their paths, warnings, the
    :class:`Folder` when ``paths`` is a folder, else None). ``paths``: an
    :class:`~calibration.events.EventTable`, a list of trace files, one trace file, a folder
    or a :class:`Folder`. ``fit``: a folder named by its path is read with it
    (:func:`read_folder`: its GPU tables come back fitted).

    Raises:
        InputError: a bad file given by name, or a folder with no readable GPU trace.
    """
    if isinstance(paths, EventTable):
        return [paths], [paths.path], [], None
    if isinstance(paths, (list, tuple)) or not (isinstance(paths, Folder) or Path(paths).is_dir()):
        raws = [load_trace(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
        return (build_table(r) for r in raws), [r.path for r in raws], [], None
    fold = paths if isinstance(paths, Folder) else read_folder(paths, fit)
    if not fold.gpu:
        raise InputError(fold.path, "no trace in the folder has GPU activity (kernel/memcpy/"
                         "memset); calibrate host-only traces with stepsim calibrate (the CPU "
                         "calibration)" + "".join(f"; skipped {s}" for s in fold.skipped))
    tables, notes = one_job(fold.gpu)
    return tables, [t.path for t in tables], list(fold.warnings) + notes, fold


def _rank_info(t: EventTable) -> tuple[int | None, int, str]:
    return rank_of(t._raw, []) if t._raw is not None else (None, 1, "none")


def one_job(tables: list[EventTable]) -> tuple[list[EventTable], list[str]]:
    """The tables of the first file's job and a warning when the files are not ranks of one
    job (module docstring). Files claiming one rank are left to the rank combination, which
    keeps the first by file name; the warning says they are separate runs."""
    if len(tables) < 2:
        return tables, []
    info = [_rank_info(t) for t in tables]
    worlds = {w for _, w, src in info if src == "distributedInfo"}
    out, notes = tables, []
    if len(worlds) > 1:
        w0 = next(w for _, w, src in info if src == "distributedInfo")
        keep = [t for t, (_, w, src) in zip(tables, info) if src != "distributedInfo" or w == w0]
        other = [f"{t.path.name} (world size {w})" for t, (_, w, src) in zip(tables, info)
                 if src == "distributedInfo" and w != w0]
        notes.append(f"the folder's {len(tables)} trace files are not ranks of one job (their "
                     f"world sizes differ: {', '.join(map(str, sorted(worlds)))}): using the "
                     f"job of world size {w0} and ignoring {', '.join(other)}; calibrate each "
                     "job's files on their own")
        out = keep
        info = [i for i in info if i[2] != "distributedInfo" or i[1] == w0]
    ranks = [r for r, _, _ in info if r is not None]
    dup = sorted({r for r in ranks if ranks.count(r) > 1})
    if dup:
        notes.append(f"the folder's trace files are not ranks of one job: several claim rank"
                     f"{'s' if len(dup) > 1 else ''} {', '.join(map(str, dup))} (separate runs "
                     "of the same rank); the first by file name is used for each rank; "
                     "calibrate each file on its own to compare the runs")
    return out, notes


def calibrate_cpu_folder(fold: Folder, side, sidecar_path, step_regex: str | None):
    """The CPU model of a folder of host-only traces: its first file's (by rank, then name),
    as that file alone gives, with warnings naming the files not used and the skipped ones."""
    from stepsim.calibration.cpu import fit_cpu_model
    from stepsim.calibration.steps import find_steps

    tables = sorted(fold.cpu, key=lambda t: (_rank_info(t)[0] is None, _rank_info(t)[0] or 0,
                                             t.path.name))
    first = tables[0]
    model = fit_cpu_model(first, find_steps(first, step_regex=step_regex), side, first.path,
                          sidecar_path)
    notes = list(fold.warnings) + fold.skip_note()
    if len(tables) > 1:
        notes.append(f"{fold.path.name}/ holds {len(tables)} host-only traces; a CPU model is of "
                     f"one process: calibrated from {first.path.name} as it is alone, not from "
                     f"{', '.join(t.path.name for t in tables[1:])}")
    meta = model.meta.model_copy(update={"warnings": notes + list(model.meta.warnings)})
    return model.model_copy(update={"meta": meta})


def why_no_trace(folder: Path) -> str:
    """What the capture sidecar in ``folder`` says about a missing trace (its warnings, e.g.
    the profiler never completed its active steps), as ``"; the sidecar says: ..."``; without a
    readable sidecar, the capture folders ``folder`` holds (:func:`_capture_subfolders`); else
    empty."""
    from stepsim.calibration.sidecar import load_sidecar

    try:
        side = load_sidecar(Path(folder) / "sidecar.json")
    except (InputError, OSError):
        return _capture_subfolders(Path(folder))
    return f"; its sidecar.json says: {'; '.join(side.warnings)}" if side.warnings else ""


def _capture_subfolders(folder: Path) -> str:
    """A hint for a folder of capture folders (``runs/`` holding ``runs/baseline/``, ...), given
    where one capture folder is meant: ``"; it holds capture folders (...): ..."``; empty when
    it holds none. A fresh user's ``stepsim calibrate runs`` said only "holds no trace files"."""
    try:
        subs = sorted(d.name for d in folder.iterdir()
                      if d.is_dir() and (d / "sidecar.json").is_file() and trace_candidates(d)[0])
    except (OSError, InputError):
        return ""
    if not subs:
        return ""
    shown = ", ".join(subs[:4]) + (f", ... ({len(subs)} in all)" if len(subs) > 4 else "")
    return (f"; it holds capture folders ({shown}), one run each: name one, e.g. "
            f"{folder / subs[0]}")
