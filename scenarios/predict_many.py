"""Several predictions of one model at once (``whatif``'s baseline and scenario): every point
estimate and every chunk of draws goes to one executor call, so the processes start once, the
point estimates run beside the draws, and the processes' last chunks wait for each other once
instead of once per prediction.

Each prediction is exactly :func:`scenarios.predict.predict`'s with the same arguments: the
same point estimate, the same draw plan and chunks (each draw has its own seeds), the same
interval; errors are raised in the order :func:`predict` would meet them (the first
prediction's point, its draws, then the next prediction's).

Where the draws' step count depends on the point estimate (``steps`` None, the verbs'
default) there are two executor calls: every point first, then every prediction's first
round of draws (:func:`scenarios.interval_steps.first_draw_steps`), their plans made in
this process while the points run (the host-speed quantiles' scipy import among them); a
prediction whose quick round does not stand, or whose point is simulated again for the
interval's width, does that after, one by one, as :func:`predict` does. That first round is
one run's draws at the quick count, so it is the point's pilot
(:func:`scenarios.interval_steps.pilot_means`): nothing more is simulated for it. Chunks go
to the executor costliest first (:func:`models.sim_work.step_cost_us` × steps × draws), so the
processes finish together; their results keep their order.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Sequence

from stepsim.models.params import StepModel
from stepsim.models.sim_work import step_cost_us
from stepsim.scenarios.draws import (_draw_chunk, draw_chunks, draw_means, draw_plan,
                                     draw_results, uncertain_params)
from stepsim.scenarios.interval_steps import (draw_steps, first_draw_steps, point_cap,
                                              quick_stands, width_point)
from stepsim.scenarios.parallel import run_many
from stepsim.scenarios.predict import (DEFAULT_DRAWS, Prediction, counted_summary, drawn,
                                       point_prediction, repoint, undrawn, with_interval)
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
    with one executor call, two where the step count is chosen (see the module docstring).

    Raises:
        ModelError: as :func:`scenarios.predict.predict`, the first prediction's first.
    """
    n = DEFAULT_DRAWS if intervals is True else int(intervals or 0)
    finals = [apply_ops(model, ops) for ops in ops_list]
    if steps is None:
        return _chosen(model, ops_list, finals, warmup, seed, n, jobs)
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


@dataclass
class _Chosen:
    """One prediction of :func:`_chosen` between its executor calls."""

    ops: Sequence[Operation]
    final: StepModel
    point: Prediction
    plan: list | None = None   # None: no draws
    each: int = 0              # steps a draw simulates when the quick round does not stand
    first: int = 0             # steps of the first round
    results: list | None = None


def _chosen(model: StepModel, ops_list: Sequence[Sequence[Operation]],
            finals: list[StepModel], warmup: int, seed: int, n: int, jobs: int
            ) -> list[Prediction]:
    """:func:`predict_many` with the step count chosen (see the module docstring)."""
    caps = [point_cap(final, None, n) for final in finals]
    plans: list = []

    def plan_all() -> None:   # while the points run: the plans do not depend on them
        for ops, final in zip(ops_list, finals):
            try:
                plans.append(draw_plan(model, n, seed, 1, ops) if n > 0 and drawn(
                    model, final, uncertain_params(model, ops, after=final)[0]) else None)
            except StepsimError as e:   # raised where predict would meet it, if it does
                plans.append(_Raised(e))

    points = run_many(_work, [("point", (final, None, warmup, seed, False, cap))
                              for final, cap in zip(finals, caps)], jobs=jobs,
                      meanwhile=plan_all)
    ready: list[_Chosen] = []
    stop: StepsimError | None = None
    for ops, final, result, plan in zip(ops_list, finals, points, plans):
        try:   # what predict meets before its draws, in its order
            s, count = _got(result)
            one = _Chosen(ops, final, point_prediction(model, ops, final, s, count, warmup,
                                                       seed))
            if n > 0 and drawn(model, final, one.point.uncertain):
                one.each = draw_steps(model, final, count, None, n)
                one.first = first_draw_steps(one.each, True, final.comm.grad_accum_steps)
                one.plan = _got(plan)
        except StepsimError as e:   # raised once the predictions before it are done
            stop = e
            break
        ready.append(one)
    items: list[tuple[float, int, Any]] = []
    for k, one in enumerate(ready):
        if one.plan is not None:
            cost = step_cost_us(one.final) * (one.first + warmup)
            items += [(-cost * len(c[2]), k, ("draws", c)) for c in
                      draw_chunks(model, one.ops, one.plan, one.first, warmup, seed, jobs)]
    order = sorted(range(len(items)), key=lambda i: items[i][0])   # stable: costliest first
    done = run_many(_work, [items[i][2] for i in order], jobs=jobs)
    for one in ready:
        one.results = []
    for i, result in zip(order, done):
        ready[items[i][1]].results.append((i, result))
    out = [_finish(model, one, warmup, seed, n, jobs) for one in ready]
    if stop is not None:
        raise stop
    return out


def _finish(model: StepModel, one: _Chosen, warmup: int, seed: int, n: int,
            jobs: int) -> Prediction:
    """One prediction of :func:`_chosen` from its point and first round of draws."""
    again = partial(repoint, model, one.ops, one.final, warmup, seed)
    point, count = one.point, one.point.count
    if n <= 0:
        return point
    if one.plan is None:
        return undrawn(point if count.met else again())
    parts = [_got(r) for _, r in sorted(one.results, key=lambda ir: ir[0])]
    means, errors = draw_results(parts, one.plan, one.first)
    pilot, each = means, one.first   # one run's first round: the point's pilot
    if one.first < one.each and not quick_stands(means, errors):
        means, errors = draw_means(model, one.ops, one.plan, one.each, warmup, seed, jobs)
        each = one.each
    return with_interval(width_point(point, lambda: pilot, True, again), means, errors, n,
                         each)
