"""The straggler what-if's late release after its wait, and the host op it is paid before
(:mod:`scenarios.ddp_whatifs`: the straggler and barrier what-ifs).

After the others waited for a straggler in the last all-reduce, the straggler (the last rank
to enter it) is released late: the harness's barrier probe measured a gloo collective's
release after 40 ms of waiting at 1.26 ms against 0.30 ms after none (15:25 demo's capture;
1.1-2.3 ms in the demos of 2026-12-05/06); 0.91 of 2.00 ms of it the straggler's training
thread runnable on no core, 0.08 ms with no wait (``bench/ddp_held_wake.py``, 2026-12-06),
as the others' threads, asleep for the wait, wake onto the cores. The probe times a barrier;
the same release for the all-reduce that ends the wait is assumed. In five demos of
2026-12-06 (their phase tables, 11:58-15:25) the straggler's time from its last gradient to
its next step was 0.3-1.3 ms over the prediction without it.
"""
from __future__ import annotations

from stepsim.models.param_comm import BARRIER_TASK, barrier_release_us
from stepsim.models.params import StepModel
from stepsim.simcore.errors import NotApplicable

__all__ = ["BARRIER_TASK", "RELEASE_NOTE", "CO_CORE_US", "late_release", "after_wait_op",
           "lag_moved", "noted_release_us", "released_on_one_core"]

CO_CORE_US = 1_940.0
"""µs of wall the released ranks' training threads share one core after a barrier, from the
second one's release (``comm.barrier_co_core_us``, :mod:`models.cpu_co`). Inferred from
``bench/ddp_barrier_cores.py`` (the DDP demo's job, 2 cores, 2026-12-07 05:49, load 1.5-1.8,
the two runs that read the clocks at 2 and 5 points a backward): each training thread's
run-queue wait in the backward after a 40 ms straggler's barrier, less its wait without the
barrier, is half the time they shared a core: 0.76 / 0.24 and 1.18 / 1.54 ms (ranks 0 / 1),
median 0.97, so 1.94 ms. The run that read them at 17 points a backward (its reads cost the
backward 2 ms of CPU) put them on one core 0.63-0.70 of the backward and waited 4.8-6.4 ms
more; the kept demos' own timed runs (not used here: they are the rows the demo scores)
1.76 / 0.51 ms, medians of 30 demos. It varies from run to run (the threads woke on one core
at 0.23-0.70 of the releases)."""

RELEASE_NOTE = "straggler_release_us"
"""``meta.notes`` key: the late release (µs a step) the straggler what-if added to the
resume after the last all-reduce, taken back by a barrier that takes the wait
(:func:`scenarios.ddp_whatifs.insert_barrier`)."""


def late_release(model: StepModel, wait_us: float) -> StepModel:
    """``model`` whose last all-reduce releases the last rank to enter it (the straggler)
    late after the others waited ``wait_us`` for it: the barrier probe's release after that
    wait less its release after none (:func:`models.param_comm.barrier_release_us`, measured;
    nothing without a probe), added to each resume lag of the host's first ``cpu`` op after
    its wait for the collectives (paid by the last rank to enter, as the calibrated lags).
    The probe times a barrier; that an all-reduce after the same wait releases as late is
    assumed (the same mechanism: the others' threads, asleep for the wait, wake onto the
    cores the straggler's hold)."""
    late = barrier_release_us(model.comm, wait_us) - barrier_release_us(model.comm, 0.0)
    j = after_wait_op(model)
    if late <= 0 or j is None:
        return model
    return lag_moved(model, j, late, noted_release_us(model, j) + late)


def released_on_one_core(model: StepModel) -> StepModel:
    """``model`` whose ranks' training threads, released by a barrier, share one core for
    :data:`CO_CORE_US` µs of wall (``comm.barrier_co_core_us``): where the
    harness's barrier probe measured the release (``comm.barrier_exit``: gloo ranks sharing a
    host's cores, whose gloo threads wake the training threads) and no value is set; the
    model as it is elsewhere (nothing measured says where a released thread wakes)."""
    c = model.comm
    if not c.barrier_exit or c.barrier_co_core_us > 0 or CO_CORE_US <= 0:
        return model
    return model.model_copy(update={"comm": c.model_copy(update={
        "barrier_co_core_us": CO_CORE_US})})


def noted_release_us(model: StepModel, j: int | None) -> float:
    """The late release (µs a step) a straggler what-if added to host op ``j``'s resume lags
    (``meta.notes[RELEASE_NOTE]``, a number 0 to ``MAX_DURATION_US``: :data:`models.
    param_meta.NOTE_BOUNDS`); 0 without one.

    Raises:
        NotApplicable: a note past op ``j``'s smallest resume lag (or on a model without that
            op), which the what-if cannot have added: taken back, it would have taken every
            measured lag with it (a note of 1e9 µs did so, silently).
    """
    noted = float(model.meta.notes.get(RELEASE_NOTE) or 0.0)
    lags = (model.host.ops[j].resume_lag_us or [0.0]) if j is not None else [0.0]
    if noted > min(lags) * (1 + 1e-9) + 1e-6:
        raise NotApplicable(f"meta.notes[{RELEASE_NOTE!r}] of {noted:g} µs past the smallest "
                         f"resume lag ({min(lags):g} µs) of the host op it was added to: not "
                         "a straggler what-if's late release")
    return noted


def after_wait_op(model: StepModel) -> int | None:
    """The index of the host's first ``cpu`` op after its last wait for a collective other
    than the barrier; None without one."""
    ops = model.host.ops
    coll = {t.id for t in model.task_map().values() if t.kind == "collective"}
    at = [j for j, op in enumerate(ops) if op.kind == "sync" and op.task in coll
          and op.task != BARRIER_TASK]
    return next((j for j in range(at[-1] + 1, len(ops)) if ops[j].kind == "cpu"), None) \
        if at else None


def lag_moved(model: StepModel, j: int, delta_us: float, noted_us: float) -> StepModel:
    """``model`` with host op ``j``'s resume lags moved by ``delta_us`` (none below 0) and
    ``meta.notes[RELEASE_NOTE]`` set to ``noted_us`` (dropped at 0)."""
    ops = list(model.host.ops)
    lags = [max(v + delta_us, 0.0) for v in ops[j].resume_lag_us or [0.0]]
    # taken back from an op that had none: none again (a lag of 0 would still be drawn)
    ops[j] = ops[j].model_copy(update={"resume_lag_us": None if delta_us < 0 and len(lags) == 1
                                       and lags[0] < 1e-6 else lags})
    notes = dict(model.meta.notes)
    notes.pop(RELEASE_NOTE, None)
    if noted_us > 0:
        notes[RELEASE_NOTE] = noted_us
    return model.model_copy(update={
        "host": model.host.model_copy(update={"ops": ops}),
        "meta": model.meta.model_copy(update={"notes": notes})})
