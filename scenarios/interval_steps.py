"""How many steps an interval's draws and its point simulate when the caller names none:
no more than the interval needs.

The draws of :mod:`scenarios.predict` already carry the step-to-step spread (each draw's mean
over its own steps), and a mean whose standard error is far below the interval's half-width
moves the interval and the point by far less than the interval's width. So, with the step
count chosen (``steps`` None):

* the draws first simulate :data:`QUICK_DRAW_STEPS` steps each; when the median draw's own
  standard error is at most :data:`DRAW_SE_SHARE` of the interval's half-width
  ((P90 − P10) / 2), those draws are the interval (their own noise adds at most about
  ``DRAW_SE_SHARE² · 1.28² / 2`` ≈ 1 % to the draws' variance: the interval can only widen by
  it, never narrow); otherwise the draws simulate as many steps as before
  (:func:`scenarios.stepcount.draw_bound`), and the quick ones are dropped;
* the point's standard error target is the larger of :data:`scenarios.stepcount.SE_TARGET`
  of the mean and :data:`POINT_SE_SHARE` of the *pilot's* half-width
  (:func:`point_target`); the point first simulates at most :data:`POINT_FIRST_CAP` steps,
  and more only when that target asks for them (the output names the target and why).

The pilot (:func:`pilot_means`) is the interval of one run's mean step with each draw at the
quick count (or at the draws' own count where that is smaller): the draws of ``runs=1`` with
no measured window, whatever interval the caller asks for. So the point is one number for one
model, operations, seed and draw count: ``whatif`` (whose first round of draws is the pilot,
in :func:`scenarios.predict.predict` and :func:`scenarios.predict_many.predict_many` alike),
``validate`` of one run or of several pooled (whose intervals are of the measured steps'
mean, narrower or wider), ``diagnose``, ``plan`` and the ledger all give the same point.
fresh11's HF model gave 1,745.4 ms in ``whatif`` and 1,754.4 / 1,745.9 ms in ``validate`` of
one / two runs for ``num_workers=1`` (2026-12-07): the point's target followed each interval.

Measured on helper newuser's 2-rank gloo DDP model (steps of two modes, 200–250 ms and
900–1,400 ms; interval 299–1232 ms around 670 ms): the old rule simulated 3,746 point steps
and 16 × 640 draw steps per prediction (about 6.6 ms a simulated step).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from stepsim.models.params import StepModel
from stepsim.scenarios.draws import draw_means, draw_plan, quantiles
from stepsim.scenarios.stepcount import (DRAW_STEPS, SE_TARGET, StepCount, draw_bound,
                                         step_bound)

if TYPE_CHECKING:
    from stepsim.scenarios.predict import Prediction

__all__ = ["QUICK_DRAW_STEPS", "DRAW_SE_SHARE", "POINT_SE_SHARE", "POINT_FIRST_CAP",
           "interval_draws", "first_draw_steps", "quick_stands", "pilot_means",
           "point_target", "half_width_us", "point_cap", "draw_steps", "width_point"]

QUICK_DRAW_STEPS = 80
"""Steps each draw simulates first (4 steps in each of the 20 batch means behind its own
standard error)."""
DRAW_SE_SHARE = 0.1
"""A draw's own standard error (median over the draws), as a fraction of the interval's
half-width, at or below which the quick draws stand."""
POINT_SE_SHARE = 0.05
"""The point's standard error sought, as a fraction of one run's interval's half-width (the
pilot's, :func:`pilot_means`; when that is more than :data:`scenarios.stepcount.SE_TARGET` of
the mean)."""
POINT_FIRST_CAP = DRAW_STEPS
"""Most steps the point simulates before its interval is known (a point that meets
:data:`scenarios.stepcount.SE_TARGET` within it is the one it always was)."""


def half_width_us(means: np.ndarray) -> float:
    """Half of P90 − P10 (µs) of the draws' means (:func:`scenarios.draws.quantiles`)."""
    p10, _, p90 = quantiles(means)
    return (p90 - p10) / 2


def point_target(mean_us: float, half_us: float) -> tuple[float, str]:
    """The point's standard error target (a fraction of ``mean_us``) given one run's
    interval's half-width ``half_us`` (µs, the pilot's: see the module docstring), and why in
    words (empty: the usual target)."""
    if mean_us <= 0 or POINT_SE_SHARE * half_us <= SE_TARGET * mean_us:
        return SE_TARGET, ""
    return (POINT_SE_SHARE * half_us / mean_us,
            f", {100 * POINT_SE_SHARE:g} % of one run's interval's half-width")


