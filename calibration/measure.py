"""Measured step times of a (re-measured) trace, for validation: no fitting, only reading.

Step time is defined in :mod:`calibration.steps` (start to next start, µs here). Every step
the trace measured counts, stalls included (the steps as the user pays them), except the
worker start-up step: the first ``next()`` of a multi-process DataLoader's iterator spawns its
workers and waits for their first batch (seconds in real traces, against ms after it), a cost
paid once per iterator, not per step. It is left out of the steps and reported on its own
(:class:`StartupStep`): found from the capture sidecar (its first loop iteration, with
``num_workers > 0``), or, without one, as step number 0 (``ProfilerStep#0``: the loop's
first iteration under the profiler) whose ``next()`` took more than :data:`STARTUP_RATIO`
times the longest of every later step's, in a trace whose ``next()`` is a
``_MultiProcessingDataLoaderIter``'s (a later first step, ``ProfilerStep#5`` after a
profiler schedule's wait, is not the iterator's first ``next()``).

A capture that timed steps after its profiled window with the profiler stopped
(``Capture.steps(..., after=N)``, at least :data:`MIN_AFTER_STEPS`) is scored on those: the
steps as the user pays them, without the profiler's own cost (which is per recorded op, so
large where many small ops run on the profiled thread: a DataLoader at ``num_workers=0``
decoding and augmenting in the main thread). The profiled steps' mean is reported beside.
The first of those steps can drain a prefetch queue the workers filled while the profiler's
stop paused the loop; they are left out until the queue ran dry, and said
(:func:`calibration.run_drift.settled_after`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.calibration.cpu import step_loader_waits_us, waited_for_cores
from stepsim.calibration.events import build_table, dropped_note
from stepsim.calibration.job_neck import RankWaits, job_bottleneck, rank_waits
from stepsim.calibration.sidecar import load_sidecar, sidecar_beside
from stepsim.calibration.sidecar_ddp import InjectedStraggler, job_straggler
from stepsim.calibration.outside_load import load_note
from stepsim.calibration.job_load import job_load
from stepsim.calibration.sidecar_fit import loader_settings
from stepsim.calibration.linking import link
from stepsim.calibration.same_run import check_one_run, raw_span
from stepsim.calibration.run_load import ledger_slowdown, remeasured_load
from stepsim.calibration.run_drift import (MIN_AFTER_STEPS, SCORE_AFTER_STEPS, AfterScored,
                                           after_line, drain_note,
                                           drift_noise, scored_note, settled_after, window_note)
from stepsim.calibration.startup_step import (STARTUP_RATIO,  # noqa: F401  (re-exported)
                                              StartupStep, startup_step)
from stepsim.calibration.steps import StepList, find_steps
from stepsim.calibration.step_fallback import no_step_error
from stepsim.calibration.truncated import usable_steps
from stepsim.calibration.trace_io import trace_candidates, load_rank_traces, load_trace, rank_of
from stepsim.models.load_bound import LOAD_WARN
from stepsim.models.warning_record import retexted
from stepsim.simcore.errors import InputError


INPUT_BOUND_SHARE = 0.10
"""Share of the step the host thread must spend waiting on input for a run to count as
input-bound."""
@dataclass(frozen=True)
class MeasuredSteps:
    """Attributes:
        path: the trace.
        step_us: each step's time (µs), start to next start, shape (n_steps,).
        input_wait_us: per step, µs the host thread waited in DataLoader ``next()``.
        bottleneck: in the simulator's vocabulary (``models.metrics``), first rule that
            holds: ``cpu_cores`` when the capture sidecar states DataLoader workers
            (``num_workers`` > 0) and shows the training step's wall time exceeding its CPU
            time (:func:`calibration.cpu.waited_for_cores`; a DDP rank's by its run-queue
            wait alone, ``waits``; at ``num_workers=0`` the next rules decide); a job's
            ``arrival_skew`` or ``comm`` first (:func:`calibration.job_neck.job_bottleneck`);
            ``input`` when the host thread waits for the DataLoader for at least
            ``INPUT_BOUND_SHARE`` of the step (a faster input pipeline would shorten it);
            else ``compute`` when the trace has GPU work (not input-bound: the host thread
            or the device, a split the simulator makes and a trace alone does not) or
            ``host_compute`` (a CPU-only run).
        warnings: what could not be used (an unreadable ``sidecar.json`` beside the trace).
        step_numbers: each step's number (``ProfilerStep#N``).
        startup: the worker start-up step, left out of ``step_us`` (None: none seen).
        loader: the DataLoader settings the capture sidecar states
            (:func:`calibration.sidecar_fit.loader_settings`), None without a sidecar.
        world_size: the job's ranks (``distributedInfo``, else the sidecar's DDP record,
            else the rank traces read; 1 for a single-process run).
        torch_threads: torch's intra-op threads the sidecar states (None without).
        bucket_cap_mb: DDP's bucket cap (MiB) the sidecar's DDP record states (None without).
        outside_load_slowdown: how much slower the run's own threads advanced than on the
            machine alone over the steps a validation scores: its settled unprofiled steps,
            else its profiled window (:func:`calibration.run_load.remeasured_load`),
            ``1 / held − 1`` (:class:`calibration.outside_load.OutsideLoad`; past
            :data:`models.load_bound.LOAD_WARN` it is warned about); None when the sidecar
            cannot tell (none, or no instants); of several ranks, every rank's threads on a
            host together, the job's own (:func:`calibration.job_load.job_load`).
        waits: a DDP rank's wall split outside ``next()`` (:mod:`calibration.job_neck`).
        straggler: the straggler the sidecar's DDP record says was injected
            (``Capture.straggler``: :class:`calibration.sidecar_ddp.InjectedStraggler`), None
            without.
        first_bucket_mb: DDP's first bucket's cap (MiB) the sidecar's DDP record states
            (``first_bucket_bytes``: 1 MiB at DDP's default, the cap itself where the job passed
            ``bucket_cap_mb``), None without.
        barriers_us: per rank (its label), the durations (µs) of the trace's ``gloo:barrier``
            spans, one a ``dist.barrier()`` the run entered (empty: no barrier in the trace).
    """

    path: Path
    step_us: list[float]
    input_wait_us: list[float]
    bottleneck: str
    warnings: list[str] = field(default_factory=list)
    step_numbers: list[int] = field(default_factory=list)
    startup: StartupStep | None = None
    loader: dict | None = None
    world_size: int = 1
    torch_threads: int | None = None
    bucket_cap_mb: float | None = None
    outside_load_slowdown: float | None = None
    waits: RankWaits | None = None
    straggler: InjectedStraggler | None = None
    first_bucket_mb: float | None = None
    barriers_us: dict = field(default_factory=dict)
    after: AfterScored | None = None
    """What it scored of the unprofiled steps after the window (None: it scored the trace's
    steps); a job's ranks' are said in one line (:func:`after_line`), each in ``detail``."""
    detail: list[str] = field(default_factory=list)
    """A job's per-rank notes of what was scored (each rank's drained steps and unprofiled
    against profiled mean), which its warnings summarise in one line (``validate --json``)."""

    @property
    def mean_us(self) -> float:
        return float(np.mean(self.step_us))

    @property
    def median_us(self) -> float:
        return float(np.median(self.step_us))


def measured_steps(path: str | Path, step_regex: str | None = None,
                   sidecar: str | Path | None = None) -> MeasuredSteps:
    """Read the steps of one trace file, of a capture folder, or of a directory of per-rank
    trace files (one run of several ranks).

    ``sidecar``: the capture sidecar of the same run; by default ``sidecar.json`` beside the
    trace (in the folder) is used when it exists and is valid (the capture harness writes both
    into one folder); an invalid one there is ignored with a warning.

    Several ranks: each rank's steps are read as above and matched by step number; a step of
    the job takes as long as its slowest rank (the ranks meet in every collective, so the job
    pays the slowest), and so does its input wait. Steps that not every rank has are left out,
    with a warning. The bottleneck is ``input`` if any rank is input-bound.

    Raises:
        InputError: unreadable/malformed trace or sidecar, a trace without steps, ranks with
            no step number in common.
    """
    p = Path(path)
    return _run(_load(p), p, step_regex, sidecar)


def _load(p: Path):
    """The traces of ``p`` (:func:`calibration.trace_io.load_rank_traces`), or, for the
    capture harness's folder of a DDP job (``rank<N>/trace.json.gz``, no trace directly
    inside; :func:`calibration.capture.rank_dir`), each rank folder's trace, as calibrate
    reads it (:mod:`calibration.gloo_dispatch`)."""
    if p.is_dir() and not trace_candidates(p)[0]:
        subs = sorted(d for d in p.glob("rank*") if (d / "trace.json.gz").is_file())
        if subs:
            return [load_trace(d / "trace.json.gz") for d in subs]
    return load_rank_traces(p)


def _run(raws, where: Path, step_regex: str | None, sidecar=None) -> MeasuredSteps:
    """One trace's run, or one run of several ranks (``raws`` read from ``where``)."""
    return _one(raws[0], step_regex, sidecar) if len(raws) == 1 else _job(raws, where, step_regex)


