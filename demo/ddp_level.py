"""The DDP demo's point on the host level of its timed phase (issue 12, h-offset19).

Every row of the demo is scored against timed runs (``time.perf_counter`` at each step
start, no profiler), while the model's host level comes from the profiled runs of its
calibration setting (the capture and its replicates). Measured on the 30 kept demos of
2026-12-05..07 (docs/measurements.md, offset19; per demo, log of geometric means of the
job step, the slower rank's start-to-start, as the rows score it), the replay's error
``log(predicted / measured)`` is two offsets that every row of the demo shares:

* the model against its own calibration runs' unprofiled steps (the 8 before and 8 after
  each profiled window, same processes), at their host level: median −0.127 (P10–P90 about
  −0.27 to −0.04): the model is faster than the runs it was calibrated from;
* those unprofiled steps against the timed runs of the same setting: median +0.065, mean
  +0.075 (standard error 0.019): at the same training-thread CPU a step (13.69 against
  13.70 ms, medians), the after-window steps wait +1.37 ms a rank-step longer after the last
  gradient (the last all-reduce) and the before-window steps spread +1.3 ms over forward
  (+0.26 ms of it CPU), backward and the harness's own bookkeeping.

Neither is a host noise that more draws would hold, and the runs' wall factors
(:mod:`demo.ddp_noise`) see neither (the profiled runs' factors are of their step bodies, per
rank, of the quiet runs: median −0.013 against the timed ones). What measures the timed
phase's level is the calibration setting's own timed runs: the replay row's three repeats.
:func:`on_timed_level` sets ``host.cpu_scale`` so that the model's replay point (40 steps, as
every row's) is their pooled mean step, and ``host.centre_runs`` to their number, so the
interval's ``1/n`` counts those runs alone and its spread is pooled within the two phases
(:class:`models.host_speed.CentredRuns`). The replay row is then in sample in its point
(its error is 0 to the solver's tolerance, not a check); every other row's runs are never
read. Nothing is fitted to a demo: the factor is a measurement of this run of the demo.
"""
from __future__ import annotations

import numpy as np

from stepsim.models.param_meta import within_host_speed
from stepsim.models.params import StepModel

__all__ = ["TOLERANCE", "on_timed_level"]

TOLERANCE = 0.002
"""Relative distance of the replay's point from the timed runs' mean at which the search
for ``cpu_scale`` stops (the step is not exactly linear in it: the gloo transfers and the
waits for a core do not scale with the host's CPU)."""
# The search stays within models.param_meta.within_host_speed of the profiled level (4x
# either way): a cpu_scale past it is no host level of the same setting (the two phases
# measured 6 % apart) but timed runs that cannot be right, or a step the host's CPU does not
# set (a target under the model's non-CPU floor took cpu_scale to 4e-8, break19); the model
# then keeps its level, as where a run's mean is 0, NaN or inf (a ZeroDivisionError before).
MAX_SIMULATIONS = 8
"""Most points simulated in the search (secant steps after a proportional first one); where
it ends above :data:`TOLERANCE` (the 40 steps' mean moves in small jumps with the order of
events: 2 of 31 demos' models did not reach 0.2 % in 5), the point closest to the runs'
mean is taken and its distance said."""


def _point_us(model: StepModel, seed: int) -> float:
    from stepsim.scenarios.predict import predict

    return predict(model, [], steps=40, warmup=3, seed=seed).mean_step_us


def _at(model: StepModel, scale: float) -> StepModel:
    return model.model_copy(update={"host": model.host.model_copy(update={"cpu_scale": scale})})


def on_timed_level(model: StepModel, replay_steps_us: list, seed: int = 0
                   ) -> tuple[StepModel, dict | None]:
    """``model`` with ``host.cpu_scale`` such that its point of the calibration setting (no
    what-if; 40 steps after 3, ``seed``) is the pooled mean of the timed runs
    ``replay_steps_us`` (per run, its job steps, µs), and ``host.centre_runs`` their number;
    and what was done (``None``, the model unchanged, without two timed runs with steps or
    where no point the search simulated came closer to their mean than the model's own, a
    run's mean is not finite and positive, or the level would move more than 4× either way:
    :func:`models.param_meta.within_host_speed`). The model's ``host.wall_runs`` must
    end with those runs' factors (:func:`demo.ddp_noise.with_remeasured_walls`)."""
    means = [float(np.mean(v)) for v in replay_steps_us if len(v)]
    if len(means) < 2 or len(means) != len(replay_steps_us) or not all(
            0 < x < float("inf") for x in means):   # a run's mean 0, NaN or inf: no level
        return model, None
    target = float(np.mean(means))
    c0 = float(model.host.cpu_scale)
    tried = [(c0, _point_us(model, seed))]
    if not tried[0][1] > 0:
        return model, None
    c = c0 * target / tried[0][1]       # proportional: the step all host CPU
    while len(tried) < MAX_SIMULATIONS and 0 < c <= 1e3 and within_host_speed(c / c0):
        p = _point_us(_at(model, c), seed)
        tried.append((c, p))
        if abs(p / target - 1) <= TOLERANCE:
            break
        (ca, pa), (cb, pb) = tried[-2], tried[-1]
        c = cb + (target - pb) * (cb - ca) / (pb - pa) if pb != pa else cb * target / pb
    c, p = min(tried, key=lambda t: abs(t[1] / target - 1))   # the last, where it converged
    if c == c0:   # also where no level within MAX_WINDOW_SPEED of the profiled one was tried
        return model, None
    got = {"cpu_scale_before": c0, "cpu_scale": c, "target_us": target,
           "point_before_us": tried[0][1], "point_us": p, "runs": len(means),
           "simulations": len(tried)}
    note = (f"the point's host level is the timed phase's: host.cpu_scale {c0:.3f} -> {c:.3f}, "
            f"so that the calibration setting's point ({tried[0][1] / 1e3:.2f} ms before, "
            f"{p / 1e3:.2f} ms now) is its {len(means)} timed re-runs' pooled mean step "
            f"({target / 1e3:.2f} ms, measured; the replay row is in sample; "
            f"{p / target - 1:+.1%} off it after {len(tried)} simulations); the profiled "
            "runs, which set it before, "
            "ran at another level (demo.ddp_level); the interval's centre is as sure as the "
            f"mean of those {len(means)} runs")
    host = model.host.model_copy(update={"cpu_scale": c, "centre_runs": len(means)})
    meta = model.meta.model_copy(update={
        "sources": {**model.meta.sources, "host.cpu_scale": "measured"},
        "warnings": [*model.meta.warnings, note],
        "notes": {**model.meta.notes, "timed_level_ratio": c / c0}})
    return model.model_copy(update={"host": host, "meta": meta}), got
