"""The main thread's own cost of making its batches (``num_workers=0``).

With ``num_workers=0`` (``_SingleProcessDataLoaderIter``) the main thread decodes and collates
each batch, then runs the training step, on the same thread and core. With workers, the batch
is made in another process and handed over in shared memory, and the main thread only trains.
In the demos of 2026-12-06 05:16–05:33 the main thread's batch at 0 workers took 1.006–1.029×
a worker's CPU and its step 1.035–1.064× the 1-worker runs' step: dearer than the co-run
interference the model takes off without co-runners (``HostParams.interference``) says.
Searched for on 2026-12-06 (docs/measurements.md "The main thread's own batches: no heap,
cache or same-thread cost", ``bench/same_thread.py``) and not found: under the capture
harness the 0-worker step re-faulted as much as the 1-worker step (per run medians 6,112
against 6,139 pages) and the batch in ``next()`` none, so glibc's heap is not it (only bare
processes without the harness re-faulted more at 0 workers); in one process with glibc's
thresholds held the step after the main thread's own decode took ×0.993 (0.982–1.009) a step
after a worker's hand-over, one with no decode before it ×1.012, and the batch ×1.009
(0.990–1.036) a worker's: no cache, TLB or same-thread cost. Three captured sets calibrated at
1 worker ran the main thread's work at 0 workers 0.75–0.90× the capture's instead.

The model prices the cost as one factor on the main thread's CPU work (its ``cpu`` host ops
and, at ``num_workers=0``, its batch): ``(1 + same_thread × inline) / (1 + same_thread ×
same_thread_ref)``, ``inline`` 1 at ``num_workers=0`` and 0 with workers, ``same_thread_ref``
the capture's. A replay of the capture's own setting is unchanged; a capture at 0 workers
priced with workers takes the cost off.

Its value: :data:`calibration.same_thread.SAME_THREAD_PRIOR` around
:data:`calibration.same_thread.SAME_THREAD_POINT` (0), or a probe across ``num_workers=0``
(:func:`calibration.same_thread.fit_same_thread`).
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
