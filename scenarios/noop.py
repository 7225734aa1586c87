"""What-ifs that change nothing on a given model, said in one line each instead of a silent
1.00x: a ``--set`` of a field nothing in this model reads (:func:`unread_settings`), and, as a
last resort, a prediction whose simulated steps came out identical to the baseline's
(:func:`unchanged_prediction`).

The rules follow ``torch/utils/data/dataloader.py`` (torch 2.13): ``in_order`` "only applies
when num_workers > 0", ``persistent_workers`` and ``prefetch_factor`` are refused without
workers (those two are errors, :func:`scenarios.transforms.apply_with_notes`), and a loader
without workers makes each batch in ``next()`` on the main thread, so nothing of the workers'
(their threads, start-up, the receipt of their batches, the pin-memory thread) is read.
"""
from __future__ import annotations

from typing import Sequence

from stepsim.models.params import StepModel
from stepsim.scenarios.select import copy_direction
from stepsim.scenarios.transforms import PREFETCH_DEFAULT

WORKER_ONLY = ("loader.threads_per_worker", "loader.unpickle_us", "loader.worker_startup_us",
               "loader.batches_per_epoch", "loader.corun_ref", "loader.worker_handover_us")
"""Loader fields read only for DataLoader workers."""

NO_PINNING = ("the model has no device (a CPU run), and torch pins nothing without an "
              "accelerator (StepModel.pins_memory)")
"""Why ``loader.pin_gbps`` is read by nothing on a model without a device."""

NOTHING = "changes nothing"
"""The words every line here holds (the catch-all is not added beside a line that says why)."""

SWEPT = ...
"""The value of a swept path in :func:`unread_settings` (a sweep sets several)."""


def has_collectives(model: StepModel) -> bool:
    """Whether the model has a collective (an all-reduce, a barrier) anywhere."""
    return any(t.kind == "collective" for t in model.task_map().values())


def _show(v) -> str:
    """A value as the CLI spells it (``true``, ``null``)."""
    return {True: "true", False: "false", None: "null"}[v] if v is None or isinstance(
        v, bool) else str(v)


def unread_settings(model: StepModel, after: StepModel | None, sets: Sequence[tuple[str, object]]
                    ) -> list[str]:
    """One line per ``(path, value)`` set (value :data:`SWEPT` for a swept path) that nothing
    in ``after`` (``model`` after every op; None when the ops do not apply) reads, saying why.
    ``loader.pin_memory`` on a model without a device and the collective cost settings
    without ``comm.bus_gbps`` are said by :func:`scenarios.caveats.caveats`; bucket caps
    refuse on their own; ``comm.grad_accum_steps`` skips the optimizer phase with or without
    collectives."""
    if after is None:
        return []
    out: list[str] = []
    lo = after.loader
    for path, value in sets:
        what = path if value is SWEPT else f"{path}={_show(value)}"
        if path.startswith("comm.") and not path.startswith(("comm.bucket", "comm.first_bucket",
                                                             "comm.grad_accum")) \
                and not has_collectives(model):
            out.append(f"{what} changes nothing here: the model has no collectives (one rank "
                       "without DDP), so no comm setting is read")
        elif path == "loader.prefetch_factor" and lo.num_workers == 0 \
                and value == PREFETCH_DEFAULT:
            out.append(f"{what} changes nothing with loader.num_workers=0: 2 is the model's "
                       "stand-in for PyTorch's None there, and a DataLoader given "
                       "prefetch_factor=2 with num_workers=0 raises ValueError (leave it out)")
        elif path == "loader.in_order" and lo.num_workers <= 1:
            out.append(f"{what} changes nothing with loader.num_workers={lo.num_workers}: "
                       "batches come back in order from the main thread or one worker "
                       "(PyTorch: in_order only applies when num_workers > 0)")
        elif path in WORKER_ONLY and lo.num_workers == 0 and path != "loader.threads_per_worker":
            # threads_per_worker is read at 0 workers: the main process makes a drawn batch on
            # that many threads (models.loader.DataLoaderSim.main_threads)
            out.append(f"{what} changes nothing with loader.num_workers=0: the main thread "
                       "makes each batch, and the field is read only for DataLoader workers")
        elif path == "loader.pin_gbps" and lo.pin_memory and not model.pins_memory():
            out.append(f"{what} changes nothing here: {NO_PINNING}")
        elif path == "loader.pin_gbps" and lo.pin_memory and lo.num_workers == 0:
            out.append(f"{what} changes nothing with loader.num_workers=0: the model prices "
                       "the copy into pinned memory only on the pin-memory thread that serves "
                       "workers")
        elif path == "loader.persistent_workers" and lo.num_workers > 0 and (
                lo.batches_per_epoch is None or lo.worker_startup_us == 0):
            why = ("the model has no epoch boundary (loader.batches_per_epoch is unset)"
                   if lo.batches_per_epoch is None else
                   "the workers' start-up costs nothing in it (loader.worker_startup_us is 0)")
            out.append(f"{what} changes nothing here: {why}, and persistent workers only "
                       "save the workers' start-up at each new epoch")
        elif path == "loader.pin_gbps" and not lo.pin_memory:
            out.append(f"{what} changes nothing here: loader.pin_memory is off, so no batch is "
                       "copied into pinned memory")
        elif path == "loader.pin_memory" and value is True and model.device.tasks() and not any(
                copy_direction(t) == "h2d" for t in after.task_map().values()):
            out.append(f"{what} changes nothing on the device here: the model has no "
                       "host-to-device copies to pin, so it only adds the pin-memory thread's "
                       "copy of each batch")
    return out