def measured_runs(paths, step_regex: str | None = None) -> list[MeasuredSteps]:
    """The runs behind ``paths`` (each a trace file, capture folder or directory of per-rank
    traces, as in :func:`measured_steps`), except that several single files that are distinct
    ranks of one job (``distributedInfo`` names each a different rank of one world size) are
    one run of that job, with a warning saying so.

    Raises:
        InputError: as :func:`measured_steps`.
    """
    groups = [_load(Path(p)) for p in paths]
    seen: dict[Path, Path] = {}
    for p, g in zip(paths, groups):
        for r in g:
            key = r.path.resolve()
            if key in seen:
                raise InputError(p, f"reads {r.path.name} again (already given as "
                                 f"{seen[key]}): a trace would count twice")
            seen[key] = Path(p)
    mixed = False   # single rank files of multi-rank jobs that do not form one job
    if len(groups) > 1 and all(len(g) == 1 for g in groups):
        raws = [g[0] for g in groups]
        info = [rank_of(r, []) for r in raws]
        ranks, worlds = {i[0] for i in info}, {i[1] for i in info}
        if all(i[2] == "distributedInfo" for i in info) and len(ranks) == len(raws) \
                and len(worlds) == 1 and worlds.pop() > 1:
            run = _job(raws, Path(paths[0]), step_regex)
            run.warnings.append(f"the {len(raws)} traces are ranks {sorted(ranks)} of one job: "
                                "measured as one run (each step takes its slowest rank)")
            return [run]
        mixed = sum(i[1] > 1 for i in info) > 1
    runs = [_run(g, Path(p), step_regex) for g, p in zip(groups, paths)]
    for g, run in zip(groups, runs):
        rank, world, _ = rank_of(g[0], [])
        if len(g) == 1 and world > 1:
            run.warnings.append(f"rank {rank} of a job of {world} ranks, "
                                "measured alone: the job's step takes its slowest rank, which "
                                "this file cannot show (give every rank's file, or their folder)")
    if mixed:
        runs[0].warnings.append(
            "several of these traces are ranks of multi-rank jobs but do not form one job "
            "(a rank repeats, or world sizes differ): each is pooled as a run of its own; give "
            "one job's rank files together, e.g. as their directory")
    return runs


