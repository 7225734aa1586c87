"""The cap on a multi-rank model's lateness: :func:`cap_skew`.

A late rank's lateness at a collective is charged as extra time on that rank
(``RankParams.delay_us``, ``phase_extra_us``); the part of it the reference rank hid behind
its own host work (it kept launching while the collective waited) would otherwise be charged
twice. Calibration measures the lateness (:mod:`calibration.rank_combine`); the cap simulates
the reference rank alone, so it runs here, called by :func:`stepsim.fit.finish`.
"""
from __future__ import annotations

from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate

__all__ = ["cap_skew"]


def cap_skew(model: StepModel, alone: StepModel, ref_step_us: float) -> StepModel:
    """Scale every rank's lateness so the reference rank waits in the model no longer than it
    waited in the trace.

    ``alone``: the model of the reference rank alone (no rank's lateness), as the ranks were
    combined; ``ref_step_us``: its measured median step (µs). The reference's own time without
    skew is ``alone``'s simulated step; its measured step minus that is the waiting budget.
    ``meta.notes`` gets ``reference_alone_step_us`` and ``skew_scale`` (the factor applied,
    1.0 when the lateness fits the budget) unless no rank is late."""
    worst = max((r.delay_us + sum(r.phase_extra_us.values()) for r in model.ranks), default=0.0)
    if worst <= 0:
        return model
    step_alone = simulate(alone, steps=2, warmup=1).median_step_us
    budget = max(0.0, ref_step_us - step_alone)
    model.meta.notes["reference_alone_step_us"] = step_alone
    if worst <= budget:
        model.meta.notes["skew_scale"] = 1.0
        return model
    f = budget / worst
    model.meta.notes["skew_scale"] = f
    ranks = [r.model_copy(update={"delay_us": r.delay_us * f, "phase_extra_us": {
        k: v * f for k, v in r.phase_extra_us.items()}}) for r in model.ranks]
    return model.model_copy(update={"ranks": ranks})
