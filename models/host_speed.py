"""The host's run-to-run speed as a distribution: what a prediction interval draws for
``host.cpu_scale``.

On a shared or virtual machine identical CPU work takes a different time from one run to the
next. The factor is one per **run** (the whole run is slower or faster), so it does not
average away over a run's steps; a quantity pooled over ``k`` runs (a re-measured setting
recorded twice) averages ``k`` of them.

*Prior* (only the capture: ``speed_runs`` empty): a stated uniform factor range for the next
run relative to the capture (``meta.ranges['host.cpu_scale']``, :data:`HOST_NOISE_PRIOR` from
every calibration). The capture's own deviation and the new run's are alike, so the prior's
spread is ``sqrt(2)`` of one run's; for the pooled mean of ``k`` runs it shrinks by
``sqrt((1 + 1/k) / 2)`` around 1.

*Measured* (``HostParams.speed_runs``: the speed factors of ``n ≥ 2`` runs of one setting,
the calibration capture's first, 1.0): log speeds normal with unknown mean and unknown variance
``σ²``. With ``c`` and ``s`` the mean and sample standard deviation (ddof 1) of the runs'
logs, the log speed of the pooled mean of ``k`` new runs relative to ``exp(c)`` (the model's
``cpu_scale``) is

    s · sqrt(1/k + 1/n) · T(n − 1)

(Student's t; ``1/n`` is the uncertainty of ``c``, ``1/k`` the new runs' own), whose P10–P90
holds the next runs' pooled speed in exactly 80 % of experiments on **any** such host, quiet
or noisy: it uses only what the runs measure. The stated range enters as a floor, never to
narrow a measured spread: read as a scaled-inverse-χ² prior on ``σ²`` with ``ν0``
(:data:`PRIOR_DOF`) pseudo degrees of freedom and scale ``s0`` (:func:`prior_log_sd`: the
one-run log sd whose normal difference of two runs has the range's P10–P90), the posterior
predictive is

    s_p · sqrt(1/k + 1/n) · T(ν0 + n − 1),  s_p² = (ν0 s0² + (n − 1) s²) / (ν0 + n − 1)

and :func:`predictive` takes whichever of the two has the wider P10–P90. At ``n = 2`` it
is always the pooled one (the runs' own t has 1 dof, a Cauchy: speeds 1.0 and 2.0 had a
P10–P90 of 0.158–6.34× the centre and single draws of 1e-6 to 5e13×); from ``n = 3`` the
runs' own wherever their spread is wider than the range's (three runs that agree to the µs
keep the range's spread, they do not prove a noiseless host). Before (the pooled predictive
alone), a host noisier than the range was under-covered until its runs outweighed the two
pseudo-runs: log sd 0.1, as this project's 2-core machine measures (0.095 over the
calibration setting's 50 runs in 10 demos, 40 dof; ``bench/demo_drift.py``), gave 56 % at
n = 2, 64 % at 3, 71 % at 5 and 78 % at 20; now 56 % at 2 and 80 % from 3. With a width goal, the coverage a host's drift
allows is :func:`coverage_at_width` (in words, :func:`models.host_drift.drift_cap`). The
pooled mean of ``k`` runs averages their speeds arithmetically, the formula their logs:
the difference is of order ``s²/2`` (under 1 % for ``s`` below 0.14).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from stepsim.simcore.errors import ModelError

P10_P90 = 0.8
"""Probability inside a P10–P90 interval."""

HOST_NOISE_PRIOR = (0.94, 1.06)
"""Stated prior range of the host's speed from one run to the next (``host.cpu_scale``): one
capture cannot measure it. Repeated runs of the demo on a shared 2-core machine differ by 5–15 %
in mean step time (issue 10); a uniform draw over ±6 % has a P10–P90 of about ±5 %."""

OWN_SPREAD_RUNS = 3
"""Fewest runs (capture and replicates) whose own spread (``n − 1`` dof) :func:`predictive`
takes alone: two runs' t has 1 dof, a Cauchy."""

PRIOR_DOF = 2
"""``ν0``, assumed: the stated prior range counts as this many degrees of freedom of
run-to-run variance beside the measured runs' ``n − 1``. Two is the fewest whole pseudo-runs
for which one replicate (``n = 2``) gives a predictive t with a finite variance (``ν0 + 1 =
3 > 2`` dof: with speeds 1.0 and 2.0 the smallest of 8 draws, which is their P10, falls
below 0.01× the centre in 0.4 % of predictions, at 2 dof in 3.3 %); more would let a range
stated for another machine (issue 10's) outweigh this host's own runs for longer (with 2,
three runs weigh as much as the range, and every further run more)."""


