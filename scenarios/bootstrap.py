"""The bootstrap of a model's measured samples, one per interval draw
(:mod:`scenarios.predict`): a short profiled window pins the means of what it measured only so
far, so each draw resamples them with replacement.

* a model with a captured window (a GPU trace): a bootstrap sample of its captured steps, each
  host op and device task scaled by the ratio of its mean over them to its mean over all the
  captured steps (the run's own step-to-step variation, centred on the point: the model's own
  values are the median step's, :mod:`calibration.representative`, and a draw that took the
  op means instead would move every interval off its point by the gap between two estimators,
  3.1 % on ResNet-50's 0 → 4 workers, not by anything uncertain);
* else the DataLoader's produce samples and the host ops' per-step samples, resampled;
* else, with two or more ``meta.measured_step_us``, the host ops and device tasks scaled
  together by the ratio of a bootstrap mean of them to their mean.
"""
from __future__ import annotations

import numpy as np

from stepsim.models.param_base import copy_with
from stepsim.models.params import DurationSpec, StepModel


def _produce_specs(model: StepModel) -> list[DurationSpec]:
    return [model.loader.produce, *(model.loader.produce_by_worker or [])]


def _has_samples(model: StepModel) -> bool:
    return (any(d.samples_us for d in _produce_specs(model))
            or any(op.samples_us for op in model.host.ops))


def is_deterministic(model: StepModel) -> bool:
    """True when a simulation of ``model`` draws nothing at random and there is nothing measured
    to bootstrap: constant DataLoader production (cv 0, no samples, per worker too), no
    sampled host ops, and fewer than two measured steps."""
    return (all(d.cv == 0 for d in _produce_specs(model)) and not _has_samples(model)
            and len(model.meta.measured_step_us) < 2)


def bootstrap_measured(model: StepModel, rng: np.random.Generator, window: bool = True
                       ) -> StepModel:
    """A copy of ``model`` with its measured samples bootstrapped (see the module docstring);
    ``window`` False drops the captured window (its per-step values) in the same copy, as
    :meth:`models.params.StepModel.without_replay` would after: a draw never replays it."""
    def resample(values: list[float]) -> list[float]:
        return [float(v) for v in rng.choice(values, size=len(values), replace=True)]

    w = model.replay
    own = [k for k, c in enumerate(w.calibrated) if c] if w is not None else []
    if len(own) >= 2:
        return _bootstrap_window(model, [int(k) for k in rng.choice(own, size=len(own))], rng,
                                 window)
    if _has_samples(model):
        m = model.model_copy(deep=True)
        if m.loader.produce.samples_us:
            m.loader.produce = DurationSpec.from_samples(resample(m.loader.produce.samples_us))
        if m.loader.produce_by_worker:
            m.loader.produce_by_worker = [
                DurationSpec.from_samples(resample(d.samples_us)) if d.samples_us else d
                for d in m.loader.produce_by_worker]
        for op in m.host.ops:
            if op.samples_us:
                op.samples_us = resample(op.samples_us)
                op.dur_us = float(np.mean(op.samples_us))
        return m
    steps = model.meta.measured_step_us
    if len(steps) < 2:
        return model
    f = float(np.mean(resample(steps)) / np.mean(steps))
    m = model.model_copy(deep=True)
    for op in m.host.ops:
        op.dur_us *= f
    for ts in m.device.streams.values():
        for t in ts:
            if t.kind != "collective":
                t.dur_us *= f
                t.breakdown_us = {k: v * f for k, v in t.breakdown_us.items()}
    return m


def _bootstrap_window(model: StepModel, pick: list[int], rng: np.random.Generator,
                      window: bool) -> StepModel:
    """``model`` with every host op and device task (its duration, and its gap) times the
    ratio of its mean over the captured steps ``pick`` (indices into the window, repeats
    allowed) to its mean over all of the window's calibrated steps (1 where that mean is 0),
    the loader's produce samples resampled; ``next_batch`` ops keep the loader's account. The
    ratios are taken together, one row per op or task. ``window`` False: without the captured
    window."""
    idx = np.asarray(pick)
    own = np.asarray([k for k, c in enumerate(model.replay.calibrated) if c])

    def means(rows: list[list[float]]) -> list[float]:
        """Per row, mean over ``pick`` ÷ mean over the calibrated steps (1 where that is 0)."""
        if not rows:
            return []
        a = np.asarray(rows, dtype=float)
        full = a[:, own].mean(axis=1)
        ratio = np.divide(a[:, idx].mean(axis=1), full, out=np.ones_like(full), where=full > 0)
        return ratio.tolist()

    op_means = iter(means([op.replay_us for op in model.host.ops
                           if op.replay_us is not None and op.kind != "next_batch"]))
    tasks = [t for ts in model.device.streams.values() for t in ts]
    dur_means = iter(means([t.replay_us for t in tasks if t.replay_us is not None]))
    gap_means = iter(means([t.replay_gap_us for t in tasks if t.replay_gap_us is not None]))
    # new objects only where a value changes (means of valid values: no validation needed),
    # copied as model_copy would (models.param_base.copy_with)
    ops = []
    for op in model.host.ops:
        up = {} if window or op.replay_us is None else {"replay_us": None}
        if op.replay_us is not None and op.kind != "next_batch":
            up["dur_us"] = op.dur_us * next(op_means)
        ops.append(copy_with(op, up) if up else op)
    streams = {}
    for s, ts in model.device.streams.items():
        streams[s] = out = []
        for t in ts:
            up = {} if window else {"replay_us": None, "replay_gap_us": None}
            if t.replay_us is not None:
                r = next(dur_means)
                if t.breakdown_us:
                    up["breakdown_us"] = {k: v * r for k, v in t.breakdown_us.items()}
                up["dur_us"] = t.dur_us * r
            if t.replay_gap_us is not None:
                up["gap_us"] = t.gap_us * next(gap_means)
            out.append(copy_with(t, up) if up else t)
    loader = model.loader
    if loader.produce.samples_us:
        s = loader.produce.samples_us
        loader = loader.model_copy(update={"produce": DurationSpec.from_samples(
            [float(v) for v in rng.choice(s, size=len(s), replace=True)])})
    return copy_with(model, {
        "host": copy_with(model.host, {"ops": ops}),
        "device": copy_with(model.device, {"streams": streams}), "loader": loader,
        **({} if window else {"replay": None})})
