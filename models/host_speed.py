"""The host's run-to-run speed as a distribution: what a prediction interval draws for
``host.cpu_scale``.

On a shared or virtual machine identical CPU work takes a different time from one run to the
next. The factor is one per **run** (the whole run is slower or faster), so it does not
average away over a run's steps; a quantity pooled over ``k`` runs (a re-measured setting
recorded twice) averages ``k`` of them.

*Measured* (``HostParams.speed_runs``: the speed factors of ``n ≥ 2`` runs of one setting,
the calibration capture's first, 1.0): with ``c`` and ``s`` the mean and sample standard
deviation of their logs, and log speeds normal with unknown mean and variance, the log speed
of the pooled mean of ``k`` new runs relative to ``exp(c)`` (the model's ``cpu_scale``) is

    s · sqrt(1/k + 1/n) · T(n − 1)

(Student's t with n − 1 degrees of freedom: the exact predictive distribution, so its
P10–P90 holds the next runs' speed in 80 % of experiments whatever the true mean and
variance; ``1/n`` is the uncertainty of ``c``, ``1/k`` the new runs' own). The pooled mean of
``k`` runs averages their speeds arithmetically, the formula their logs: the difference is of
order ``s²/2`` (under 1 % for ``s`` below 0.14).

*Prior* (only the capture: ``speed_runs`` empty): a stated uniform factor range for the next
run relative to the capture (``meta.ranges['host.cpu_scale']``). The capture's own deviation
and the new run's are alike, so the prior's spread is ``sqrt(2)`` of one run's; for the pooled
mean of ``k`` runs it shrinks by ``sqrt((1 + 1/k) / 2)`` around 1.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

P10_P90 = 0.8
"""Probability inside a P10–P90 interval."""


def log_stats(speeds: Sequence[float]) -> tuple[float, float, int]:
    """``(c, s, n)``: mean and sample standard deviation (ddof 1) of the log speeds, and their
    number (``n ≥ 2``)."""
    logs = np.log(np.asarray(speeds, dtype=float))
    return float(logs.mean()), float(logs.std(ddof=1)), len(logs)


def pooled_scale(n: int, runs: int) -> float:
    """``sqrt(1/k + 1/n)``: the predictive spread of the pooled mean log speed of ``runs`` new
    runs, per unit of the runs' standard deviation, after ``n`` measured ones."""
    return math.sqrt(1 / max(runs, 1) + 1 / n)


def speed_interval(speeds: Sequence[float], runs: int = 1) -> tuple[float, float, float]:
    """``(centre, P10, P90)`` of the pooled host speed factor of ``runs`` new runs, from the
    measured factors ``speeds`` of ``n ≥ 2`` runs (see the module docstring)."""
    from scipy.stats import t as student_t

    c, s, n = log_stats(speeds)
    half = float(student_t.ppf(0.5 + P10_P90 / 2, n - 1)) * s * pooled_scale(n, runs)
    return math.exp(c), math.exp(c - half), math.exp(c + half)


def prior_shrink(runs: int) -> float:
    """How much the prior's spread (the next run against the capture) shrinks for the pooled
    mean of ``runs`` runs: ``sqrt((1 + 1/k) / 2)``."""
    return math.sqrt((1 + 1 / max(runs, 1)) / 2)


def draw_factor(speeds: Sequence[float], prior: tuple[float, float], runs: int,
                rng: np.random.Generator, error_log: float = 0.0) -> float:
    """One draw of the host speed factor (relative to the model's ``cpu_scale``) of the
    pooled mean of ``runs`` new runs: from the measured ``speeds`` when there are two or more,
    else uniform over the ``prior`` range (shrunk for ``runs`` > 1); times the calibration's
    own error ``exp(U(−error_log, error_log))`` (``HostParams.cpu_scale_error_log``; the same
    for every run, so not shrunk), when it is not 0. Takes one number from ``rng``, two with
    an error."""
    if len(speeds) >= 2:
        _, s, n = log_stats(speeds)
        t = float(rng.standard_t(n - 1))
        f = math.exp(s * pooled_scale(n, runs) * t)
    else:
        u = float(rng.uniform(*prior))
        f = u if runs <= 1 else 1 + (u - 1) * prior_shrink(runs)
    if error_log > 0:
        f *= math.exp(float(rng.uniform(-error_log, error_log)))
    return f


def factor_range(speeds: Sequence[float], prior: tuple[float, float], runs: int
                 ) -> tuple[float, float]:
    """What :func:`draw_factor` draws, in words of a range: the P10–P90 (relative to the
    centre) of the measured distribution, else the (shrunk) prior's support."""
    if len(speeds) >= 2:
        centre, p10, p90 = speed_interval(speeds, runs)
        return p10 / centre, p90 / centre
    k = prior_shrink(runs) if runs > 1 else 1.0
    return 1 + (prior[0] - 1) * k, 1 + (prior[1] - 1) * k


def at_capture_speed(model):
    """``model`` (a :class:`models.params.StepModel`) at the speed of the run it was
    calibrated from: ``host.cpu_scale`` set to the capture's own factor (``speed_runs[0]``,
    1.0 by construction), which is how a replay is checked against that run's measured steps.
    Replicates move ``cpu_scale`` to the mean speed of all the runs (what a prediction of the
    next run takes) and widen the intervals; the capture's own steps ran at its own speed.
    Unchanged without measured runs."""
    runs = model.host.speed_runs
    if not runs or runs[0] == model.host.cpu_scale:
        return model
    return model.model_copy(update={"host": model.host.model_copy(
        update={"cpu_scale": float(runs[0])})})


LOAD_WARN = 0.10
"""Slowdown ``1 / held − 1`` of a capture's own threads by other load above which calibration
warns (:mod:`calibration.outside_load`; ``meta.notes.outside_load_held``) and every what-if
of its model repeats it: the tolerance calibration's replay check uses for the mean step
(``REPLAY_WARN``)."""


def outside_load_slowdown(model) -> float | None:
    """``1 / held − 1`` of the capture ``model`` was calibrated from, when calibration found
    it ran under outside load past :data:`LOAD_WARN`; else None."""
    held = model.meta.notes.get("outside_load_held")
    if isinstance(held, (int, float)) and 0 < held and 1 / held - 1 > LOAD_WARN:
        return 1 / held - 1
    return None