def log_stats(speeds: Sequence[float]) -> tuple[float, float, int]:
    """``(c, s, n)``: mean and sample standard deviation (ddof 1) of the log speeds, and their
    number (``n ≥ 2``)."""
    logs = np.log(np.asarray(speeds, dtype=float))
    return float(logs.mean()), float(logs.std(ddof=1)), len(logs)


class CentredRuns(list):
    """Run factors (a list, as :func:`noise_runs` gives) whose point is the mean of ``centre``
    runs of their own phase, not of them all: the DDP demo's point on its timed phase
    (:mod:`demo.ddp_level`, issue 12: the profiled runs and the timed rounds differ by an
    offset of their own). ``grouped``: those runs are the last ``centre`` of these (the
    others before them, of the other phase), so the spread is pooled within the two phases
    (``n − 2`` dof; their offset is no noise); else they are not among these, whose spread
    (``n − 1`` dof) stands for theirs. Either way the predictive's ``1/n`` is ``1/centre``:
    the point is as sure as the mean of those runs."""

    def __init__(self, runs: Sequence[float], centre: int, grouped: bool):
        super().__init__(runs)
        self.centre, self.grouped = int(centre), bool(grouped)


def spread_stats(speeds: Sequence[float]) -> tuple[float, float, int, int]:
    """``(c, s, m, dof)``: the centre's mean log speed, the runs' log sd, how many runs the
    centre is the mean of and the sd's degrees of freedom: :func:`log_stats`'s ``(c, s, n,
    n − 1)`` for plain runs; for :class:`CentredRuns` the mean of the centre's runs (grouped;
    else of all), the sd pooled within the two phases (grouped: ``n − 2`` dof) and ``m`` its
    ``centre``."""
    c, s, n = log_stats(speeds)
    centre = getattr(speeds, "centre", 0)
    if not 0 < centre:
        return c, s, n, n - 1
    if not (getattr(speeds, "grouped", False) and centre < n):
        return c, s, centre, n - 1
    logs = np.log(np.asarray(speeds, dtype=float))
    a, b = logs[:-centre], logs[-centre:]
    dof = n - 2
    ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
    return float(b.mean()), math.sqrt(ss / dof) if dof > 0 else 0.0, centre, dof


def pooled_scale(n: int, runs: int) -> float:
    """``sqrt(1/k + 1/n)``: the predictive spread of the pooled mean log speed of ``runs`` new
    runs, per unit of the runs' standard deviation, after ``n`` measured ones."""
    return math.sqrt(1 / max(runs, 1) + 1 / n)


def prior_log_sd(prior: tuple[float, float]) -> float:
    """``s0``: the one-run log-speed standard deviation the stated uniform ``prior`` range (of
    the next run against the capture) implies: half the range's P10–P90 in log space is
    ``z90 · sqrt(2) · s0`` (the difference of two runs, each of sd ``s0``).

    Raises:
        ModelError: a range whose low end is not above 0 (no log spread).
    """
    lo, hi = float(prior[0]), float(prior[1])
    if not 0 < lo <= hi:
        raise ModelError(f"meta.ranges['host.cpu_scale'] is ({lo}, {hi}): beside measured "
                         "host.speed_runs it must be a speed range with 0 < low <= high")
    from scipy.special import ndtri   # scipy.stats.norm.ppf's own function, 0.5 s less import

    p10, p90 = lo + 0.1 * (hi - lo), lo + 0.9 * (hi - lo)
    return math.log(p90 / p10) / 2 / (float(ndtri(0.5 + P10_P90 / 2)) * math.sqrt(2))


def t_ppf(p: float, dof: float) -> float:
    """Student's t quantile at probability ``p`` with ``dof`` degrees of freedom:
    ``scipy.special.stdtrit``, the function ``scipy.stats.t.ppf`` calls (same values;
    ``scipy.stats``' import costs every verb that draws an interval 0.5 s more)."""
    from scipy.special import stdtrit

    return float(stdtrit(dof, p))