def interval_draws(model, ops, plan, each: int, warmup: int, seed: int, jobs: int, progress,
                   measured_steps: int | None, chosen: bool, accum: int
                   ) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None]:
    """The draws' means, own standard errors and steps each (see the module docstring), and
    the means of their first round where it was simulated at :func:`first_draw_steps` without
    a measured window (else None: what :func:`pilot_means` reuses when ``plan`` is of one
    run); ``chosen``: the step count is chosen (else ``each`` is simulated as given);
    ``accum``: the model's ``comm.grad_accum_steps`` (a quick count holds whole optimizer
    steps). A re-measured window (``measured_steps``) keeps the full count: its interval is of
    that many steps' mean."""
    first = first_draw_steps(each, chosen and measured_steps is None, accum)
    quick = None
    if first < each:
        means, errors = draw_means(model, ops, plan, first, warmup, seed, jobs, progress)
        if quick_stands(means, errors):
            return means, errors, first, means
        quick = means
    means, errors = draw_means(model, ops, plan, each, warmup, seed, jobs, progress,
                               measured_steps=measured_steps)
    if measured_steps is None and each == first_draw_steps(each, True, accum):
        quick = means   # the draws are no longer than the quick count: their own pilot
    return means, errors, each, quick


def first_draw_steps(each: int, quick: bool, accum: int) -> int:
    """The steps the draws simulate first: :data:`QUICK_DRAW_STEPS` (in whole optimizer steps
    of ``accum``) where a ``quick`` round is allowed and is fewer than ``each``, else
    ``each``."""
    steps = max(accum, QUICK_DRAW_STEPS - QUICK_DRAW_STEPS % accum)
    return steps if quick and each > steps else each


def quick_stands(means: np.ndarray, errors: np.ndarray) -> bool:
    """Whether the quick draws (``means``, own standard ``errors``) are the interval: their
    median own standard error is at most :data:`DRAW_SE_SHARE` of its half-width."""
    return float(np.median(errors)) <= DRAW_SE_SHARE * half_width_us(means)


def pilot_means(model: StepModel, ops, n: int, each: int, warmup: int, seed: int,
                jobs: int, accum: int, runs: int, measured_steps: int | None,
                quick: np.ndarray | None) -> np.ndarray:
    """The pilot's draws' means (µs, see the module docstring): ``n`` draws of one run at
    :func:`first_draw_steps` of ``each`` (the draws' full count); ``quick`` (from
    :func:`interval_draws`) where the interval's own draws were those (``runs`` 1, no
    ``measured_steps``), else simulated here."""
    if quick is not None and runs == 1 and measured_steps is None:
        return quick
    plan = draw_plan(model, n, seed, 1, ops)
    return draw_means(model, ops, plan, first_draw_steps(each, True, accum), warmup, seed,
                      jobs)[0]


def point_cap(final: StepModel, steps: int | None, n: int) -> int | None:
    """The most steps :func:`scenarios.predict.predict`'s point of ``final`` simulates before
    its interval of ``n`` draws is known (None: no cap; see the module docstring)."""
    return None if steps is not None or n <= 0 else min(
        step_bound(final), max(POINT_FIRST_CAP, final.comm.grad_accum_steps))


def draw_steps(model: StepModel, final: StepModel, count: StepCount, steps: int | None,
               n: int) -> int:
    """The steps each of ``n`` draws simulates (before :func:`interval_draws`' quick round):
    the point's ``count``, and where the count is chosen (``steps`` None) at most the draws'
    bound, in whole optimizer steps as the point's count (:mod:`models.stepcount`)."""
    if steps is not None:
        return count.steps
    each = min(count.steps, draw_bound(model, n), draw_bound(final, n))
    k = final.comm.grad_accum_steps
    return min(count.steps, max(k, each - each % k))


def width_point(point: Prediction, pilot: Callable[[], np.ndarray], chosen: bool,
                again: Callable[..., Prediction]) -> Prediction:
    """``point`` once its draws are known: where its count was ``chosen`` and missed its target,
    the target taken from the width of one run's interval (:func:`point_target` of the
    ``pilot``'s means, asked for only then: :func:`pilot_means`), simulated ``again``
    (:func:`scenarios.predict.repoint`'s remaining arguments) where that target asks for more
    steps."""
    count = point.count
    if not chosen or count.met:
        return point
    target, basis = point_target(point.mean_step_us, half_width_us(pilot()))
    return (replace(point, count=replace(count, target=target, basis=basis))
            if count.rel_error <= target else again(target=target, basis=basis))
