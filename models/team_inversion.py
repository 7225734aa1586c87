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

from stepsim.models.params import StepModel

__all__ = ["reinverted"]


def reinverted(model: StepModel, gamma: float) -> StepModel:
    """``model`` with ``host.team_stall`` set to ``gamma`` and each team ``cpu`` op whose work
    was inverted at the old ``γ`` (``parallel_fraction`` > 0 on its captured threads > 1)
    scaled by ``s^((gamma − γ)(T − 1))``; only ``team_stall`` set where
    ``host.team_stall_share`` is None (nothing inverted)."""
    host = model.host
    s = host.team_stall_share
    ops = host.ops
    if s is not None and 0 < s < 1:
        ops = [op.scaled(s ** ((gamma - host.team_stall) * (t - 1)))
               if op.kind == "cpu" and op.parallel_fraction > 0
               and (t := op.capture_threads or op.threads) > 1 else op for op in ops]
    return model.model_copy(update={"host": host.model_copy(
        update={"team_stall": gamma, "ops": ops})})
