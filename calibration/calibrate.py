"""One entry point from traces (and an optional capture sidecar) to a StepModel's parameters,
:func:`calibrate_pending`: the model with the steps still to run that simulate it (GPU
traces: :mod:`calibration.pending`), which :func:`stepsim.fit.calibrate` runs.

* a directory of per-rank traces, or a trace with GPU activity (kernels, memcpy, memset):
  :func:`calibration.gpu.calibrate_gpu_pending` (a folder's unreadable files are skipped and
  named, see :mod:`calibration.folders`; a folder of host-only traces calibrates as its first
  file does alone, unless it is a CPU DDP (gloo) job: :mod:`calibration.gloo_dispatch`);
* a host-only trace (a CPU training loop): :func:`calibration.cpu.fit_cpu_model`.

The sidecar, when given, supplies the DataLoader settings and per-batch produce times that no
trace holds.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from stepsim.calibration.events import build_table
from stepsim.calibration.folders import calibrate_cpu_folder, read_folder
from stepsim.calibration.job_runs import (held_against, job_speeds,  # noqa: F401  (re-exported)
                                          with_walls, job_wall_factors)
from stepsim.calibration.nccl_buckets import infer_buckets
from stepsim.calibration.pending import Pending
from stepsim.calibration.short_capture import short_capture_note
from stepsim.calibration.steps import compile_step_regex, find_steps
from stepsim.calibration.trace_io import load_trace
from stepsim.models.param_base import error_at
from stepsim.models.params import StepModel
from stepsim.simcore.errors import InputError, StepsimError
from stepsim.simcore.files import missing
from stepsim.simcore.gcpause import gc_paused


def load_sidecar(path):
    """:func:`calibration.sidecar.load_sidecar`, imported when a sidecar is read (a trace
    alone does not pay for the sidecar modules, nor for the CPU fit's)."""
    from stepsim.calibration.sidecar import load_sidecar as load

    return load(path)


CAPTURE_TRACE, CAPTURE_SIDECAR = "trace.json.gz", "sidecar.json"
"""What :class:`calibration.capture.Capture` writes into its folder."""


@gc_paused
def calibrate_pending(trace: str | Path, sidecar: str | Path | None = None,
                      step_regex: str | None = None, replicates=(),
                      steps: tuple[int | None, int | None] | None = None) -> Pending:
    """Calibrate a StepModel from ``trace``, as a :class:`~calibration.pending.Pending` (the
    steps that simulate it left to :func:`stepsim.fit.calibrate`): a trace file, a directory
    of per-rank trace files, or a capture harness folder (``trace.json.gz`` +
    ``sidecar.json``, whose sidecar is used unless ``sidecar`` is given). ``replicates``:
    other captures (folders or sidecar files) of the same setting, from which the host's
    run-to-run speed noise is measured (:mod:`calibration.host_noise`). ``steps``: ``(A, B)``,
    calibrate from the steps numbered ``A ≤ N < B`` only (``ProfilerStep#N``; None on a side:
    open), the trace read as a stream keeping only their events (:mod:`calibration.stream`;
    one trace file).

    Raises:
        InputError: unreadable/malformed trace, sidecar or replicate, a replicate of another
            setting, or no step to calibrate from.
        StepsimError: ``step_regex`` is not a valid regular expression, or is given with
            ``steps``.

    The cyclic garbage collector is paused while it runs (:mod:`simcore.gcpause`): a fit
    builds hundreds of thousands of small objects that live until it ends and form no cycle,
    and the collector's passes over them took about half the fitting time (largest trace: the
    five steps' host-op fits 0.30 s with it, 0.10 s without).
    """
    if steps is not None and step_regex is not None:
        raise StepsimError("--steps takes ProfilerStep#N numbers; it cannot be combined with "
                           "--step-regex")
    with records_checked(trace, sidecar):
        return _with_replicates(trace, sidecar, step_regex, replicates, steps)


@contextmanager
def records_checked(trace, sidecar):
    """Turn a parameter past its bounds (pydantic's ValidationError) into an InputError naming
    the sidecar, else the trace: the records it was fitted from cannot be right."""
    try:
        yield
    except ValidationError as e:
        err = e.errors()[0]
        where, msg = error_at(e)
        raise InputError(Path(sidecar or trace), f"its records give an impossible model "
                                                 f"({e.title}.{where or e.title}: {msg}, "
                                                 f"{err.get('input')!r}): records that cannot "
                                                 "be right") from None


def _with_replicates(trace, sidecar, step_regex, replicates, steps) -> Pending:
    """:func:`calibrate_pending` after its argument checks."""
    ranks = _rank_sidecars(Path(trace)) if sidecar is None else []
    side_path = sidecar or _capture_sidecar(Path(trace))
    if not replicates:
        pending = _calibrate(trace, sidecar, step_regex, steps)
        if side_path is None:
            return pending   # (a trace alone does not import the sidecar modules)
    from stepsim.calibration.host_noise import (apply_replicates, at_run_speed, drop_loaded,
                                                no_replicate_said, replicate_speeds)
    from stepsim.calibration.oversub_pool import pool_oversub
    from stepsim.calibration.probe_pool import pool_probe_fits
    from stepsim.calibration.refault_runs import pool_refault_share

    if not replicates:
        return pending.then(lambda model: _warned(
            at_run_speed(model, load_sidecar(side_path), None), [no_replicate_said()]))

    if ranks:     # a CPU DDP job's folder: each rank against the same rank of every replicate
        from stepsim.calibration.gloo_barrier import pool_barrier
        from stepsim.calibration.gloo_cpu import pool_bucket_cpu
        from stepsim.calibration.gloo_pool import pool_runs
        from stepsim.calibration.gloo_cold import pool_cold
        from stepsim.calibration.gloo_wake import pool_wake

        trace, ranks, reps, speeds, said = _quiet_runs(Path(trace), replicates)
        if not reps:      # none quiet beside the capture: calibrated alone, and said
            return _calibrate(trace, sidecar, step_regex, steps).then(
                lambda model: _warned(model, said))
        runs = [[load_sidecar(p) for p in sides.values()] for sides in
                [ranks] + [s for _, s in reps]]
        rep_paths = [p for p, _ in reps]
        def pooled(model: StepModel) -> StepModel:   # every run's records, within bounds
            model = pool_runs(_warned(model, said), Path(trace), rep_paths, runs, speeds)
            model = pool_wake(pool_bucket_cpu(model, runs, speeds), runs)
            model = pool_cold(pool_barrier(model, runs), runs)
            with records_checked(trace, sidecar):   # (model_copy checked none)
                type(model.comm).model_validate(model.comm.model_dump())
            return with_walls(apply_replicates(held_against(model, runs), speeds), runs)
        return _calibrate(trace, sidecar, step_regex, steps).then(pooled)
    if side_path is None:
        raise InputError(Path(trace), "--replicate needs the capture's sidecar (a capture "
                                      "folder or --sidecar)")
    reps = [(Path(r), load_sidecar(_replicate_sidecar(r))) for r in replicates]
    side = load_sidecar(side_path)
    speeds = replicate_speeds(Path(side_path), side, reps)   # before the fit
    speeds, load_note = drop_loaded(speeds, reps)
    if load_note is None:   # where the sidecars cannot say how loaded: their preemption
        from stepsim.calibration.replicate_load import preempted_replicates

        load_note = preempted_replicates(reps)

    def at_speed(model: StepModel) -> StepModel:
        model = at_run_speed(model, side, speeds if len(speeds) > 1 else None)
        model = pool_probe_fits(model, side, reps)    # every run's probe, not the capture's
        model = pool_oversub(model, side, reps)       # so for the slowdown past the cores
        model = pool_refault_share(model, side, reps)   # every run's heap, not assumed
        dropped = [f"replicate {w}" for _, rep in reps for w in rep.dropped]
        dropped += [load_note] if load_note else []
        if not dropped:
            return model
        meta = model.meta.model_copy(update={"warnings": [*model.meta.warnings, *dropped]})
        return model.model_copy(update={"meta": meta})

    return _calibrate(trace, sidecar, step_regex, steps).then(at_speed)


def _quiet_runs(trace: Path, replicates):
    """A CPU DDP job's capture folder and replicates without the runs that ran under outside
    load (:func:`calibration.ddp_runs.pick_runs`: a loaded capture gives way to the first
    quiet replicate): ``(capture, its rank sidecars, [(replicate, its rank sidecars)], host
    speed factors, warnings naming each run left out)``."""
    from stepsim.calibration.ddp_runs import pick_runs, pick_warnings

    given = [trace] + [Path(r) for r in replicates]
    pick = pick_runs(given)
    said = pick_warnings(pick, trace, {p: str(r) for p, r in zip(given, [trace, *replicates])})
    ranks = _rank_sidecars(pick.capture)
    reps = [(p, _rank_sidecars(p)) for p in pick.replicates]
    if not pick.left_out:
        return pick.capture, ranks, reps, pick.speeds, said
    return pick.capture, ranks, reps, job_speeds(ranks, reps) if reps else [1.0], said


def _warned(model: StepModel, lines: list[str]) -> StepModel:
    """``model`` with ``lines`` added to its warnings."""
    if not lines:
        return model
    meta = model.meta.model_copy(update={"warnings": [*model.meta.warnings, *lines]})
    return model.model_copy(update={"meta": meta})


def _rank_sidecars(p: Path) -> dict[str, Path]:
    """A multi-rank folder's per-rank sidecars (``rank<N>.sidecar.json`` beside the traces, or
    ``rank<N>/sidecar.json``) by their path in the folder, in name order; empty when ``p``
    holds none."""
    if not p.is_dir():
        return {}
    found = sorted(p.glob("rank*.sidecar.json")) or sorted(p.glob("rank*/" + CAPTURE_SIDECAR))
    return {f.relative_to(p).as_posix(): f for f in found}


def _capture_sidecar(p: Path) -> Path | None:
    """The sidecar of a capture harness folder (None if ``p`` is not one)."""
    if p.is_dir() and (p / CAPTURE_SIDECAR).is_file():
        return p / CAPTURE_SIDECAR
    return None


def _replicate_sidecar(r) -> Path:
    """The sidecar file of the replicate ``r`` (a capture folder or a sidecar file). Raises
    StepsimError for an empty path (``Path('')`` is the current folder, which read as "is a
    directory") and InputError for a folder without a sidecar."""
    if not str(r):
        raise StepsimError("--replicate '': an empty path; give a capture folder or its "
                           "sidecar file")
    p = Path(r)
    if p.is_dir() and _capture_sidecar(p) is None:
        raise InputError(p, f"a folder without {CAPTURE_SIDECAR}: a replicate is a capture "
                            "folder or its sidecar file")
    return _capture_sidecar(p) or p


def _refuse_short(path: Path) -> None:
    """Raise :func:`calibration.short_capture.short_capture_note`'s InputError when the
    capture sidecar at ``path`` says its profiled window holds no complete step; a sidecar that
    cannot be read is left to the folder's own refusal (which names what it says)."""
    try:
        side = load_sidecar(path)
    except InputError:
        return
    short_capture_note(side, path)


def _calibrate(trace, sidecar, step_regex, steps=None) -> Pending:
    """:func:`calibrate_pending` without replicates."""
    p = Path(trace)
    if step_regex is not None:
        try:
            compile_step_regex(step_regex)
        except ValueError as e:
            raise StepsimError(str(e)) from None
    if p.is_dir() and not sidecar and (p / CAPTURE_SIDECAR).is_file() \
            and not (p / CAPTURE_TRACE).is_file():
        _refuse_short(p / CAPTURE_SIDECAR)   # a capture whose window never ran: say the steps
    if p.is_dir() and (p / CAPTURE_TRACE).is_file() and (p / CAPTURE_SIDECAR).is_file():
        # a capture harness folder: its trace, with its sidecar unless one is given
        sidecar = sidecar or p / CAPTURE_SIDECAR
        p = p / CAPTURE_TRACE
    side = load_sidecar(sidecar) if sidecar else None
    short = None if side is None else short_capture_note(side, Path(sidecar))
    if p.is_dir() and steps is not None:
        raise InputError(p, "--steps takes one trace file, not a folder")
    if p.is_dir():
        from stepsim.calibration.gloo_dispatch import gloo_dir

        model = gloo_dir(p)          # a CPU DDP (gloo) job's rank files
        if model is not None:
            return Pending(model)
        from functools import partial

        from stepsim.calibration.gpu import fit_one

        # each GPU rank fitted in the worker that read it (calibration.fitted_table)
        fold = read_folder(p, partial(fit_one, step_regex=step_regex))
        if fold.gpu:
            return _gpu(fold, side, step_regex).then(infer_buckets)
        return Pending(calibrate_cpu_folder(fold, side, Path(sidecar) if sidecar else None,
                                            step_regex))
    if not p.exists():
        raise missing(p)
    if steps is None:
        table = build_table(load_trace(p))
    else:
        from stepsim.calibration.stream import steps_table

        table = steps_table(p, *steps)
        table.step_range = steps
    if side is not None:
        from stepsim.calibration.sidecar_match import check_sidecar_matches

        check_sidecar_matches(table, side, sidecar)
    if table.gpu_mask().any():
        table = table.slim()   # the raw event dicts go: the fit reads the columns
        return _gpu(table, side, step_regex).then(infer_buckets).then(  # on the coarse model
            lambda model: _warned(model, [short] * bool(short)))
    steps = find_steps(table, step_regex=step_regex)
    from stepsim.calibration.cpu import fit_cpu_model

    model = fit_cpu_model(table, steps, side, p, Path(sidecar) if sidecar else None)
    return Pending(_warned(_without_gpu_activity(table, model), [short] * bool(short)))


def _without_gpu_activity(table, model: StepModel) -> StepModel:
    """A host-only model of a trace whose launch calls (kernel or graph launches) enqueued no
    GPU activity the profiler recorded (a CUDA graph's kernels are often dropped): the GPU's
    busy time is unknown, not zero; a warning and ``meta.notes["gpu_busy_pct"] = "unknown"``
    say so."""
    from collections import Counter

    from stepsim.calibration.linking import LAUNCH_APIS

    api = table.names[table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X")]
    calls = Counter(n for n in api.tolist() if LAUNCH_APIS.get(n) in ("kernel", "graph"))
    if not calls:
        return model
    what = ", ".join(f"{n} ×{c}" for n, c in calls.most_common(3))
    warning = (f"{table.path.name}: {sum(calls.values())} GPU launch call(s) ({what}) but no "
               "GPU activity in the trace (the profiler dropped the kernels, as it often does "
               "for CUDA graphs): GPU busy time is unknown and the model is of the host side "
               "only; profile with CUPTI activity enabled to model the GPU")
    meta = model.meta.model_copy(update={"warnings": [*model.meta.warnings, warning],
                                         "notes": {**model.meta.notes, "gpu_busy_pct": "unknown"}})
    return model.model_copy(update={"meta": meta})


def _gpu(p, side, step_regex) -> Pending:
    """``p``: a :class:`calibration.folders.Folder` of per-rank traces or a built event
    table."""
    from stepsim.calibration.gpu import calibrate_gpu_pending

    pending = calibrate_gpu_pending(p, step_regex=step_regex)
    if side is None:
        return pending
    # coarsening probes which tasks queue behind each other; the sidecar's loader can change
    # that, so it is applied to the kernel-level model first (the cap on the ranks' lateness
    # simulates the rank alone as fitted, before the sidecar: calibration.pending.SkewCap)
    return pending.now(lambda model: apply_sidecar(model, side))


def apply_sidecar(model: StepModel, side) -> StepModel:
    """The model with what the sidecar measures filled in, read as on the CPU path
    (:func:`calibration.sidecar_fit.loader_from_sidecar`: settings, produce times, batch
    bytes, hand-over time, cores), each parameter's source as it was obtained."""
    from stepsim.calibration.gpu_notes import ASK_CORES, ASK_LOADER
    from stepsim.calibration.run_drift import profiled_drift
    from stepsim.calibration.sidecar_fit import loader_from_sidecar

    upd, src, warn, _ = loader_from_sidecar(side, side.torch_num_threads or 1)
    loader = model.loader.model_copy(update=upd)
    sources = dict(model.meta.sources)
    sources.update(src)
    drift = profiled_drift(side)
    answered = (ASK_LOADER,) + ((ASK_CORES,) if side.host_cores else ())
    kept = [w for w in model.meta.warnings if not w.endswith(answered)]
    meta = model.meta.model_copy(update={"sources": sources,
                                         "warnings": kept + warn
                                         + side.dropped + ([drift] if drift else [])})
    return model.model_copy(update={"loader": loader, "meta": meta})
