"""The pooled mean of ``k`` new runs of a per-run share measured over ``n`` runs: its Student-t
predictive distribution, drawn by prediction intervals.

``host.refault_share`` (the share of its re-faulted memory a run's training step pays,
:mod:`calibration.refault_runs`) is set by each process's heap, so each run draws its own. It
is measured over the calibration setting's runs, ``x_1 … x_n`` (``host.refault_share_runs``),
and a validation scores the pooled mean of ``k`` re-measured runs of another setting. That
mean differs from the measured runs' mean ``x̄`` by the new runs' own scatter (variance
``σ²/k``) *and* by ``x̄``'s sampling error (``σ²/n``); with ``σ`` estimated by the runs' sample
sd ``s``, the standard predictive is

    x̄ + s · √(1/k + 1/n) · T(n − 1)                                   (cut to 0–1)

(Student's t with ``n − 1`` dof). Its P10–P90 is ``x̄ ± t₀.₉(n − 1) · s · √(1/k + 1/n)``
(before the cut): 0 wide when the runs agree, growing in proportion to their spread, and not
shrinking to 0 as ``k`` grows (the measured mean's own error stays). The uniform range
``x̄ ± √3 s`` averaged over ``k`` draws that intervals used before held the first term only:
on 2026-12-07's probe demo (``main20-probe-103954``) the 8 calibration runs re-faulted
0.48, 0.42, 0.29, 0.49, 0.03, 0.44, 0.42, 0.03 of the capture's most (two processes whose
heaps gave nothing back), mean 0.33, while its 2-, 4- and 8-worker runs' pooled means were
0.48, 0.46 and 0.40 (docs/measurements.md "zero21"): the measured mean was low by more than
the new runs' scatter.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from stepsim.models.host_speed import t_ppf

__all__ = ["MIN_SHARE_RUNS", "share_predictive", "share_p10_p90", "draw_share"]

MIN_SHARE_RUNS = 2
"""Fewest measured runs with which the predictive is used (a sample sd needs 2); with fewer
intervals draw the stated uniform range."""


def share_predictive(shares: Sequence[float], runs: int = 1) -> tuple[float, float, float]:
    """``(centre, scale, dof)``: the pooled mean of ``runs`` new runs is ``centre + scale ·
    T(dof)`` (cut to 0–1 where drawn), from the measured per-run ``shares`` (at least
    :data:`MIN_SHARE_RUNS`; see the module docstring).

    Raises:
        ValueError: fewer than :data:`MIN_SHARE_RUNS` shares, or ``runs`` < 1.
    """
    x = np.asarray(shares, dtype=float)
    n = x.size
    if n < MIN_SHARE_RUNS:
        raise ValueError(f"share_predictive: {n} run(s), at least {MIN_SHARE_RUNS} needed")
    if runs < 1:
        raise ValueError(f"share_predictive: runs must be >= 1, got {runs}")
    s = float(x.std(ddof=1))
    return float(x.mean()), s * math.sqrt(1 / runs + 1 / n), float(n - 1)


def share_p10_p90(shares: Sequence[float], runs: int = 1) -> tuple[float, float]:
    """The predictive's P10–P90 in closed form, cut to 0–1 (the cut moves no quantile that
    lies inside 0–1)."""
    c, scale, dof = share_predictive(shares, runs)
    half = t_ppf(0.9, dof) * scale
    return max(c - half, 0.0), min(c + half, 1.0)


def draw_share(shares: Sequence[float], runs: int, rng: np.random.Generator) -> float:
    """One draw of the pooled mean of ``runs`` new runs' shares (see the module docstring)."""
    c, scale, dof = share_predictive(shares, runs)
    return float(min(max(c + scale * rng.standard_t(dof), 0.0), 1.0))
