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
  of the mean and :data:`POINT_SE_SHARE` of the interval's half-width
  (:func:`point_target`); the point first simulates at most :data:`POINT_FIRST_CAP` steps,
  and more only when that target asks for them (the output names the target and why).

Measured on helper newuser's 2-rank gloo DDP model (steps of two modes, 200–250 ms and
900–1,400 ms; interval 299–1232 ms around 670 ms): the old rule simulated 3,746 point steps
and 16 × 640 draw steps per prediction (about 6.6 ms a simulated step).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from stepsim.models.params import StepModel
from stepsim.scenarios.draws import draw_means, quantiles
from stepsim.scenarios.stepcount import (DRAW_STEPS, SE_TARGET, StepCount, draw_bound,
                                         step_bound)

if TYPE_CHECKING:
    from stepsim.scenarios.predict import Prediction

__all__ = ["QUICK_DRAW_STEPS", "DRAW_SE_SHARE", "POINT_SE_SHARE", "POINT_FIRST_CAP",
           "interval_draws", "first_draw_steps", "quick_stands", "point_target",
           "half_width_us", "point_cap", "draw_steps", "width_point"]

QUICK_DRAW_STEPS = 80
"""Steps each draw simulates first (4 steps in each of the 20 batch means behind its own
standard error)."""
DRAW_SE_SHARE = 0.1
"""A draw's own standard error (median over the draws), as a fraction of the interval's
half-width, at or below which the quick draws stand."""
POINT_SE_SHARE = 0.05
"""The point's standard error sought, as a fraction of the interval's half-width (when that is
more than :data:`scenarios.stepcount.SE_TARGET` of the mean)."""
POINT_FIRST_CAP = DRAW_STEPS
"""Most steps the point simulates before its interval is known (a point that meets
:data:`scenarios.stepcount.SE_TARGET` within it is the one it always was)."""


def half_width_us(means: np.ndarray) -> float:
    """Half of P90 − P10 (µs) of the draws' means (:func:`scenarios.draws.quantiles`)."""
    p10, _, p90 = quantiles(means)
    return (p90 - p10) / 2


def point_target(mean_us: float, half_us: float) -> tuple[float, str]:
    """The point's standard error target (a fraction of ``mean_us``) given the interval's
    half-width ``half_us`` (µs), and why in words (empty: the usual target)."""
    if mean_us <= 0 or POINT_SE_SHARE * half_us <= SE_TARGET * mean_us:
        return SE_TARGET, ""
    return (POINT_SE_SHARE * half_us / mean_us,
            f", {100 * POINT_SE_SHARE:g} % of the interval's half-width")


def interval_draws(model, ops, plan, each: int, warmup: int, seed: int, jobs: int, progress,
                   measured_steps: int | None, chosen: bool, accum: int
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """The draws' means, own standard errors and steps each (see the module docstring);
    ``chosen``: the step count is chosen (else ``each`` is simulated as given); ``accum``:
    the model's ``comm.grad_accum_steps`` (a quick count holds whole optimizer steps).
    A re-measured window (``measured_steps``) keeps the full count: its interval is of that
    many steps' mean."""
    first = first_draw_steps(each, chosen and measured_steps is None, accum)
    if first < each:
        means, errors = draw_means(model, ops, plan, first, warmup, seed, jobs, progress)
        if quick_stands(means, errors):
            return means, errors, first
    means, errors = draw_means(model, ops, plan, each, warmup, seed, jobs, progress,
                               measured_steps=measured_steps)
    return means, errors, each


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


def width_point(point: Prediction, means: np.ndarray, chosen: bool,
                again: Callable[..., Prediction]) -> Prediction:
    """``point`` once its draws' ``means`` are known: where its count was ``chosen`` and
    missed its target, the target taken from the interval's width (:func:`point_target`),
    simulated ``again`` (:func:`scenarios.predict.repoint`'s remaining arguments) where that
    target asks for more steps."""
    count = point.count
    if not chosen or count.met:
        return point
    target, basis = point_target(point.mean_step_us, half_width_us(means))
    return (replace(point, count=replace(count, target=target, basis=basis))
            if count.rel_error <= target else again(target=target, basis=basis))
