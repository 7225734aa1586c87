"""The slowdown past the cores (``host.oversub``) pooled over the probes of every run of the
calibration setting, not fitted from the capture's alone: the same reason as
:mod:`calibration.probe_pool`'s for the co-run interference. A probe past the cores is recorded
seconds after its run's own steps, so one run's fit reads the host's drift between them as
(or against) the slowdown. Measured on fresh13's CNN (2026-12-07, 1 worker and 2 intra-op
threads on 2 cores, probe at 2 workers, 12 batches each): the capture's probe fitted 0.614
(P10–P90 0.505–0.660), its two replicates' −0.278 and 0.000, where the capture's fit alone
made the 2- and 4-worker what-ifs +12.7 and +8.5 % slow.

Every run whose probe is at the capture's probe setting gives its point (a negative one too:
the drift goes both ways); from :data:`calibration.probe_pool.MIN_RUNS` of them the point is
their mean and the P10–P90 the mean's Student t interval (:func:`calibration.probe_pool.pooled_fit`),
cut at 0 (a slowdown is never below it), at the pooled interference's point. Where that
interval's P90 is not above 0 the stated prior is kept."""
from __future__ import annotations

from stepsim.calibration.oversub import (OVERSUB_PRIOR, cal_activities, fit_oversub,
                                         probe_side_activities)
from stepsim.calibration.probe_pool import MIN_RUNS, pooled_fit, quiet_replicates
from stepsim.calibration.probe_steps import uniform_with_p10_p90
from stepsim.models.param_types import MAX_OVERSUB
from stepsim.models.warning_record import said, without_kinds

__all__ = ["pool_oversub"]


def _probed_past(side, like) -> bool:
    """Whether ``side`` holds a worker-count probe at ``like``'s, beside the same setting."""
    return (side.probe is not None and not side.batch_probe and bool(side.host_cores)
            and side.ddp is None and side.loader.num_workers > 0
            and side.probe.num_workers == like.probe.num_workers
            and side.loader.num_workers == like.loader.num_workers)


def pool_oversub(model, side, replicates, seed: int = 0):
    """``model`` with ``host.oversub`` pooled over the capture ``side`` and its quiet
    ``replicates`` ((path, sidecar) pairs) probed as it is (see the module docstring); the
    model itself where fewer than :data:`MIN_RUNS` runs' probes give a point."""
    if side is None or not _probed_past(side, side):
        return model
    sides = [side] + [r for r in quiet_replicates(replicates) if _probed_past(r, side)]
    k = model.host.interference
    points = []
    for s in sides:
        got = fit_oversub(cal_activities(s), probe_side_activities(s), s.host_cores, k, seed)
        if isinstance(got, tuple) and abs(got[0]) <= MAX_OVERSUB:
            points.append(float(got[0]))
    if len(points) < MIN_RUNS:
        return model
    m, (lo, hi) = pooled_fit(points)
    runs = ", ".join(f"{v:.3f}" for v in points)
    if hi <= 0:
        plo, phi = OVERSUB_PRIOR
        host = {"oversub": (plo + phi) / 2, "oversub_range": (plo, phi)}
        source = "assumed"
        text = (f"slowdown past the cores not calibrated: the probes of {len(points)} runs of "
                f"this setting read {runs}, their mean's P90 {hi:.3f} not above 0 (the host's "
                f"drift between each run's steps and its probe): the prior {plo:g}–{phi:g}")
        summary = f"slowdown past the cores not calibrated: prior {plo:g}–{phi:g}"
    else:
        rng = uniform_with_p10_p90(max(lo, 0.0), hi)
        host = {"oversub": max(m, 0.0), "oversub_range": (max(rng[0], 0.0), rng[1])}
        source = "inferred"
        text = (f"slowdown past the cores pooled over the probes of {len(points)} runs of this "
                f"setting (the capture and its quiet replicates): {max(m, 0.0):.3f} × (1 − "
                f"cores/runnable) (P10–P90 {max(lo, 0.0):.3f}–{hi:.3f}, the mean's Student t "
                f"over the runs, cut at 0; inferred); the runs' own fits read {runs}: one run's "
                "probe, seconds after its steps, reads the host's drift between them as the "
                "slowdown")
        summary = (f"slowdown past the cores pooled over {len(points)} runs' probes: "
                   f"{max(m, 0.0):.3f} (P10–P90 {max(lo, 0.0):.3f}–{hi:.3f})")
    kept = without_kinds(model.meta, {"oversub_fit", "prior:host.oversub"})
    meta = model.meta.model_copy(update={
        "warnings": [*kept, said(text, "oversub_pooled", noted=True, summary=summary)],
        "sources": {**model.meta.sources, "host.oversub": source}})
    return model.model_copy(update={"host": model.host.model_copy(update=host), "meta": meta})
