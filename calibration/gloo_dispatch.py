"""Which directories of per-rank traces are CPU DDP (gloo) jobs, and their capture sidecars.

A directory whose traces have no GPU activity and hold ``gloo:*`` collectives is calibrated by
:func:`calibration.gloo.calibrate_gloo`, with the capture sidecars found beside the traces
(``*sidecar*.json``, matched to ranks by their ``ddp.rank``). The capture harness's layout of
a DDP job, one folder per rank (``rank<N>/trace.json.gz`` + ``rank<N>/sidecar.json``, see
:func:`calibration.capture.rank_dir`), is read the same way. Any other directory is left to
the GPU calibration, unchanged.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.events import build_table
from stepsim.calibration.same_run import check_one_run
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.trace_io import SidecarNotTrace, trace_candidates, load_trace
from stepsim.models.params import StepModel
from stepsim.simcore.errors import InputError

__all__ = ["gloo_dir", "check_job", "sidecars_by_rank", "missing_ranks"]


def gloo_dir(path: Path) -> StepModel | None:
    """The gloo model of directory ``path``, or None when its traces are not a CPU gloo job.

    A rank trace that does not read is skipped and named in a warning, and its rank is named
    as having no trace (:func:`missing_ranks`), as when the file is not there.

    Raises:
        InputError: an unreadable sidecar, no rank trace that reads (see
            :func:`calibration.gloo.calibrate_gloo`).
    """
    from stepsim.calibration.gloo import calibrate_gloo, is_gloo

    subs = sorted(d for d in path.glob("rank*") if (d / "trace.json.gz").is_file())
    if subs:
        return _capture_ranks(subs)
    files, warnings = trace_candidates(path)
    head = _first_readable([f for f in files if not f.name.lower().endswith("sidecar.json")])
    if head is None or head.gpu_mask().any() or not (is_gloo(head) or _gloo_job(head)):
        return None         # (none readable: left to the GPU calibration's own error)
    tables, skipped = _rank_tables(path, files, warnings)
    if any(t.gpu_mask().any() for t in tables) or not any(is_gloo(t) for t in tables):
        return None
    check_job(tables)
    agree: list[str] = []
    sidecars = sidecars_by_rank(sorted(path.glob("*sidecar*.json")), agree, tables)
    return missing_ranks(_warned(calibrate_gloo(tables, sidecars), skipped + agree), path)


def _first_readable(files: list[Path]):
    """The event table of the first of ``files`` that reads as a trace (None if none does):
    a job is known as a gloo job from any rank's trace, not only from its first file's (a
    broken ``rank0.json`` made the job's ``rank1.json`` calibrate as a one-process CPU trace,
    without its rank sidecar)."""
    for f in files:
        try:
            return build_table(load_trace(f))
        except (InputError, SidecarNotTrace):
            continue
    return None


def _rank_tables(path: Path, files: list[Path], warnings=()) -> tuple[list, list[str]]:
    """The event tables of the job's rank ``files`` (in folder ``path``) that read as traces,
    and one warning naming those that do not and why (their ranks are then named by
    :func:`missing_ranks`); ``warnings`` (the folder listing's) go to the first trace's.

    Raises:
        InputError: no rank file reads.
    """
    raws, bad = [], []
    for f in files:
        try:
            raws.append(load_trace(f))
        except SidecarNotTrace:
            continue
        except InputError as e:
            bad.append(f"{f.relative_to(path).as_posix()}: {e.problem}")
    if not raws:
        raise InputError(path, "no rank trace in the folder could be read: " + "; ".join(bad))
    raws[0].warnings[:0] = warnings     # (as calibration.trace_io.load_rank_traces does)
    skipped = [f"{path.name}/: skipped {len(bad)} of {len(bad) + len(raws)} rank trace "
               "files: " + "; ".join(bad)] if bad else []
    return [build_table(raw) for raw in raws], skipped


def _gloo_job(table) -> bool:
    """Whether the trace's ``distributedInfo`` names a gloo job of several ranks (its own
    collectives may all have been dropped as impossible records)."""
    info = table.metadata.get("distributedInfo")
    if not isinstance(info, dict):
        return False
    try:
        return str(info.get("backend")) == "gloo" and int(info.get("world_size") or 1) > 1
    except (TypeError, ValueError, OverflowError):
        return False


def _capture_ranks(dirs: list[Path]) -> StepModel | None:
    """A DDP job captured by the harness: one capture folder per rank."""
    from stepsim.calibration.gloo import calibrate_gloo, is_gloo

    tables, skipped = _rank_tables(dirs[0].parent, [d / "trace.json.gz" for d in dirs])
    if any(t.gpu_mask().any() for t in tables) or not any(is_gloo(t) for t in tables):
        return None
    check_job(tables)
    agree: list[str] = []
    sidecars = sidecars_by_rank([d / "sidecar.json" for d in dirs
                                 if (d / "sidecar.json").is_file()], agree, tables)
    return missing_ranks(_warned(calibrate_gloo(tables, sidecars), skipped + agree),
                         dirs[0].parent)


def _warned(model: StepModel, warnings: list[str]) -> StepModel:
    if not warnings:
        return model
    meta = model.meta.model_copy(update={"warnings": [*warnings, *model.meta.warnings]})
    return model.model_copy(update={"meta": meta})


def check_job(tables) -> None:
    """Refuse files that cannot be the ranks of one gloo job: a rank whose ``gloo:*``
    collectives are all gone (dropped as impossible records, or never there) beside ranks that
    have them, and, for ranks on one host (one clock: Kineto's ``baseTimeNanoseconds`` + ts),
    a file whose events do not overlap the first file's in time (ranks of one job run
    together; a rank from another run of the same job would otherwise be aligned onto it by
    the collectives' median end and calibrated as if it were one job).

    Raises:
        InputError: naming the file and what is wrong.
    """
    from stepsim.calibration.events import dropped_note
    from stepsim.calibration.gloo import is_gloo

    have = [t for t in tables if is_gloo(t)]
    for t in tables:
        if have and not is_gloo(t):
            raise InputError(t.path, "no gloo:* collectives left where the job's other rank "
                             f"files ({have[0].path.name}) have them, so its collectives cannot "
                             "be timed" + dropped_note(t))
    check_one_run([(t.path, str(t.metadata.get("host_name") or ""), t.base_ns,
                    t.base_ns + int(t.ts_ns.max())) for t in tables if len(t)])


def sidecars_by_rank(files, warnings: list[str] | None = None, tables=None) -> dict:
    """The capture sidecars with a DDP record, by the rank they record (``ddp.rank``), checked
    to agree where the ranks of one job must (:mod:`calibration.rank_agree`; its warnings
    are appended to ``warnings``).

    With ``tables`` (the rank traces), each rank's sidecar is checked to record the threads
    that ran that trace's collectives (:func:`_check_threads`).

    Raises:
        InputError: two sidecars recording one rank (the later would replace the earlier,
            and its rank's profiler factor and thread times would be another rank's), or two
            that disagree on a setting every rank of one job shares.
    """
    from stepsim.calibration.rank_agree import check_ranks_agree

    out, where = {}, {}
    for f in files:
        side = load_sidecar(f)
        ddp = getattr(side, "ddp", None)
        if ddp is None:
            continue
        if ddp.rank in out:
            raise InputError(f, f"records rank {ddp.rank} (ddp.rank), as {where[ddp.rank].name} "
                             "does: two sidecars of one rank (a copied or mislabelled sidecar)")
        out[ddp.rank], where[ddp.rank] = side, Path(f)
    warns = check_ranks_agree({r: (where[r], out[r]) for r in out})
    if warnings is not None:
        warnings += warns
    for t in tables or []:
        _check_threads(t, out, where)
    return out


def _check_threads(table, sides: dict, where: dict) -> None:
    """Refuse the sidecar of ``table``'s rank when the threads whose CPU it records
    (``ddp.threads``) hold none of the threads that ran the trace's ``gloo:*`` collectives:
    it is another rank's or another run's (a copied or swapped sidecar; rank 0's relabelled
    rank 1 gave rank 1 rank 0's backend CPU, split as if no worker thread had run)."""
    from stepsim.calibration.trace_io import rank_of

    rank = rank_of(table._raw, [])[0] if table._raw is not None else None
    side = sides.get(rank)
    threads = {t.tid for t in side.ddp.threads} if side is not None else set()
    gloo = {int(table.tid[i]) for i, n in enumerate(table.names.tolist())
            if str(n).startswith("gloo:")}
    if threads and gloo and not threads & gloo:
        raise InputError(where[rank], f"records the CPU of threads {sorted(threads)[:6]}, none "
                         f"of which ran the gloo:* collectives of {table.path.name} (threads "
                         f"{sorted(gloo)[:6]}): the sidecar of another rank or run")


def missing_ranks(model: StepModel, path: Path) -> StepModel:
    """``model`` with a warning naming the ranks of the job's world size that have no trace.

    Raises:
        InputError: an all-reduce (sized from its trace event's ``Input Dims``) larger than
            every gradient the sidecar's DDP record lists together: its dims cannot be right.
    """
    grads = sum(g.bytes for g in model.comm.grad_params or []) \
        if model.meta.notes.get("buckets") == "measured" else 0
    big = [t for ts in model.device.streams.values() for t in ts
           if grads and t.kind == "collective" and (t.bytes or 0) > grads]
    if big:
        raise InputError(path, f"an all-reduce of {big[0].bytes} B ({big[0].id}), more than the "
                         f"{grads} B of "
                         "every gradient the capture sidecar's DDP record lists: its trace "
                         "event's Input Dims cannot be right")
    have = {r.rank for r in model.ranks}
    gone = sorted(set(range(model.comm.world_size)) - have)
    if not gone:
        return model
    note = (f"{path.name}/: rank{'s' if len(gone) > 1 else ''} "
            f"{', '.join(map(str, gone[:8]))}{' ...' if len(gone) > 8 else ''} of the job's "
            f"{model.comm.world_size} (world size) {'have' if len(gone) > 1 else 'has'} no trace: the model holds rank"
            f"{'s' if len(have) > 1 else ''} {', '.join(map(str, sorted(have)))} only, so the "
            "wait for the missing ranks counts as transfer, not arrival skew")
    meta = model.meta.model_copy(update={"warnings": [note] + list(model.meta.warnings)})
    return model.model_copy(update={"meta": meta})