def _job(raws, where: Path, step_regex: str | None) -> MeasuredSteps:
    """One run of several ranks (see :func:`measured_steps`)."""
    check_one_run([(r.path, *raw_span(r)) for r in raws])
    runs = [_one(r, step_regex, None, alone=False) for r in raws]
    common = sorted(set.intersection(*(set(r.step_numbers) for r in runs)))
    if not common:   # (a rank without its sidecar is measured on its profiled steps alone)
        some = any(r.after for r in runs)
        bare = [next((w for w in r.warnings if w.startswith("ignored ")), f"none beside "
                     f"{r.path.name}") for r in runs if r.after is None and some]
        raise InputError(where, f"the {len(runs)} rank traces share no step number "
                         f"({', '.join(f'{r.path.name}: {_span(r.step_numbers)}' for r in runs)})"
                         + (f"; a rank's sidecar was not read ({'; '.join(bare)}), so its "
                            "profiled steps were measured, the others' unprofiled" if bare else ""))
    # each rank's own notes name the rank: the printer prefixes them all with the job's folder
    # what each rank scored (drained steps, unprofiled against profiled) in one line for the
    # job, each rank's words in its detail (fresh12: 8 such lines a 2-run validate)
    summed = all(r.after is not None for r in runs)
    said = {w for r in runs if summed for w in r.after.notes}
    detail = [f"{_rank_label(r.path, where)}: {w}" for r in runs for w in r.warnings
              if w in said]
    notes = [retexted(w, f"{_rank_label(r.path, where)}: {w}") for r in runs for w in r.warnings
             if w not in said]
    if summed:
        notes.insert(0, after_line([(_rank_label(r.path, where), r.after) for r in runs]))
    dropped = sum(len(r.step_numbers) for r in runs) - len(common) * len(runs)
    if dropped:
        notes.append(f"{dropped} rank step(s) without a match on every rank were left out")
    idx = [{n: i for i, n in enumerate(r.step_numbers)} for r in runs]
    step_us = [max(r.step_us[ix[n]] for r, ix in zip(runs, idx)) for n in common]
    wait = [max(r.input_wait_us[ix[n]] for r, ix in zip(runs, idx)) for n in common]
    necks = {r.bottleneck for r in runs}
    neck = job_bottleneck([r.waits for r in runs]) or next(
        b for b in ("cpu_cores", "input", "compute", "host_compute") if b in necks)
    ups = [r.startup for r in runs if r.startup is not None]
    startup = max(ups, key=lambda u: u.next_us) if ups else None   # the job waits for the last
    sides = [_beside(r.path) for r in raws]
    load = job_load(sides)    # every rank is the job: one rule
    try:
        straggler, why = job_straggler([s.ddp for s in sides if s is not None and s.ddp])
    except ValueError as e:
        raise InputError(where, str(e)) from None
    notes += [why] if why else []
    if load is not None and load.slowdown > LOAD_WARN:
        notes.append(load_note(load, runs[0].torch_threads or 1))
    return MeasuredSteps(where, step_us, wait, neck, notes, common, startup, runs[0].loader,
                         max(len(runs), *(r.world_size for r in runs)), runs[0].torch_threads,
                         runs[0].bucket_cap_mb, ledger_slowdown(load),
                         straggler=straggler,
                         first_bucket_mb=runs[0].first_bucket_mb,
                         barriers_us={_rank_label(r.path, where): d for r in runs
                                      for d in r.barriers_us.values()},
                         detail=detail)


