"""A training step's work inverted from a contended capture, re-inverted at another team stall
``γ`` (``host.team_stall``).

Where the calibration setting's intra-op threads and workers were more than the cores, its
step's work is its wall × ``s^(1 + γ (T − 1))`` (:func:`calibration.cpu.stalled_team_wall`),
``s`` the share of a core each of its ``T`` threads held (``HostParams.team_stall_share``).
That work depends on ``γ``: an interval that draws ``γ`` takes the work at the same ``γ``,
``× s^((γ' − γ)(T − 1))`` (its mean share stands for each step's), so the range moves the
work and the stall together (they cancel at the calibration setting only where the
simulator's stall there is the inversion's form).
"""
from __future__ import annotations

import math

from stepsim.models.param_base import MAX_DURATION_US, ModelError
from stepsim.models.param_types import inverted_threads, reinversion_log
from stepsim.models.params import StepModel

__all__ = ["reinverted"]


def reinverted(model: StepModel, gamma: float) -> StepModel:
    """``model`` with ``host.team_stall`` set to ``gamma`` and each team ``cpu`` op whose work
    was inverted at the old ``γ`` (``parallel_fraction`` > 0 on its captured threads > 1)
    scaled by ``s^((gamma − γ)(T − 1))``; only ``team_stall`` set where
    ``host.team_stall_share`` is None (nothing inverted).

    Raises:
        ModelError: a factor past :data:`MAX_DURATION_US` (a share too small for the γ)."""
    host = model.host
    s = host.team_stall_share
    ops = host.ops
    if s is not None and 0 < s < 1:
        ops = [op.scaled(_factor(s, gamma, host.team_stall, t, i)) if (t := inverted_threads(op))
               else op for i, op in enumerate(ops)]
    return model.model_copy(update={"host": host.model_copy(
        update={"team_stall": gamma, "ops": ops})})


def _factor(share: float, gamma: float, old: float, threads: int, i: int) -> float:
    """``share^((gamma − old)(threads − 1))``, refused where it passes any duration's bound
    (``share^x`` overflowed a double past it, a traceback)."""
    x = reinversion_log(share, gamma - old, threads)
    if x > math.log(MAX_DURATION_US):
        raise ModelError(f"host.ops[{i}]'s work on {threads} threads re-inverted at team stall "
                         f"γ {gamma:g} (from {old:g}, team_stall_share {share:g}) is e^{x:.0f} "
                         f"times its own, past any duration: the share cannot be right")
    return math.exp(x)
