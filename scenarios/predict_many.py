"""Several predictions of one model at once (``whatif``'s baseline and scenario): each is
:func:`scenarios.predict.predicting`, and their rounds run side by side
(:func:`scenarios.rounds.drive`): the point estimates in one executor call, then every draw of
both in one, so the processes start once a round, the points run beside each other, and the
processes' last chunks wait for each other once instead of once per prediction. With ``steps``
given the draws run in the points' round (they do not depend on the point).

Each prediction is exactly :func:`scenarios.predict.predict`'s with the same arguments: the
same point estimate, the same draw plan and chunks (each draw has its own seeds), the same
interval; errors are raised in the order :func:`predict` would meet them (the first
prediction's point, its draws, then the next prediction's).
"""
from __future__ import annotations

from typing import Sequence

from stepsim.models.params import StepModel
from stepsim.scenarios.predict import Prediction, predicting
from stepsim.scenarios.rounds import drive
from stepsim.scenarios.transforms import Operation

__all__ = ["predict_many"]


def predict_many(model: StepModel, ops_list: Sequence[Sequence[Operation]],
                 steps: int | None = None, warmup: int = 20, seed: int = 0,
                 intervals: bool | int = False, jobs: int = 1) -> list[Prediction]:
    """``[predict(model, ops, steps, warmup, seed, intervals, jobs) for ops in ops_list]``
    with one executor call per round (see the module docstring).

    Raises:
        ModelError: as :func:`scenarios.predict.predict`, the first prediction's first.
    """
    return drive([predicting(model, ops, steps, warmup, seed, intervals, jobs)
                  for ops in ops_list], jobs)