def unread_params(model: StepModel) -> dict[str, str]:
    """Path → why nothing in ``model`` reads it, for the uncertain quantities an interval
    could vary (:func:`scenarios.draws.uncertain_params` skips them: a draw of a value nothing
    reads widens nothing): ``loader.pin_gbps`` without pinned memory (or at
    ``num_workers=0``, where the model prices the pinned copy only on the pin-memory thread
    that serves workers), the workers' fields without workers, the collective cost settings
    without collectives, ``host.team_stall`` without an intra-op team
    (:meth:`models.params.StepModel.team_threads` 1: ``γ`` is an exponent on the team's other
    threads, :mod:`models.cpu_place`), and a ``cpu`` op's ``parallel_efficiency`` while it
    runs on the threads it was captured on (:func:`models.plans.threads_ratio` reads it only
    then)."""
    lo = model.loader
    out: dict[str, str] = {}
    if not lo.pin_memory:
        out["loader.pin_gbps"] = "loader.pin_memory is off, so no batch is copied into pinned memory"
    elif not model.pins_memory():
        out["loader.pin_gbps"] = NO_PINNING
    elif lo.num_workers == 0:
        out["loader.pin_gbps"] = ("with loader.num_workers=0 the model prices the copy into "
                                  "pinned memory only on the pin-memory thread that serves "
                                  "workers")
    if lo.num_workers == 0:   # a batch's threads are the main process's too, where past 1
        out.update({p: "read only for DataLoader workers, and loader.num_workers is 0"
                    for p in WORKER_ONLY if p != "loader.threads_per_worker"
                    or lo.threads_per_worker == 1})
    if lo.num_workers > 0 and not model.host.same_thread_ref:
        out["host.same_thread"] = ("the main thread makes no batch here nor in the capture "
                                   "(models.same_thread)")
    if not has_collectives(model):
        out.update({f"comm.{k}": "the model has no collectives"
                    for k in ("latency_us", "bus_gbps", "host_cpu_us", "host_cpu_us_per_mb",
                              "wakeups", "wakeups_per_mb", "wakeup_wait_us")})
    if model.team_threads() <= 1:
        out["host.team_stall"] = ("the step has no intra-op team in the model (no cpu op "
                                  "with a parallel part on more than one thread)")
    for i, op in enumerate(model.host.ops):
        if op.kind == "cpu" and (op.capture_threads in (None, op.threads)
                                 or op.parallel_fraction <= 0):
            out[f"host.ops[{i}].parallel_efficiency"] = (
                "read only when the op's threads differ from the threads it was captured on")
    return out


def unchanged_prediction(what: str, base, pred) -> str | None:
    """The line for a what-if whose simulated steps are the baseline's, exactly (``base`` and
    ``pred``: what each prediction's steps came to, e.g. their count, mean and quantiles; both
    are simulated with the same seed, so an op that changes nothing on the critical path gives
    the same numbers); None when they differ."""
    if tuple(base) != tuple(pred):
        return None
    return (f"{what} {NOTHING} in the prediction: its simulated steps are the baseline's, "
            "exactly (what it changes is off this model's critical path, or nothing in this "
            "model reads it)")
