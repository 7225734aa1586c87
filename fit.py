"""Calibration finished: traces to the StepModel that the planner simulates.

Calibration (:mod:`calibration`) fits parameters and never runs the simulator; two steps of
the GPU path simulate the fitted model, so they run here, above both, in the order they had
inside calibration (:mod:`calibration.pending`):

1. the cap on a multi-rank job's lateness (:func:`models.skew_cap.cap_skew`: it simulates the
   reference rank alone);
2. coarsening (:func:`models.coarsen.coarsen`: its probe simulates the model);
3. calibration's steps that read the coarse model (the DDP buckets it infers from the
   launches, the host speed of the runs and replicates);
4. the verb's check of the finished model against its capture, its steady state
   (:func:`steady_beside`: in a forked process while the verb writes the model and replays
   the captured window).

:func:`calibrate` and :func:`calibrate_gpu` are what the API, the CLI, the demos, the
benchmarks and the tests call.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.calibrate import calibrate_pending, records_checked
from stepsim.calibration.capture_ids import CAPTURES_NOTE, calibration_note
from stepsim.calibration.gpu import calibrate_gpu_pending
from stepsim.calibration.pending import Pending
from stepsim.models.coarsen import coarsen
from stepsim.models.params import StepModel
from stepsim.models.skew_cap import cap_skew
from stepsim.models.warning_record import settled
from stepsim.simcore.gcpause import gc_paused

__all__ = ["calibrate", "calibrate_gpu", "finish", "steady_beside", "STEADY_BESIDE_WORK"]

STEADY_BESIDE_WORK = 2_000
"""The fewest host ops and device tasks a calibrated model's step simulates
(:func:`models.sim_work.step_work`) for :func:`steady_beside` to run its steady state in a
forked process. Measured on the 54 MB trace (2026-12-07): its coarse model's 5,102 took a
steady state of 60-70 ms of CPU, where the fork of the calibrating process (about 250 MB)
and the two numbers sent back cost about 10 ms."""


def finish(pending: Pending) -> StepModel:
    """The model of ``pending``: its lateness capped (when it has ranks to cap), coarsened
    (when ``pending.coarse``), then calibration's steps after those; its warnings' records
    settled (:func:`models.warning_record.settled`)."""
    model = pending.model
    if pending.skew is not None:
        model = cap_skew(model, pending.skew.alone, pending.skew.ref_step_us)
    if pending.coarse:
        model = coarsen(model)
    for step in pending.after:
        model = step(model)
    return settled(model)    # the warnings' records into meta.warnings_ranked


@gc_paused
def calibrate(trace: str | Path, sidecar: str | Path | None = None,
              step_regex: str | None = None, replicates=(),
              steps: tuple[int | None, int | None] | None = None) -> StepModel:
    """The StepModel of ``trace`` (a trace file, a folder of per-rank traces, or a capture
    folder), as :func:`calibration.calibrate.calibrate_pending` reads its arguments, finished
    (:func:`finish`): coarse for a GPU trace.

    The model's ``meta.notes`` name the captures it was calibrated on where each names an id
    (:func:`calibration.capture_ids.calibration_note`).

    Raises:
        InputError / StepsimError: as :func:`calibration.calibrate.calibrate_pending`; a
            parameter past its bounds in a finishing step names the sidecar, else the trace.
    """
    pending = calibrate_pending(trace, sidecar=sidecar, step_regex=step_regex,
                               replicates=replicates, steps=steps)
    with records_checked(trace, sidecar):
        model = finish(pending)
    # the captures it was calibrated on, so validate tells a replay of them from a fresh run
    # (calibration.capture_ids): here, so the CLI, the API and both demos record them alike
    ids = calibration_note(trace, sidecar, replicates)
    if not ids:
        return model
    return model.model_copy(update={"meta": model.meta.model_copy(update={"notes": {
        **model.meta.notes, CAPTURES_NOTE: ids}})})


def calibrate_gpu(paths, step_regex: str | None = None, coarse: bool = True) -> StepModel:
    """The StepModel of a GPU trace file or a folder of per-rank trace files
    (:func:`calibration.gpu.calibrate_gpu_pending`), its lateness capped; ``coarse``: coarsened
    (default: it replays the same step with far fewer tasks, which is what the planner's many
    simulations need), False for the fine, kernel-level model."""
    pending = calibrate_gpu_pending(paths, step_regex=step_regex)
    return finish(Pending(pending.model, skew=pending.skew, coarse=coarse, after=pending.after))


def _steady_state(item: tuple) -> tuple[float, float]:
    """(mean, median) simulated step (µs) of ``item`` = (model, steps, warm-up): the model's
    steady state at its capture's speed, seed 0."""
    from stepsim.models.host_speed import at_capture_speed
    from stepsim.models.stepcount import simulate_counted

    model, steps, warmup = item
    res, _ = simulate_counted(at_capture_speed(model), steps, warmup, 0, keep="steps")
    return res.mean_step_us, res.median_step_us


def steady_beside(model: StepModel, steps: int | None, warmup: int, here):
    """``((mean_us, median_us), here())``: the steady state of the calibrated ``model``
    (``steps`` steps, None: as many as pin its mean, after ``warmup``; seed 0) checked
    against its own capture (at the capture's speed: replicates move
    ``host.cpu_scale`` to the runs' mean, for predictions of the next run), in a forked
    process (:func:`calibration.rank_pool.beside`) while ``here()`` runs in this one, where
    its step simulates :data:`STEADY_BESIDE_WORK` ops and tasks or more; else one after the
    other, ``here()`` first. Errors: ``here()``'s first, then the steady state's.

    Raises:
        SimulationError: a model that cannot run (as :func:`models.simulate.simulate`).
    """
    from stepsim.calibration.rank_pool import beside, raised
    from stepsim.models.sim_work import step_work

    item = (model, steps, warmup)
    if step_work(model) < STEADY_BESIDE_WORK:
        done = here()
        return _steady_state(item), done
    steady, done = beside(_steady_state, item, here)
    return raised(steady), done
