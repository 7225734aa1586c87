"""The main thread's own cost of making its batches (``num_workers=0``).

With ``num_workers=0`` (``_SingleProcessDataLoaderIter``) the main thread decodes and collates
each batch, then runs the training step, on the same thread and core. With workers, the batch
is made in another process and handed over in shared memory, and the main thread only trains.
Two things then differ for the main thread's CPU work, beyond the co-runners that
``HostParams.interference`` prices:

* the batch's allocations (decoded images, crops, the stacked batch) come and go from the same
  heap as the step's activations, so glibc hands different blocks back to the kernel and the
  step re-faults a different share of its heap;
* the decode's data evict the step's working set from the core's private caches between two
  steps (and the step's evict the decoder's), where a worker keeps its own core's caches.

Both make the main thread's batch and step dearer per unit of work when it makes the batch
itself. The model prices them as one factor on the main thread's CPU work (its ``cpu`` host ops
and, at ``num_workers=0``, its batch): ``(1 + same_thread × inline) / (1 + same_thread ×
same_thread_ref)``, ``inline`` 1 at ``num_workers=0`` and 0 with workers, ``same_thread_ref``
the capture's. A replay of the capture's own setting is unchanged; a capture at 0 workers
priced with workers takes the cost off.

Measured (``bench/same_thread.py``, docs/measurements.md "The main thread's batch on its own
thread") and in the demos of 2026-12-06: see :data:`calibration.same_thread.SAME_THREAD_PRIOR`.
"""
from __future__ import annotations

from stepsim.models.params import StepModel

__all__ = ["same_thread_factor", "on_main_thread"]


def same_thread_factor(cost: float, inline: bool, ref: float) -> float:
    """The factor on the main thread's CPU work: ``(1 + cost × inline) / (1 + cost × ref)``."""
    return (1 + cost * inline) / (1 + cost * ref)


def on_main_thread(model: StepModel) -> StepModel:
    """``model`` with its main thread's CPU work (every ``cpu`` host op, and the batches'
    produce time, which the main thread pays at ``num_workers=0`` and the workers pay at the
    capture's price with workers) scaled by :func:`same_thread_factor` for its loader's
    ``num_workers``; the model itself where the factor is 1."""
    h = model.host
    f = same_thread_factor(h.same_thread, model.loader.num_workers == 0, h.same_thread_ref)
    if f == 1.0:
        return model
    lo = model.loader
    loader = lo.model_copy(update={
        "produce": lo.produce.scaled(f),
        "produce_by_worker": None if lo.produce_by_worker is None
        else [p.scaled(f) for p in lo.produce_by_worker]})
    host = h.model_copy(update={"ops": [op.scaled(f) if op.kind == "cpu" else op
                                        for op in h.ops]})
    return model.model_copy(update={"loader": loader, "host": host})
