"""Several predictions of one model at once (``whatif``'s baseline and scenario): every point
estimate and every chunk of draws goes to one executor call, so the processes start once, the
point estimates run beside the draws, and the processes' last chunks wait for each other once
instead of once per prediction.

Each prediction is exactly :func:`scenarios.predict.predict`'s with the same arguments: the
same point estimate, the same draw plan and chunks (each draw has its own seeds), the same
interval; errors are raised in the order :func:`predict` would meet them (the first
prediction's point, its draws, then the next prediction's). Where the draws' step count
depends on the point estimate (``steps`` None) the predictions are made one after the other.
"""
from __future__ import annotations

from typing import Sequence

from stepsim.models.params import StepModel
from stepsim.scenarios.draws import (_draw_chunk, draw_chunks, draw_plan, draw_results,
                                     uncertain_params)
from stepsim.scenarios.parallel import run_many
from stepsim.scenarios.predict import (DEFAULT_DRAWS, Prediction, counted_summary, drawn,
                                       point_prediction, predict, undrawn, with_interval)
from stepsim.scenarios.transforms import Operation, apply_ops
from stepsim.simcore.errors import StepsimError

__all__ = ["predict_many"]


class _Raised:
    """A work item's error, raised again where :func:`predict` would have met it."""

    def __init__(self, error: StepsimError):
        self.error = error


def _work(item):
    """A point estimate (``counted_summary``'s arguments) or a chunk of draws."""
    kind, args = item
    try:
        return counted_summary(*args) if kind == "point" else _draw_chunk(args)
    except StepsimError as e:
        return _Raised(e)


def _got(result):
    if isinstance(result, _Raised):
        raise result.error
    return result


def predict_many(model: StepModel, ops_list: Sequence[Sequence[Operation]],
                 steps: int | None = None, warmup: int = 20, seed: int = 0,
                 intervals: bool | int = False, jobs: int = 1) -> list[Prediction]:
    """``[predict(model, ops, steps, warmup, seed, intervals, jobs) for ops in ops_list]``
    with one executor call (see the module docstring).

    Raises:
        ModelError: as :func:`scenarios.predict.predict`, the first prediction's first.
    """
    kw = {"steps": steps, "warmup": warmup, "seed": seed, "intervals": intervals, "jobs": jobs}
    if steps is None:
        return [predict(model, ops, **kw) for ops in ops_list]
    n = DEFAULT_DRAWS if intervals is True else int(intervals or 0)
    finals = [apply_ops(model, ops) for ops in ops_list]
    items: list = [("point", (final, steps, warmup, seed)) for final in finals]
    plans: list = []
    for ops, final in zip(ops_list, finals):
        if n <= 0 or not drawn(model, final, uncertain_params(model, ops, after=final)[0]):
            plans.append(None)
            continue
        plan = draw_plan(model, n, seed, 1, ops)
        chunks = draw_chunks(model, ops, plan, steps, warmup, seed, jobs)
        plans.append((plan, len(items), len(items) + len(chunks)))
        items += [("draws", c) for c in chunks]
    results = run_many(_work, items, jobs=jobs)
    out = []
    for k, (ops, final) in enumerate(zip(ops_list, finals)):
        s, count = _got(results[k])
        point = point_prediction(model, ops, final, s, count, warmup, seed)
        if n <= 0:
            out.append(point)
        elif plans[k] is None:   # nothing uncertain, nothing sampled: the point
            out.append(undrawn(point))
        else:
            plan, a, b = plans[k]
            means, errors = draw_results([_got(r) for r in results[a:b]], plan, steps)
            out.append(with_interval(point, means, errors, n, count.steps))
    return out
