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

import numpy as np

from stepsim.scenarios.draws import draw_means, quantiles
from stepsim.scenarios.stepcount import DRAW_STEPS, SE_TARGET

__all__ = ["QUICK_DRAW_STEPS", "DRAW_SE_SHARE", "POINT_SE_SHARE", "POINT_FIRST_CAP",
           "interval_draws", "point_target", "half_width_us"]

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
    quick = max(accum, QUICK_DRAW_STEPS - QUICK_DRAW_STEPS % accum)
    if chosen and measured_steps is None and each > quick:
        means, errors = draw_means(model, ops, plan, quick, warmup, seed, jobs, progress)
        if float(np.median(errors)) <= DRAW_SE_SHARE * half_width_us(means):
            return means, errors, quick
    means, errors = draw_means(model, ops, plan, each, warmup, seed, jobs, progress,
                               measured_steps=measured_steps)
    return means, errors, each
