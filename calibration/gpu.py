"""Fit a :class:`models.params.StepModel` from GPU (Kineto) traces: one file, or a directory
of per-rank files.

Entry point: :func:`calibrate_gpu_pending` (:func:`stepsim.fit.calibrate_gpu` finishes it).
The pipeline, each stage in its own module::

    load_trace → build_table → find_steps → link (launch → activity) → usable_steps
              → representative step → host ops + device tasks → (ranks: align, skew) → model

==========================================  =================================================
:mod:`calibration.folders`                   the inputs: a file, a folder of ranks, a table
:mod:`calibration.rank_fit`                  one trace's fit (:func:`fit_rank`)
:mod:`calibration.trace_context`             per-trace lookups, a step's calls and activities,
                                             phases
:mod:`calibration.device_tasks`              a step's device tasks (durations, gaps, waits)
:mod:`calibration.host_ops`                  a step's host ops (launches, syncs, cpu, next())
:mod:`calibration.step_fit`                  one step's fit: both of the above
:mod:`calibration.representative`            the median step(s) and the captured window
:mod:`calibration.backlog`                   the device backlog and launch queue at its start
:mod:`calibration.gpu_notes`                 notes, loader and warnings of a fit
:mod:`calibration.gpu_kinds`                 categories, copies and collectives of activities
:mod:`calibration.intervals`                 interval unions and exposed time
:mod:`calibration.rank_combine`              the model: one rank, or ranks combined
:mod:`calibration.rank_pool`                 per-rank reading and fitting in processes
==========================================  =================================================

Each module's docstring states its rules (the representative step, the host thread, device
tasks, collectives, phases, ranks).

Source of facts: Kineto's trace format as seen in ``../shared/traces`` (see
``SOURCES.md``), the CUDA runtime's documented blocking behaviour of pageable copies
(``cudaMemcpyAsync`` from pageable memory is synchronous with respect to the host), and
PyTorch's profiler annotations (``ProfilerStep#N``, ``Optimizer.step#…``,
``enumerate(DataLoader)#…``, ``record_param_comms``).
"""
from __future__ import annotations

from functools import partial

from stepsim.calibration.device_tasks import WAIT_MIN_US, WAIT_WINDOW_US
from stepsim.calibration.fitted_table import FittedTable
from stepsim.calibration.folders import gpu_inputs
from stepsim.calibration.gpu_kinds import CATEGORY_RULES, categorize
from stepsim.calibration.pending import Pending
from stepsim.calibration.rank_combine import combine_ranks, single_model
from stepsim.calibration.rank_fit import RankFit, fit_rank
from stepsim.calibration.rank_pool import Problem, map_ranks
from stepsim.calibration.same_run import check_one_run
from stepsim.models.host_speed import HOST_NOISE_PRIOR
from stepsim.simcore.errors import InputError

__all__ = ["calibrate_gpu_pending", "fit_rank", "RankFit", "CATEGORY_RULES", "categorize",
           "WAIT_MIN_US", "WAIT_WINDOW_US"]


def fit_one(table, step_regex: str | None) -> RankFit:
    """:func:`fit_rank` of ``table`` with its warnings (module level: it runs in a worker)."""
    return fit_rank(table, step_regex=step_regex, warnings=list(table.warnings))


def calibrate_gpu_pending(paths, step_regex: str | None = None) -> Pending:
    """Calibrate a StepModel from a GPU trace file or a directory of per-rank trace files:
    the fine (kernel-level) model, with what is left to simulate (:mod:`calibration.pending`:
    the cap on a multi-rank job's lateness, and coarsening, ``coarse`` True).
    :func:`stepsim.fit.calibrate_gpu` runs them.

    Args:
        paths: a ``.json``/``.json.gz`` Kineto trace, a directory of per-rank traces, a
            list of trace files, or an already built :class:`~calibration.events.EventTable`
            (so a trace read from a pipe is read once).
        step_regex: optional regular expression naming the step marker (see
            :func:`calibration.steps.find_steps`).

    Returns:
        the :class:`~calibration.pending.Pending` StepModel. ``meta`` holds the sources,
        steps used, measured step times (µs), warnings and notes: ``gpu_busy_pct``,
        ``kernel_sum_over_step_wall`` and ``exposed_comm_us`` (µs per step) as a profiler
        reads them, the median over the steps of their windows; ``step_gpu_busy_pct`` and
        ``step_exposed_comm_us``, the same for the representative step's own GPU work over
        its duration, which is what a replay repeats every step (the two differ when the
        device's backlog changes from step to step); ``coarsened_tasks`` (once coarsened), ….
        ``host.cpu_scale`` (the host's run-to-run speed) gets the stated prior range
        :data:`models.host_speed.HOST_NOISE_PRIOR` (assumed) that the CPU path gives a
        capture without replicates: one trace cannot measure it, and without it a GPU
        what-if's interval held no run-to-run noise at all.

    Raises:
        InputError: unreadable or malformed trace, no GPU activity, no step, no complete step.
    """
    fit_each = partial(fit_one, step_regex=step_regex)
    # a folder named by its path: each rank fitted in the worker that read it
    tables, plist, notes, folder = gpu_inputs(paths, fit_each)
    tables = list(tables)
    # rank files of another run would be aligned on their collectives and read as one job
    check_one_run([(t.path, str(t.metadata.get("host_name") or ""),
                    t.base_ns + int(t.ts_ns.min()), t.base_ns + int(t.ts_ns.max()))
                   for t in tables if len(t)])
    for table in tables:
        if not table.gpu_mask().any():
            raise InputError(table.path, "trace has no GPU activity (kernel/memcpy/memset); use "
                             "the CPU calibration for host-only traces")
    fits: list[RankFit] = []
    # each rank fitted in its own process (calibration.rank_pool), in file order
    done = [t.fit for t in tables if isinstance(t, FittedTable)]
    for table, fit in zip(tables, done if len(done) == len(tables) else map_ranks(fit_each, tables)):
        if isinstance(fit, Problem):
            if folder is None:
                raise fit.error()
            folder.skipped.append(f"{table.path.name}: {fit.problem}")   # named, not fatal
        else:
            fits.append(fit)
    if folder is not None:
        if not fits:
            raise InputError(folder.path, "no trace in the folder could be calibrated: "
                             + "; ".join(folder.skipped))
        plist = [f.path for f in fits]
        notes += folder.skip_note()
    if len(fits) == 1:
        f = fits[0]
        if f.rank < 0:
            f.warnings.append(f"{f.path.name}: no rank in distributedInfo or file name; taken "
                              "as rank 0")
            f.rank = 0
        pending = Pending(single_model(f, plist))
    else:
        pending = combine_ranks(fits, plist)
    model = pending.model
    model.meta.warnings[:0] = notes
    model.meta.sources.setdefault("host.cpu_scale", "assumed")
    model.meta.ranges.setdefault("host.cpu_scale", HOST_NOISE_PRIOR)
    # coarsening (the planner simulates the model many times) is the caller's: it simulates
    return Pending(model, skew=pending.skew, coarse=True)
