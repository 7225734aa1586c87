"""What the host's measured run-to-run drift tells a reader (:mod:`models.host_speed`'s
distribution, read for a line of text): the noise one re-measured run of each of two
settings sees (``whatif``'s and ``plan``'s "within this host's run-to-run noise"), and the
interval width that noise alone needs (the demos' "host drift" line). Both read the runs the
interval draws from (:func:`models.host_speed.noise_runs`: a multi-rank CPU job's
``host.wall_runs`` where they spread wider than its ``host.speed_runs``) and say which.
"""
from __future__ import annotations

import math

from stepsim.models.host_speed import (P10_P90, coverage_at_width, from_walls, noise_runs,
                                       pooled_scale, predictive, spread_stats, t_ppf)

__all__ = ["WIDTH_GOAL", "drift_cap", "two_run_noise"]


WIDTH_GOAL = 0.20
"""Issue 10's goal for the median P10–P90 width (relative to the prediction) of the demo's
out-of-sample settings, beside coverage of at least 80 %: what :func:`drift_cap` holds the
host's measured drift against."""


def drift_cap(model, runs: int, width: float = WIDTH_GOAL) -> tuple[str, dict] | None:
    """What the host's measured run-to-run drift allows an interval of the pooled mean of
    ``runs`` re-measured runs, in a sentence and as numbers (:func:`coverage_at_width`): the
    width host noise alone needs for 80 %, and the most an interval of ``width`` can hold.
    The drift is that of the runs the interval draws from (:func:`noise_runs`: a multi-rank
    CPU job's ``host.wall_runs`` where they spread wider than its ``host.speed_runs``; the
    numbers' ``from`` says which). None without two measured runs or a stated range."""
    prior = model.meta.ranges.get("host.cpu_scale")
    if prior is None:
        return None
    speeds = noise_runs(model.host, prior)
    if len(speeds) < 2:
        return None
    walls = from_walls(model.host, speeds)
    needed, held = coverage_at_width(speeds, prior, runs, width)
    _, s, _, _ = spread_stats(speeds)     # within each phase where the point is on one
    n = len(speeds)
    _, _, dof = predictive(speeds, prior, runs)
    nums = {"runs": n, "log_sd": s, "dof": dof, "pooled_runs": runs,
            "from": "host.wall_runs" if walls else "host.speed_runs",
            "needed_width_pct": 100 * needed, "goal_width_pct": 100 * width,
            "coverage_at_goal_width": held}
    what = ("their unprofiled steps' wall time (host.wall_runs: ranks sharing the cores "
            "interleave differently from run to run; wider than their CPU time)" if walls
            else "CPU time of identical work")
    text = (f"host drift: the calibration setting's {n} runs spread log sd {s:.3f} in {what}; "
            f"for the pooled mean of {runs} re-measured run"
            f"{'s' if runs != 1 else ''} host noise alone needs a P10–P90 {100 * needed:.0f} % "
            f"wide to hold 80 % (Student t, {dof:.0f} dof), so a width of {100 * width:.0f} % "
            "(the goal for the demo's median P10–P90 width, beside 80 % coverage) "
            f"holds at most {100 * held:.0f} % of settings (closed form, taking that spread as "
            "the host's)" + ("; coverage ≥ 80 % within that width cannot be had from this host's "
                             "runs: more re-measured runs per setting, more replicates or a "
                             "quieter host can" if needed > width else ""))
    return text, nums


def two_run_noise(model) -> tuple[float, str] | None:
    """The host's run-to-run noise as one re-measured run of each of two settings sees it:
    the P10–P90 half-width (a fraction, ``0.15`` for ±15 %) of the ratio of two new runs'
    speeds, and where it comes from; None when the model states no ``host.cpu_scale`` range.

    Measured (``n ≥ 2`` runs, those the interval draws from, :func:`noise_runs`: a
    multi-rank job's ``host.wall_runs`` where they spread wider than its ``host.speed_runs``):
    the log ratio of two runs is ``sqrt(2) s_p · T(ν0 + n − 1)`` (the module docstring's
    ``s_p``). Prior only: the stated range is of the
    next run against the capture, already the ratio of two runs; its P10–P90 half-width over
    its centre."""
    prior = model.meta.ranges.get("host.cpu_scale")
    if prior is None:
        return None
    lo, hi = float(prior[0]), float(prior[1])
    runs = noise_runs(model.host, (lo, hi))
    if len(runs) >= 2:
        _, scale, dof = predictive(runs, (lo, hi))     # s_p · sqrt(1 + 1/n)
        s_p = scale / pooled_scale(spread_stats(runs)[2], 1)
        half = t_ppf(0.5 + P10_P90 / 2, dof) * math.sqrt(2) * s_p
        return (math.exp(half) - 1,
                f"{len(runs)} measured runs"
                + (" (their wall time, host.wall_runs: wider than their CPU time)"
                   if from_walls(model.host, runs) else "")
                + f" and the stated range {lo:g}–{hi:g}")
    if not 0 < lo <= hi:
        return None
    return P10_P90 * (hi - lo) / (hi + lo), f"the stated range {lo:g}–{hi:g}"