def predictive(speeds: Sequence[float], prior: tuple[float, float], runs: int = 1
               ) -> tuple[float, float, float]:
    """``(c, scale, dof)``: the predictive log speed of the pooled mean of ``runs`` new runs
    is ``c + scale · T(dof)``, from the measured factors ``speeds`` of ``n ≥ 2`` runs and the
    stated ``prior`` range: the runs' own t (``n − 1`` dof) from :data:`OWN_SPREAD_RUNS` runs
    where its P10–P90 is the wider, else the spread pooled with the range (``ν0 + n − 1``
    dof; the module docstring; raises as :func:`prior_log_sd`). For :class:`CentredRuns`,
    ``n`` in ``1/n`` is their ``centre`` and ``n − 1`` dof ``n − 2`` where grouped."""
    c, s, m, own = spread_stats(speeds)   # m = n, own = n − 1 but for CentredRuns
    s0 = prior_log_sd(prior)
    dof = PRIOR_DOF + own
    s_p = math.sqrt((PRIOR_DOF * s0 * s0 + own * s * s) / dof)
    q = 0.5 + P10_P90 / 2
    if own >= OWN_SPREAD_RUNS - 1 and s * t_ppf(q, own) > s_p * t_ppf(q, dof):
        return c, s * pooled_scale(m, runs), float(own)
    return c, s_p * pooled_scale(m, runs), float(dof)


def noise_runs(host, prior: tuple[float, float]) -> list[float]:
    """The run factors the interval draws the host's run-to-run noise from: a multi-rank CPU
    job's ``host.wall_runs`` where its predictive (:func:`predictive`, one run) spreads wider
    than ``host.speed_runs``', else ``speed_runs``. Only the spread is read here; a centre on
    these same runs is :func:`runs_centre` (the DDP demo's, :mod:`demo.ddp_noise`). Where
    ``host.centre_runs`` is set (the point on the timed phase, :mod:`demo.ddp_level`), the
    runs as :class:`CentredRuns`."""
    speeds, walls = list(host.speed_runs), list(getattr(host, "wall_runs", []) or [])
    if len(walls) < 2:
        return speeds
    runs = walls if len(speeds) < 2 or predictive(walls, prior)[1] > predictive(
        speeds, prior)[1] else speeds
    centre = int(getattr(host, "centre_runs", 0) or 0)
    if centre and len(runs) >= 2:   # the point on the last `centre` wall runs' phase
        return CentredRuns(runs, centre, grouped=runs is walls)
    return runs


def runs_centre(host, runs: Sequence[float], paired: int = 1) -> float:
    """The host factor (a ratio, as ``host.cpu_scale``) centred on the mean log speed of
    ``runs`` (what :func:`noise_runs` gave: the runs whose spread the interval counts, the
    capture first): their geometric mean, put in CPU units by the first ``paired`` runs, whose
    CPU factors ``speed_runs[:paired]`` are measured too (else the capture's ``cpu_scale``):
    ``exp(mean log runs + mean log speed_runs[:p] − mean log runs[:p])``. The predictive
    ``s · sqrt(1/k + 1/n) · T(n − 1)`` holds the next runs around ``exp(c)`` of the SAME
    ``n`` runs; a centre from other runs (the CPU time's ``speed_runs`` under the wall
    time's spread) is off it by their offset, which the ``1/n`` term does not carry. Paired on
    the capture alone (``paired=1``), a capture whose own wall ran slow against its CPU time
    moves every point (h-ddp18b: 4 of 26 demos); on every profiled run with both, that ratio is
    their mean. For ``runs = speed_runs`` this is ``exp(mean log speed_runs)``,
    :func:`calibration.host_noise.apply_replicates`'s ``cpu_scale``, unchanged."""
    if len(runs) < 2:
        return float(host.cpu_scale)
    speeds = list(host.speed_runs) or [float(host.cpu_scale)]
    p = max(1, min(paired, len(speeds), len(runs)))
    logs = np.log(np.asarray(runs, dtype=float))
    return math.exp(float(logs.mean() + np.log(speeds[:p]).mean() - logs[:p].mean()))


def from_walls(host, runs: Sequence[float]) -> bool:
    """Whether ``runs`` (what :func:`noise_runs` gave for ``host``) are the job's wall-time
    factors, not its CPU time's."""
    walls = list(getattr(host, "wall_runs", []) or [])
    return list(runs) == walls != list(host.speed_runs)


def own_spread(speeds: Sequence[float], prior: tuple[float, float]) -> bool:
    """Whether :func:`predictive` takes the runs' own spread (``n − 1`` dof), not the one
    pooled with the stated ``prior`` range."""
    return predictive(speeds, prior)[2] == spread_stats(speeds)[3]