def _barriers_us(table, path: Path) -> dict:
    """``{trace name: [µs of each gloo:barrier span]}`` where the trace holds one (a
    ``dist.barrier()`` the run entered: gloo's worker thread runs it as ``gloo:barrier``
    beside the main thread's ``c10d::barrier``), else empty."""
    hit = table.names == "gloo:barrier"
    if not hit.any():
        return {}
    return {path.name: [float(v) / 1e3 for v in table.dur_ns[hit]]}


def _beside(path: Path):
    """The valid sidecar beside a rank's trace, or None (``_one`` notes an invalid one)."""
    try:
        return load_sidecar(beside) if (beside := sidecar_beside(path)) else None
    except InputError:
        return None


def _rank_label(path: Path, where: Path) -> str:
    """A rank's trace as its job's notes name it: its folder under the job's (``rank1``), else
    its file name."""
    return path.parent.name if path.parent != Path(where) else path.name


def _span(numbers: list[int]) -> str:
    return f"steps {numbers[0]}-{numbers[-1]}" if numbers else "no steps"


def _one(raw, step_regex: str | None, sidecar: str | Path | None,
         alone: bool = True) -> MeasuredSteps:
    """One process's run; ``alone`` False: a rank of a job, whose outside load is read over
    every rank together (:func:`_job`), not here."""
    p = raw.path
    notes: list[str] = []
    side = None
    if sidecar:
        side = load_sidecar(sidecar)
    elif beside := sidecar_beside(p):
        try:
            side = load_sidecar(beside)
        except InputError as e:  # not named by the user: not a reason to fail
            notes.append(f"ignored {e}")
    notes += raw.warnings + (side.dropped if side is not None else [])
    table = build_table(raw)
    steps = find_steps(table, step_regex=step_regex)
    if not steps:
        raise no_step_error(p, steps.warnings)
    if gpu := bool(table.gpu_mask().any()):
        # as in calibration: a step the profiler lost GPU work of is not a measured step
        kept, why = usable_steps(table, link(table), steps)
        if not kept:
            raise InputError(p, "no complete step: " + "; ".join(why) + dropped_note(table))
        notes += why
        steps = StepList(kept, steps.warnings, steps.method)
    step_us = np.array([(s.end_ns - s.start_ns) / 1e3 for s in steps])
    wait = step_loader_waits_us(table, steps)
    multi = any("_MultiProcessingDataLoaderIter" in n for n in table.names)
    numbers = [s.number for s in steps]
    startup = startup_step(side, step_us, wait, multi and numbers[0] == 0)
    if startup is not None and startup.in_trace:
        step_us, wait, numbers = step_us[1:], wait[1:], numbers[1:]
    prof = [s for s in side.steps if s.profiled] if side is not None else []
    settled = settled_after(side)
    after = settled.steps
    if settled.drained + len(after) >= MIN_AFTER_STEPS > len(after):
        notes.append(f"scored the trace's profiled steps: {drain_note(settled)}, and fewer "
                     f"than {MIN_AFTER_STEPS} were left (capture with more steps after the "
                     "window: Capture.steps(..., after=N))")
    elif side is not None and len(after) < MIN_AFTER_STEPS:
        notes.append(window_note(len(step_us), len(after)))
    if len(after) >= MIN_AFTER_STEPS:
        traced, step_us = step_us, np.array([s.wall_us for s in after])
        wait = np.array([s.next_wall_us for s in after])
        numbers = [len(side.steps) - len(after) + i for i in range(len(after))]
        prof = after
        said_from = len(notes)
        if settled.drained:
            notes.append(drain_note(settled))
        if len(after) < SCORE_AFTER_STEPS:
            notes.append(f"scored {len(after)} unprofiled steps, fewer than {SCORE_AFTER_STEPS}: "
                         "a mean of few steps is pulled by single slow ones (compare it with "
                         "the median; capture with Capture.steps(..., after=N), N at least "
                         f"num_workers × prefetch_factor + {SCORE_AFTER_STEPS})")
        notes.append(scored_note(len(after), step_us.mean(), traced.mean(),
                                 drift_noise(step_us, traced)))
        scored = AfterScored(len(after), settled.drained, float(step_us.mean()),
                             float(traced.mean()), tuple(notes[said_from:]))
    load = remeasured_load(side) if side is not None and alone else None
    if load is not None and load.slowdown > LOAD_WARN:
        notes.append(load_note(load, side.torch_num_threads or 1))
    share = float(wait.sum() / step_us.sum()) if step_us.sum() > 0 else 0.0
    compute_wall = float(np.mean(step_us - wait))
    compute_cpu = float(np.mean([s.compute_cpu_us for s in prof])) if prof else None
    workers = side is not None and side.loader.num_workers > 0
    ddp = side.ddp if side is not None else None
    world = rank_of(raw, [])[1]
    # a CPU DDP rank's wall past its CPU is its collectives' wait: cores by its run-queue wait
    waits = rank_waits(prof) if ddp and max(world, ddp.world_size) > 1 and not gpu else None
    if workers and compute_cpu and (waits.waited_for_cores() if waits is not None else
                                    waited_for_cores(compute_wall, compute_cpu)):
        neck = "cpu_cores"
    elif share >= INPUT_BOUND_SHARE:
        neck = "input"
    else:
        neck = "compute" if gpu else "host_compute"
    return MeasuredSteps(p, [float(v) for v in step_us], [float(v) for v in wait], neck, notes,
                         numbers, startup,
                         None if side is None else loader_settings(side),
                         max(world, ddp.world_size if ddp is not None else 1),
                         None if side is None else side.torch_num_threads,
                         None if ddp is None else ddp.bucket_cap_mb,
                         ledger_slowdown(load), waits,
                         straggler=None if ddp is None else ddp.straggler,
                         first_bucket_mb=None if ddp is None or not ddp.first_bucket_bytes
                         else ddp.first_bucket_bytes / 2 ** 20,
                         barriers_us=_barriers_us(table, p),
                         after=scored if len(after) >= MIN_AFTER_STEPS else None)
