"""The batch-size probe: what a few steps at a second ``batch_size`` measure.

``Capture.steps(..., probe_batch_size=N)`` records, after the captured window, a few
unprofiled steps from a second DataLoader on the same dataset with the same ``num_workers``
and batches of ``N`` samples instead of ``B`` (the sidecar's ``probe``, with its
``batch_size``). One batch size cannot tell how a step grows with the batch; two can, for a
cost that is a part per step (or per batch) plus a part per sample: with ``r = N / B`` and
``R`` the ratio of the probe's time to the capture's, the part that does not grow is

    f = (r − R) / (r − 1)

of the capture's time (``R = f + (1 − f)·r``), for

* the training step: the main process's CPU time outside ``next()`` per step
  (``StepRecord.compute_cpu_us``: its part per step is the optimizer, Python overhead, a
  layer's fixed cost; CPU time, so that waiting for a core behind workers, whose load grows
  with the batch too, is not read as work), the median over the capture's unprofiled steps
  (:data:`calibration.sidecar_fit.PROBE_FIRST_STEPS` left out, as for the interference probe)
  against the median over the probe's;
* the DataLoader's produce time per batch (collate, per-batch Python work), the median of the
  batches' CPU work (``ProduceRecord.work_us``; the workers' first batches, which carry
  their start-up, left out).

A ratio beyond ``r`` (the step grew faster than linearly: caches overflowing, measured on a
user's CNN at 3.37x for 2x the samples) is kept, not clipped: the step's part that grows is
all of it (``f`` = 0) and grows as ``(N / B)^p``, ``p = ln R / ln r`` (the op's
``sample_exponent``, measured), the power law through the two measured points, so the probe's
own batch is predicted at its measured time. A ratio below 1 (the step shrank) leaves ``f``
at 1 and says so; a produce ratio outside ``[1, r]`` is clipped to the nearest bound. The probe runs after the captured window, so a
change of the host's speed in between is read as a change of cost: calibration says so when
the capture's own unprofiled steps changed by more than :data:`DRIFT_WARN` from before the
profiled window to after it (on a shared 2-core machine the same steps' CPU time moved by up
to 1.6× within one run, far more than a part per step of 10 % shifts a 2× ratio). The fit's
uncertainty (its bootstrap P10–P90 over the steps and batches) is reported, not drawn by
intervals: the fractions are bounded by 1, which a factor range could cross.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.run_drift import DRIFT_WARN, unprofiled_after
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import PROBE_FIRST_STEPS, after_startup, probe_base_steps

__all__ = ["BatchProbe", "batch_probe", "fixed_fraction"]

BOOTSTRAP = 200
"""Bootstrap resamples behind the P10–P90 of each fraction."""
MIN_RECORDS = 2
"""Fewest steps (or batches) on each side for a fraction to be measured."""


def _drift(side: Sidecar) -> float | None:
    """``after / before − 1`` of the median CPU time outside ``next()`` of the unprofiled
    steps before the profiled window (the first :data:`PROBE_FIRST_STEPS` left out) and after
    it (:func:`calibration.run_drift.unprofiled_after`); None without two of each."""
    prof = [i for i, s in enumerate(side.steps) if s.profiled]
    if not prof:
        return None
    before = [s.compute_cpu_us for s in side.steps[PROBE_FIRST_STEPS:prof[0]]]
    after = [s.compute_cpu_us for s in unprofiled_after(side)]
    if len(before) < MIN_RECORDS or len(after) < MIN_RECORDS or np.median(before) <= 0:
        return None
    return float(np.median(after) / np.median(before) - 1)


@dataclass(frozen=True)
class BatchProbe:
    """What the probe measured: the probe's ``batch_size``; ``step_fixed`` and
    ``produce_fixed``, the shares of the capture's training step and produce time per batch
    that do not grow with the batch (None: too few records), each with its bootstrap P10–P90;
    ``notes``: what was clipped, in words."""

    batch_size: int
    step_fixed: float | None
    step_range: tuple[float, float] | None
    step_exponent: float | None
    produce_fixed: float | None
    produce_range: tuple[float, float] | None
    notes: list[str]


def fixed_fraction(ratio: float, r: float) -> float:
    """``(r − ratio) / (r − 1)`` clipped to ``[0, 1]``: the share of a cost that stays when its
    batch grows ``r``-fold and the cost grows ``ratio``-fold."""
    return float(min(max((r - ratio) / (r - 1), 0.0), 1.0))


def _fraction(cal: np.ndarray, probe: np.ndarray, r: float, what: str, notes: list[str],
              rng: np.random.Generator):
    """The fixed fraction of one cost, its bootstrap P10–P90, and a note when clipped."""
    if cal.size < MIN_RECORDS or probe.size < MIN_RECORDS or np.median(cal) <= 0:
        return None, None
    ratio = float(np.median(probe) / np.median(cal))
    f = fixed_fraction(ratio, r)
    if f in (0.0, 1.0):
        notes.append(f"{what} grew {ratio:.3g}x for {r:.3g}x the samples, outside [1, {r:.3g}]: "
                     f"its part that does not grow is taken as {f:g}")
    boots = [fixed_fraction(float(np.median(rng.choice(probe, probe.size))
                                  / max(np.median(rng.choice(cal, cal.size)), 1e-9)), r)
             for _ in range(BOOTSTRAP)]
    return f, (float(np.percentile(boots, 10)), float(np.percentile(boots, 90)))


def superlinear_exponent(ratio: float, r: float) -> float | None:
    """``ln ratio / ln r`` when a cost grew ``ratio``-fold for ``r`` times the samples faster
    than linearly (the exponent of the power law through both points, > 1); else None."""
    if ratio <= 0 or r <= 0 or r == 1 or fixed_fraction(ratio, r) > 0.0:
        return None
    p = float(np.log(ratio) / np.log(r))
    return p if p > 1.0 + 1e-9 else None


def _median_ratio(cal: np.ndarray, probe: np.ndarray) -> float | None:
    if cal.size < MIN_RECORDS or probe.size < MIN_RECORDS or np.median(cal) <= 0:
        return None
    return float(np.median(probe) / np.median(cal))


def batch_probe(side: Sidecar | None, seed: int = 0) -> BatchProbe | None:
    """What ``side``'s batch-size probe measures (None without one; see the module
    docstring)."""
    if side is None or not side.batch_probe:
        return None
    b, n = side.loader.batch_size, side.probe.batch_size
    r = n / b
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    cal_steps = [side.steps[i] for i in probe_base_steps(side)]
    step = [np.asarray([s.compute_cpu_us for s in steps], dtype=float)
            for steps in (cal_steps, side.probe.steps)]
    produce = [np.asarray([p.work_us for p in after_startup(recs)], dtype=float)
               for recs in (side.produce, side.probe.produce)]
    drift = _drift(side)
    if drift is not None and abs(drift) > DRIFT_WARN:
        notes.append(f"the capture's own unprofiled steps took {100 * abs(drift):.0f} % "
                     f"{'more' if drift > 0 else 'less'} CPU after the profiled window than "
                     "before it (the host's speed moved within the run): the probe's ratios "
                     "hold that drift too, so its parts are uncertain by as much; re-capture "
                     "on a quiet machine")
    ratio = _median_ratio(step[0], step[1])
    sp = superlinear_exponent(ratio, r) if ratio is not None else None
    if sp is not None:
        notes.append(f"the training step grew {ratio:.3g}x for {r:.3g}x the samples, faster "
                     f"than linear (caches?): modelled as samples^{sp:.2f} through the two "
                     "measured points (measured), so a batch_size what-if at the probe's "
                     "batch predicts its measured step; other sizes are extrapolated")
        sf, sr = 0.0, None
    else:
        sf, sr = _fraction(step[0], step[1], r, "the training step", notes, rng)
    pf, pr = _fraction(produce[0], produce[1], r, "the produce time per batch", notes, rng)
    return BatchProbe(n, sf, sr, sp, pf, pr, notes)


@dataclass(frozen=True)
class ProbeFields:
    """A batch probe's fit as model fields: ``split`` for the training step's ``cpu`` op
    (``per_step_fraction``), ``loader`` (``produce_per_batch_fraction``), their ``sources``,
    calibration ``warnings`` and a ``note`` for ``meta.notes``."""

    split: dict
    loader: dict
    sources: dict
    warnings: list[str]
    note: str


def _pct(f: float, rng: tuple[float, float] | None) -> str:
    return f"{100 * f:.1f} %" + (f" (P10-P90 {100 * rng[0]:.1f}-{100 * rng[1]:.1f} %)"
                                 if rng is not None else "")


def probe_fields(side: Sidecar | None, op: str = "host.ops[1]") -> ProbeFields | None:
    """What :func:`batch_probe` measures, as the CPU model's fields (``op``: the training step's
    path); None without a batch probe."""
    bp = batch_probe(side)
    if bp is None:
        return None
    split, loader, sources, parts = {}, {}, {}, []
    if bp.step_fixed is not None:
        split["per_step_fraction"] = bp.step_fixed
        sources[f"{op}.per_step_fraction"] = "measured"
        parts.append(f"the training step's part per step {_pct(bp.step_fixed, bp.step_range)}")
    if bp.step_exponent is not None:
        split["sample_exponent"] = bp.step_exponent
        sources[f"{op}.sample_exponent"] = "measured"
        parts.append(f"its per-sample part grows as samples^{bp.step_exponent:.2f}")
    if bp.produce_fixed is not None:
        loader["produce_per_batch_fraction"] = bp.produce_fixed
        sources["loader.produce_per_batch_fraction"] = "measured"
        parts.append(f"the produce time's part per batch "
                     f"{_pct(bp.produce_fixed, bp.produce_range)}")
    b = side.loader.batch_size
    warnings = [f"batch-size probe at {bp.batch_size} (captured at {b}): {w}" for w in bp.notes]
    if not parts:
        warnings.append(f"batch-size probe at {bp.batch_size}: too few steps or batches to "
                        "measure anything (a batch_size what-if assumes the step linear in "
                        "samples)")
    note = (f"probe at batch_size={bp.batch_size} against {b}: " + "; ".join(parts)
            if parts else "")
    return ProbeFields(split, loader, sources, warnings, note)