def coverage_at_width(speeds: Sequence[float], prior: tuple[float, float], runs: int,
                      width: float) -> tuple[float, float]:
    """What the host's drift allows an interval of the pooled mean of ``runs`` new runs,
    by the predictive of :func:`predictive` (closed form, the measured ``speeds`` taken as the
    host's): ``(needed, held)``, the relative width (P10–P90 over the centre, ``0.2`` for
    20 %) that host noise alone needs to hold 80 %, and the share of runs an interval of
    relative ``width`` holds when host noise is all its width (an upper bound: the other
    sources take part of it)."""
    from scipy.special import stdtr   # scipy.stats.t.cdf's own function

    _, scale, dof = predictive(speeds, prior, runs)
    if scale <= 0:
        return 0.0, 1.0
    needed = 2 * (math.exp(t_ppf(0.5 + P10_P90 / 2, dof) * scale) - 1)
    held = 2 * float(stdtr(dof, math.log1p(width / 2) / scale)) - 1
    return needed, held


def speed_interval(speeds: Sequence[float], prior: tuple[float, float], runs: int = 1
                   ) -> tuple[float, float, float]:
    """``(centre, P10, P90)`` of the pooled host speed factor of ``runs`` new runs, from the
    measured factors ``speeds`` of ``n ≥ 2`` runs and the stated ``prior`` range (see the
    module docstring; raises as :func:`prior_log_sd`)."""
    c, scale, dof = predictive(speeds, prior, runs)
    half = t_ppf(0.5 + P10_P90 / 2, dof) * scale
    return math.exp(c), math.exp(c - half), math.exp(c + half)


def prior_shrink(runs: int) -> float:
    """How much the prior's spread (the next run against the capture) shrinks for the pooled
    mean of ``runs`` runs: ``sqrt((1 + 1/k) / 2)``."""
    return math.sqrt((1 + 1 / max(runs, 1)) / 2)


def draw_factor(speeds: Sequence[float], prior: tuple[float, float], runs: int,
                rng: np.random.Generator, error_log: float = 0.0) -> float:
    """One draw of the host speed factor (relative to the model's ``cpu_scale``) of the
    pooled mean of ``runs`` new runs: from the predictive of the measured ``speeds`` pooled
    with the ``prior`` range when there are two or more, else uniform over the ``prior``
    range (shrunk for ``runs`` > 1); times the calibration's own error
    ``exp(U(−error_log, error_log))`` (``HostParams.cpu_scale_error_log``; the same for every
    run, so not shrunk), when it is not 0. Takes one number from ``rng``, two with an error
    (raises as :func:`prior_log_sd`)."""
    if len(speeds) >= 2:
        _, scale, dof = predictive(speeds, prior, runs)
        f = math.exp(scale * float(rng.standard_t(dof)))
    else:
        u = float(rng.uniform(*prior))
        f = u if runs <= 1 else 1 + (u - 1) * prior_shrink(runs)
    if error_log > 0:
        f *= math.exp(float(rng.uniform(-error_log, error_log)))
    return f


def factor_at(speeds: Sequence[float], prior: tuple[float, float], runs: int, p: float
              ) -> float:
    """The host speed factor at probability ``p`` (0 < p < 1) of what :func:`draw_factor`
    draws without its calibration error: the measured predictive's quantile, else the
    (shrunk) prior's."""
    if len(speeds) >= 2:
        _, scale, dof = predictive(speeds, prior, runs)
        return math.exp(scale * t_ppf(p, dof))
    u = prior[0] + p * (prior[1] - prior[0])
    return u if runs <= 1 else 1 + (u - 1) * prior_shrink(runs)


def spread_factors(speeds: Sequence[float], prior: tuple[float, float], runs: int, n: int,
                   rng: np.random.Generator, error_log: float = 0.0) -> list[float]:
    """``n`` host speed factors for ``n`` draws of a prediction interval: the quantiles of
    :func:`draw_factor`'s distribution at ``k / (n + 1)``, ``k = 1..n`` (where ``n`` ordered
    independent draws fall on average), in random order, each times its calibration error
    (as :func:`draw_factor`). The interval's ranks ``p (n + 1)``
    (:func:`scenarios.draws.quantiles`) then give this distribution's own P10 and P90 for the
    host factor alone, whatever the seed (within the linear interpolation between two
    neighbouring quantiles: 0.4 % on the demo's t with 4 dof).

    Drawn independently instead, 16 factors are one sample for every what-if and validation
    of a model (they share the seed): at seed 0 the demo's host factors (a t with 4 dof whose
    P10–P90 is 0.878–1.139) fell 0.965–1.398, the lowest above the P10, so every setting's
    interval reached 3–4 % below the prediction and 18–25 % above it, in every demo (all
    at seed 0), and the runs measured faster than predicted fell out of it; over seeds, the P10–P90
    of 16 such draws is 0.85–1.64× the distribution's (a t with 4 dof)."""
    out = [factor_at(speeds, prior, runs, k / (n + 1)) for k in range(1, n + 1)]
    out = [out[i] for i in rng.permutation(n)]
    if error_log > 0:
        out = [f * math.exp(float(rng.uniform(-error_log, error_log))) for f in out]
    return out


