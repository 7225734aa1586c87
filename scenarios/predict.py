"""Predictions: a model and a list of operations, simulated, with prediction intervals.

The point estimate is one simulation of the transformed model with the given seed. The
*interval* comes from Monte Carlo over what is uncertain:

* parameters the model marks ``inferred`` or ``assumed`` in ``meta.sources`` (and any path in
  ``meta.ranges``) are multiplied, per draw, by a factor drawn uniformly from their range:
  ``meta.ranges[path]`` if given, else ±20 % for inferred and ±50 % for assumed values (a
  value of 0 varies nothing under a factor: it is listed in ``Prediction.skipped``);
* the host's run-to-run speed ``host.cpu_scale``: one factor per draw, since a draw is one
  run (it does not average away over the run's steps), from the Student-t predictive
  distribution of the measured replicates (``host.speed_runs``) pooled with the stated prior
  range, or that range alone (:mod:`models.host_speed`); for the pooled mean of ``runs``
  runs, that of ``runs`` factors;
* the co-run interference coefficient ``host.interference`` is drawn uniformly from
  ``host.interference_range`` (calibrated from a probe, or a stated prior): its effect grows
  with how far a what-if moves the other cores' busy share from the capture's;
* measured samples are bootstrapped, per draw (:mod:`scenarios.bootstrap`): the
  DataLoader's produce times and the host ops' per-step samples are resampled with
  replacement (a short profiled window pins their mean only so far); a model with a
  captured window (a GPU trace) draws a bootstrap sample of its captured steps and gives
  every host op and device task its mean over those steps (the run's own step-to-step
  variation); any other model without per-step samples has its host
  ops and device tasks scaled together by the ratio of a bootstrap mean of
  ``meta.measured_step_us`` to their mean;
* configuration settings (``SETTINGS``: worker counts, bucket caps, ...) are never varied;
* each draw is simulated with its own seed, so sampled durations vary too: the draw's mean
  over its steps carries the step-to-step variation through its standard error. A
  re-measured mean over fewer steps (``measured_steps``) has a larger one: each draw's mean
  gets a normal error of ``se · sqrt(S/M − 1)`` (``se`` its own batch-means standard error
  over ``S`` simulated steps, ``M`` the measured steps), so the interval is of what the
  measurement averages.

``sources`` restricts the draws to some of these (a parameter path, ``window`` for the
bootstrap, ``steps`` for the draw's own seed and the measured window's error; the others held
at the point's values, the same draws otherwise): :mod:`scenarios.interval_sources` reads the
interval's width by source from it.

Steps: with ``steps`` None the point estimate simulates as many steps as it takes for the
mean's standard error to be at most :data:`scenarios.stepcount.SE_TARGET` of the mean (or the
model's bound; :class:`scenarios.stepcount.StepCount` says which), and each draw simulates as
many, but at most :func:`scenarios.stepcount.draw_bound`, or fewer where the interval's width
needs no more (:mod:`scenarios.interval_steps`, which may also relax the point's target to a
share of the width of one run's interval, its pilot, whatever interval is asked for: so
``runs`` and ``measured_steps`` change the interval, never the point); a given ``steps`` is
simulated exactly, by the point and by every draw.

The base model is perturbed *before* the operations are applied (a ``set`` in the scenario
overrides an uncertain value; a ``scale`` multiplies the perturbed one). Draws depend only on
the seed and the model's uncertain paths, so a baseline and a scenario predicted with the same
seed use the same draws (common random numbers). P10/P50/P90 are taken over the draws' mean
step times, as they fall: the interval is never widened to contain the point estimate (one
simulation at the calibrated values), so it can miss, and a response that is convex in the
uncertain parameters shows as a point near one end. A model with nothing uncertain and
nothing sampled is not drawn at all: its interval is the point (``draws`` 0).

The draws themselves (their plan, perturbation, bootstrap and simulation) are in
:mod:`scenarios.draws`; a draw keeps only its step times and names no bottleneck (the
bottleneck is the point estimate's).

Perturbable values: numbers (integers are rounded and kept ≥ 1 when they were), durations
(``DurationSpec``: every sample), device tasks (``dur_us`` and ``breakdown_us``), and lists or
dicts of those. Settings (booleans, strings) and absent values (None) are not quantities and
are left alone; paths that do not resolve or hold anything else are listed in
``Prediction.skipped``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Sequence

import numpy as np

from stepsim.models.host_speed import speed_phrase
from stepsim.models.metrics import Summary, brief_summary, summarize
from stepsim.models.params import StepModel
from stepsim.models.simulate import task_durations
from stepsim.scenarios.bootstrap import bootstrap_measured, is_deterministic
from stepsim.scenarios.draws import (ABSOLUTE, DEFAULT_RANGES, HOST_SPEED, SETTINGS, SPLITS,
                                     STEPS, WINDOW, draw_means, draw_plan, perturb, quantiles,
                                     uncertain_params)
from stepsim.scenarios.parallel import Progress
from stepsim.scenarios.interval_steps import (draw_steps, interval_draws, pilot_means,
                                              point_cap, width_point)
from stepsim.scenarios.stepcount import SE_TARGET, StepCount, simulate_counted
from stepsim.scenarios.transforms import Operation, apply_ops, describe_ops
from stepsim.simcore.errors import ModelError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.units import us_to_ms

__all__ = ["Prediction", "predict", "interval_scope", "simulate_summary", "counted_summary", "device_floor_us",
           "DEFAULT_DRAWS", "DEFAULT_RANGES", "SETTINGS", "SPLITS", "ABSOLUTE", "HOST_SPEED",
           "STEPS", "WINDOW", "draw_means", "draw_plan", "perturb", "quantiles",
           "uncertain_params", "bootstrap_measured"]

DEFAULT_DRAWS = 16
"""Monte Carlo draws when ``intervals=True`` (small, so the CLI stays quick on 2 cores); the
verbs' default too (:data:`stepsim.limits.DEFAULT_DRAWS`, the same number: a test holds them
together), so one baseline gets one interval in ``whatif``, ``diagnose`` and ``plan``."""


def interval_scope(runs: int = 1, measured_steps: int | None = None) -> str:
    """What a P10–P90 interval is of, in words, as every verb that prints one says it: one
    run's mean step (``whatif``, ``diagnose``, ``plan``: a run as long as the draws), or the
    mean of ``measured_steps`` re-measured steps pooled over ``runs`` runs (``validate``, the
    demo's table), which averages the host's speed over the runs and carries the error of that
    many steps, so the same baseline's interval differs there."""
    if measured_steps is None and runs == 1:
        return "one run's mean step"
    steps = f" over {measured_steps} measured steps" if measured_steps else ""
    if runs == 1:
        return f"one run's mean step{steps}"
    return f"the pooled mean step of {runs} runs{steps}"


@dataclass(frozen=True)
class Prediction:
    """What a model with operations is predicted to do (µs).

    Attributes:
        what: the operations in words (``baseline`` when none).
        mean_step_us / median_step_us: point estimate, over the measured window.
        bottleneck / bottleneck_label: the point estimate's bottleneck key and words.
        summary: the point estimate's full :class:`models.metrics.Summary`.
        steps / warmup / seed: how it was simulated (``steps``: as given, or chosen).
        count: the point estimate's step count and its standard error.
        p10_step_us / p50_step_us / p90_step_us: interval of the mean step over the draws, as
            they fall (None without intervals; all equal to the point for a deterministic
            model); it need not contain the point.
        draws: Monte Carlo draws behind the interval (0: none).
        draw_steps: steps each draw simulated (0: no draws).
        draw_std_error_us: the median over the draws of each draw's own standard error of
            its mean step (simulation noise inside the interval; None: no draws, or draws of
            one step).
        runs / measured_steps: what the interval is of: the pooled mean of ``runs`` runs
            over ``measured_steps`` steps in all (None: a run as long as the draws').
        width_sources: P90 − P10 in % of the point with one source of uncertainty drawn at
            a time (:mod:`scenarios.interval_sources`; empty: not decomposed).
        uncertain: the parameter paths varied, with their factor ranges.
        skipped: uncertain paths that could not be varied, with why.
        device_floor_us: the least a step can take on the device (:func:`device_floor_us`);
            see ``runs_ahead``.
        model: the transformed model (not part of equality or output).
    """

    what: str
    mean_step_us: float
    median_step_us: float
    bottleneck: str
    bottleneck_label: str
    summary: Summary
    steps: int
    warmup: int
    seed: int
    p10_step_us: float | None = None
    p50_step_us: float | None = None
    p90_step_us: float | None = None
    draws: int = 0
    count: StepCount | None = None
    draw_steps: int = 0
    draw_std_error_us: float | None = None
    uncertain: dict[str, tuple[float, float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    device_floor_us: float = 0.0
    runs: int = 1
    measured_steps: int | None = None
    width_sources: dict[str, float] = field(default_factory=dict)
    model: StepModel | None = field(default=None, compare=False, repr=False)

    @property
    def width_pct(self) -> float | None:
        """P90 − P10 in % of the point (None without an interval)."""
        if self.p10_step_us is None or self.p90_step_us is None or self.mean_step_us <= 0:
            return None
        return 100 * (self.p90_step_us - self.p10_step_us) / self.mean_step_us

    @property
    def scope(self) -> str:
        """What the interval is of, in words (:func:`interval_scope`)."""
        return interval_scope(self.runs, self.measured_steps)

    @property
    def host_speed(self) -> str:
        """Which host speed the prediction is at, in words
        (:func:`models.host_speed.speed_phrase`; empty without its model)."""
        return speed_phrase(self.model) if self.model is not None else ""

    @property
    def runs_ahead(self) -> bool:
        """True when the step is more than 1 % shorter than the device's floor: nothing made
        the host wait for the device, so the simulated window saw the host's transient pace,
        which lasts only until the launch queue fills."""
        return self.mean_step_us < 0.99 * self.device_floor_us

    @property
    def has_interval(self) -> bool:
        return self.p10_step_us is not None

    def covers(self, step_us: float) -> bool | None:
        """Whether ``step_us`` lies in [P10, P90]; None without an interval."""
        if self.p10_step_us is None or self.p90_step_us is None:
            return None
        return self.p10_step_us <= step_us <= self.p90_step_us

    def to_dict(self) -> dict:
        """JSON-ready, times in ms."""
        ms = {k: None if v is None else us_to_ms(v) for k, v in (
            ("mean_step_ms", self.mean_step_us), ("median_step_ms", self.median_step_us),
            ("p10_step_ms", self.p10_step_us), ("p50_step_ms", self.p50_step_us),
            ("p90_step_ms", self.p90_step_us))}
        return {"what": self.what, **ms, "bottleneck": self.bottleneck,
                "bottleneck_label": self.bottleneck_label,
                "shares": dict(self.summary.shares), "draws": self.draws,
                "uncertain": {k: list(v) for k, v in self.uncertain.items()},
                "skipped": dict(self.skipped), "steps": self.steps, "warmup": self.warmup,
                "seed": self.seed, "device_floor_ms": us_to_ms(self.device_floor_us),
                "runs_ahead": self.runs_ahead,
                **(self.count.to_dict() if self.count is not None else {}),
                "rank_comm": [c.to_dict() for c in self.summary.rank_comm],
                "rank_phases": [{"rank": r, **{f"{c}_ms": us_to_ms(v) for c, v in ph.items()}}
                                for r, ph in sorted(self.summary.rank_phases_us.items())],
                "over_ranks_ms": None if self.summary.over_ranks_us is None
                else us_to_ms(self.summary.over_ranks_us),
                "draw_steps": self.draw_steps, "runs": self.runs,
                "measured_steps": self.measured_steps, "interval_of": self.scope,
                "host_speed": self.host_speed,
                "width_pct": self.width_pct,
                "width_sources_pct": dict(self.width_sources),
                "draw_std_error_ms": None if self.draw_std_error_us is None
                else us_to_ms(self.draw_std_error_us)}


def simulate_summary(model: StepModel, steps: int | None, warmup: int, seed: int) -> Summary:
    """Simulate and summarise (rank 0 of the model); ``steps`` None: a chosen step count
    (:func:`scenarios.stepcount.simulate_counted`)."""
    return counted_summary(model, steps, warmup, seed)[0]


@gc_paused
def counted_summary(model: StepModel, steps: int | None, warmup: int, seed: int,
                    brief: bool = False, max_steps: int | None = None,
                    target: float = SE_TARGET) -> tuple[Summary, StepCount]:
    """:func:`simulate_summary` with the step count and its standard error; ``brief``: only
    :func:`models.metrics.brief_summary`'s fields (the simulation then keeps no device-stream
    span: ``keep="brief"``, which it does not read). The collector stays paused from the
    simulation through its summary (their records live until both are done), so it does not
    pass over them in between. ``max_steps`` / ``target``: as
    :func:`scenarios.stepcount.simulate_counted` takes them."""
    res, count = simulate_counted(model, steps, warmup, seed, target, max_steps,
                                  keep="brief" if brief else "all")
    return (brief_summary(res) if brief else summarize(res)), count


def device_floor_us(model: StepModel) -> float:
    """The least time (µs) one step can take on the device: the most work per step on any one
    stream or copy engine (each direction's copies share one engine), over every rank, with
    the rank's skew, collective transfer time without waiting, and optimizer-phase and
    collective tasks counted once per ``comm.grad_accum_steps``."""
    tasks = model.task_map()
    accum = model.comm.grad_accum_steps
    floor = 0.0
    for i in range(len(model.ranks)):
        work: dict[str, float] = {}
        for tid, us in task_durations(model, i).items():
            t = tasks[tid]
            lane = t.copy_kind if t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h") \
                else f"stream:{t.stream}"
            once = t.kind == "collective" or t.phase == "optimizer"
            work[lane] = work.get(lane, 0.0) + (us / accum if once else us)
        floor = max(floor, *work.values(), 0.0)
    return floor


# ---------------------------------------------------------------- predict ----------------
def predict(model: StepModel, ops: Sequence[Operation] = (), steps: int | None = None,
            warmup: int = 20,
            seed: int = 0, intervals: bool | int = False, jobs: int = 1,
            progress: Progress | None = None, runs: int = 1,
            measured_steps: int | None = None, decompose: bool = False,
            brief: bool = False) -> Prediction:
    """Predict the step of ``model`` after ``ops``.

    Args:
        model: the calibrated (or hand-written) StepModel; not changed.
        ops: operations, applied in order (:mod:`scenarios.transforms`).
        steps / warmup / seed: simulation window and seed (``steps`` None: chosen from the
            mean's standard error, see the module docstring).
        intervals: False for the point estimate only; True for :data:`DEFAULT_DRAWS` Monte
            Carlo draws; an int for that many (0 = none).
        jobs: processes for the draws.
        progress: hook called after each draw.
        runs / measured_steps: the interval is of the pooled mean of ``runs`` runs over
            ``measured_steps`` steps in all (a validation's re-measured runs); None: of one
            run as long as the draws.
        decompose: also draw each source alone (``Prediction.width_sources``).
        brief: the point's summary with only the step times, the bottleneck and its
            critical path (:func:`models.metrics.brief_summary`: what a sweep point reports).

    Raises:
        ModelError: an op that does not apply, a model that cannot be simulated, or ops that
            leave a step of zero length.
    """
    final = apply_ops(model, ops)
    n = DEFAULT_DRAWS if intervals is True else int(intervals or 0)
    cap = point_cap(final, steps, n)
    s, count = counted_summary(final, steps, warmup, seed, brief, max_steps=cap)
    point = point_prediction(model, ops, final, s, count, warmup, seed, runs, measured_steps)
    if n <= 0:
        return point
    again = partial(repoint, model, ops, final, warmup, seed, brief, runs, measured_steps)
    if not drawn(model, final, point.uncertain):
        return undrawn(point if count.met or cap is None else again())
    full = draw_steps(model, final, count, steps, n)
    plan = draw_plan(model, n, seed, runs, ops)
    accum = final.comm.grad_accum_steps
    means, errors, each, quick = interval_draws(model, ops, plan, full, warmup, seed, jobs,
                                                progress, measured_steps, steps is None, accum)
    point = width_point(point, partial(pilot_means, model, ops, n, full, warmup, seed, jobs,
                                       accum, runs, measured_steps, quick),
                        steps is None, again)
    out = with_interval(point, means, errors, n, each)
    if decompose:
        from stepsim.scenarios.interval_sources import width_sources

        out = replace(out, width_sources=width_sources(
            model, ops, plan, each, warmup, seed, s.mean_step_us, jobs, measured_steps))
    return out


def repoint(model: StepModel, ops: Sequence[Operation], final: StepModel, warmup: int,
            seed: int, brief: bool = False, runs: int = 1, measured_steps: int | None = None,
            target: float = SE_TARGET, basis: str = "") -> Prediction:
    """The point of ``final`` (``model`` after ``ops``) simulated again with a chosen count
    at the standard error ``target`` (``basis``: why that target, in words)."""
    s2, c2 = counted_summary(final, None, warmup, seed, brief, target=target)
    return point_prediction(model, ops, final, s2, replace(c2, basis=basis), warmup, seed,
                            runs, measured_steps)


def point_prediction(model: StepModel, ops: Sequence[Operation], final: StepModel,
                     s: Summary, count: StepCount, warmup: int, seed: int, runs: int = 1,
                     measured_steps: int | None = None) -> Prediction:
    """:func:`predict`'s point estimate from the summary ``s`` of ``final`` (``model`` after
    ``ops``), before any draw.

    Raises:
        ModelError: a step of zero length.
    """
    if not s.mean_step_us > 0:
        raise ModelError(f"{describe_ops(ops)}: the step takes no time at all (every duration "
                         "scaled to 0 or removed?): nothing left to predict")
    varied, skipped = uncertain_params(model, ops, after=final)
    return Prediction(describe_ops(ops), s.mean_step_us, s.median_step_us, s.bottleneck,
                      s.bottleneck_label, s, count.steps, warmup, seed, count=count,
                      uncertain=varied,
                      skipped=skipped, device_floor_us=device_floor_us(final), model=final,
                      runs=runs, measured_steps=measured_steps)


def undrawn(point: Prediction) -> Prediction:
    """``point`` with its interval where nothing uncertain was sampled: the point itself."""
    m = point.mean_step_us
    return replace(point, p10_step_us=m, p50_step_us=m, p90_step_us=m)


def drawn(model: StepModel, final: StepModel, varied: dict) -> bool:
    """Whether :func:`predict` draws an interval for ``final`` (``model`` after the ops) with
    the uncertain paths ``varied`` (else the interval is the point: nothing uncertain, nothing
    sampled)."""
    return bool(varied) or not (is_deterministic(model) and is_deterministic(final))


def with_interval(point: Prediction, means: np.ndarray, errors: np.ndarray, n: int,
                  each: int) -> Prediction:
    """``point`` with the interval of its ``n`` draws' means (``each`` steps a draw; a draw's
    standard error None where one step cannot estimate it)."""
    p10, p50, p90 = quantiles(means)
    return replace(point, p10_step_us=p10, p50_step_us=p50, p90_step_us=p90, draws=n,
                   draw_steps=each,
                   draw_std_error_us=float(np.median(errors)) if each >= 2 else None)