def factor_range(speeds: Sequence[float], prior: tuple[float, float], runs: int
                 ) -> tuple[float, float]:
    """What :func:`draw_factor` draws, in words of a range: the P10–P90 (relative to the
    centre) of the measured predictive, else the (shrunk) prior's support."""
    if len(speeds) >= 2:
        centre, p10, p90 = speed_interval(speeds, prior, runs)
        return p10 / centre, p90 / centre
    k = prior_shrink(runs) if runs > 1 else 1.0
    return 1 + (prior[0] - 1) * k, 1 + (prior[1] - 1) * k


def capture_cpu_scale(model) -> float:
    """The ``host.cpu_scale`` of the run ``model`` was calibrated from (a ratio): the
    capture's own speed factor (``speed_runs[0]``, else ``cpu_scale``) times the window's
    speed against its whole run (``meta.notes['window_speed']``) where measured."""
    runs = model.host.speed_runs
    own = float(runs[0]) if runs else model.host.cpu_scale
    window = model.meta.notes.get("window_speed")
    if isinstance(window, (int, float)) and window > 0:
        own *= window   # the capture's window against its whole run
    return own


def at_capture_speed(model):
    """``model`` (a :class:`models.params.StepModel`) at the speed of the run it was
    calibrated from: ``host.cpu_scale`` set to the capture's own factor (``speed_runs[0]``,
    1.0 by construction), which is how a replay is checked against that run's measured steps.
    Replicates move ``cpu_scale`` to the mean speed of all the runs (what a prediction of the
    next run takes) and widen the intervals; the capture's own steps ran at its own speed.
    Where calibration measured the window's speed against the whole run
    (``meta.notes['window_speed']``, :func:`calibration.host_noise.at_run_speed`), the factor
    is the window's. A training step that calibration scaled to its unprofiled CPU time
    (``meta.notes['step_profiler_factor']``, :func:`calibration.profiler_overhead.step_factor`)
    gets its profiled durations back: the window's steps ran under the profiler. Unchanged
    without any of these."""
    own = capture_cpu_scale(model)
    host = model.host
    step = model.meta.notes.get("step_profiler_factor")
    if isinstance(step, (int, float)) and step > 0 and (step != 1 or any(
            op.refault_us for op in host.ops)):   # a factor of 1 can hold faults held apart
        # the training step was scaled to its unprofiled CPU time (calibration.
        # profiler_overhead.step_factor): the captured window's steps ran profiled
        # (and its page faults are the window's own: calibration.page_faults)
        host = host.model_copy(update={"ops": [
            op.scaled(1 / step).model_copy(update={"refault_us": 0.0}) if op.kind == "cpu"
            else op for op in host.ops]})
    if own == model.host.cpu_scale and host is model.host:
        return model
    return model.model_copy(update={"host": host.model_copy(update={"cpu_scale": own})})


CAPTURE_SPEED = "at the capture's own host speed"
"""How a number at :func:`at_capture_speed` says which speed it is at (calibrate's and the
demo's replay: checked against the capture's own steps)."""


def speed_phrase(model) -> str:
    """Which host speed a prediction of ``model`` is at, in a short phrase, so numbers of two
    outputs can be matched: :data:`CAPTURE_SPEED` where ``host.cpu_scale`` is the capture's
    own, else the runs' mean (replicates, or the profiled window's speed against its whole
    run, moved it: what a prediction of the next run takes), with the factor."""
    own = at_capture_speed(model).host.cpu_scale
    scale = model.host.cpu_scale
    if math.isclose(own, scale, rel_tol=1e-9):
        return CAPTURE_SPEED
    n = len(model.host.speed_runs)
    runs = f"the mean host speed of the capture's {n} runs" if n >= 2 else \
        "the host speed of the capture's whole run"
    return (f"at {runs} (CPU time x{scale / own:.3f} its profiled window's, the speed a "
            "replay runs at)")


