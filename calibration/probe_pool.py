"""The co-run interference coefficient (and the main thread's own cost of making its batches)
fitted from the probe of every run of the calibration setting, not of the capture alone.

A probe at a second ``num_workers`` is recorded a few seconds after its run's own steps
(:mod:`calibration.capture`), so one run's fit (:func:`calibration.corun.fit_interference`)
compares two stretches of that run, and reads the host's speed drift between them as (or
against) interference; its bootstrap P10–P90 resamples the records of those two stretches
only, so it holds none of that drift. Measured on a plain ``--probe`` demo (2026-12-07
08:47–08:52 UTC, 8 runs at ``num_workers=1``, each with its probe at ``num_workers=0``;
docs/measurements.md "zero20"): the runs' own fits read 0.102, 0.008, 0.033, 0.068, 0.062,
0.083, 0.045 and 0.057, their bootstrap P10–P90s as narrow as 0.017–0.047 (run 3) and
0.085–0.120 (run 1, the one the demo calibrated from): ranges that do not overlap, of one
coefficient of one workload on one host. A demo whose chosen run's probe read 0.000 (P10–P90
0.000–0.012; m19, 2026-12-07 07:34) predicted its 0-worker row 10.5 % slow.

Every run with a probe at the capture's probe setting is a replicate of the fit as it is of the
host's speed (:mod:`calibration.host_noise`): the point is the mean of the runs' fits and its
P10–P90 the mean's Student t interval over the runs (``n − 1`` dof, :func:`pooled_fit`), from
:data:`MIN_RUNS` runs whose probe gave a fit, a negative one too (the drift goes both ways;
a capture whose own fit alone fell below 0, read as drift, is pooled with the others), and
the prior is kept where the mean's P90 is not above 0, or where the runs' probes give no
slope (:func:`calibration.corun.fit_interference`'s reason: loads too close). The runs under
outside load are left out as they are from the host's noise
(:func:`calibration.host_noise.loaded_replicates`). The main thread's own cost (``host.same_thread``), fitted at the interference point, is
pooled the same way at the pooled point where the capture's probe fitted it.
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.calibration.probe_steps import uniform_with_p10_p90
from stepsim.models.host_speed import t_ppf
from stepsim.models.warning_record import said, without_kinds

__all__ = ["MIN_RUNS", "pooled_fit", "quiet_replicates", "pool_probe_fits"]

MIN_RUNS = 3
"""The fewest runs (the capture and its replicates) with a fitted probe that are pooled: the
Student t of 2 runs has 1 dof, whose P90 quantile (3.08) makes the interval wider than the
one run's it replaces."""


def pooled_fit(points: list[float]) -> tuple[float, tuple[float, float]]:
    """``(mean, (P10, P90))`` of the coefficient from the runs' fits ``points`` (at least 2):
    the mean ``m`` and ``m ± t₀.₉(n − 1) · s / √n``, ``s`` the points' sample sd."""
    x = np.asarray(points, dtype=float)
    n = x.size
    if n < 2:
        raise ValueError(f"pooled_fit: {n} point(s), at least 2 needed")
    m, s = float(x.mean()), float(x.std(ddof=1))
    half = t_ppf(0.9, n - 1) * s / math.sqrt(n)
    return m, (m - half, m + half)


def quiet_replicates(replicates) -> list:
    """The sidecars of ``replicates`` ((path, sidecar) pairs), in order, less those run under
    outside load (:func:`calibration.host_noise.loaded_replicates`)."""
    from stepsim.calibration.host_noise import loaded_replicates

    replicates = list(replicates)
    loaded = {p for p, _ in loaded_replicates(replicates)}
    return [r for p, r in replicates if p not in loaded]


def _runs_fit(sides, fit_one) -> list[float]:
    """Each run's fitted point (``fit_one(side)``: ``(point, (p10, p90))``, a reason or None),
    for the runs where it fitted."""
    out = []
    for side in sides:
        fit = fit_one(side)
        if isinstance(fit, tuple):
            out.append(float(fit[0]))
    return out


def _probed(side, like) -> bool:
    """Whether ``side`` holds a probe at the same ``num_workers`` as ``like``'s, beside the
    same loader setting (a worker-count probe, not a batch-size one)."""
    return (side.probe is not None and not side.batch_probe and bool(side.host_cores)
            and side.probe.num_workers == like.probe.num_workers
            and side.loader.num_workers == like.loader.num_workers)


def pool_probe_fits(model, side, replicates, seed: int = 0):
    """``model`` with ``host.interference`` (and ``host.same_thread`` where the capture's probe
    fitted it) pooled over the capture ``side`` and its quiet ``replicates`` ((path, sidecar)
    pairs) that hold a probe at the capture's probe setting (see the module docstring); the
    model itself where fewer than :data:`MIN_RUNS` runs fit or their mean's P90 is not above
    0."""
    from stepsim.calibration.corun import fit_interference, probe_activities
    from stepsim.calibration.same_thread import fit_same_thread

    src = model.meta.sources
    if side is None or not _probed(side, side):
        return model
    sides = [side] + [r for r in quiet_replicates(replicates) if _probed(r, side)]

    def interference(s):
        cal, probe = probe_activities(s)
        return fit_interference(cal, probe, s.host_cores, seed) if cal and probe else None

    points = _runs_fit(sides, interference)
    if len(points) < MIN_RUNS:
        return model
    k, (lo, hi) = pooled_fit(points)
    if hi <= 0:       # the runs' CPU per work fell with the load: drift, the prior kept
        return model
    k, lo, hi = max(k, 0.0), max(lo, 0.0), max(hi, 0.0)
    host = {"interference": k, "interference_range": uniform_with_p10_p90(lo, hi)}
    text = (f"co-run interference pooled over the probes of {len(points)} runs of this setting "
            f"(the capture and its quiet replicates): {k:.3f} (P10–P90 {lo:.3f}–{hi:.3f}, the "
            f"mean's Student t over the runs, inferred); the runs' own fits read "
            + ", ".join(f"{v:.3f}" for v in points)
            + (f", the capture's alone {model.host.interference:.3f}"
               if src.get("host.interference") == "inferred" else
               ", where the capture's alone kept the prior")
            + ": one run's probe, seconds after its steps, reads the host's drift between "
              "them as interference")
    notes = [said(text, "interference_pooled", noted=True,
                  summary=f"co-run interference pooled over {len(points)} runs' probes: "
                          f"{k:.3f} (P10–P90 {lo:.3f}–{hi:.3f})")]
    if src.get("host.same_thread") == "inferred":
        inline = side.loader.num_workers > 0

        def same(s):
            cal, probe = probe_activities(s)
            return fit_same_thread(cal, probe, s.host_cores, k, inline, seed)

        costs = _runs_fit(sides, same)
        if len(costs) >= MIN_RUNS:
            c, (clo, chi) = pooled_fit(costs)
            host.update(same_thread=max(c, 0.0), same_thread_range=uniform_with_p10_p90(
                max(clo, 0.0), max(chi, 0.0)))
            notes.append(said(
                f"the main thread's own cost of making its batches pooled over {len(costs)} "
                f"runs' probes at the pooled interference: its batch and step take "
                f"{1 + max(c, 0.0):.3f}x their CPU with workers (P10–P90 {1 + clo:.3f}–"
                f"{1 + chi:.3f}x; the runs' own " + ", ".join(f"{v:+.3f}" for v in costs)
                + (", below 0 read as 0" if c < 0 else "") + ")", "same_thread_pooled",
                noted=True, summary=f"the main thread's own cost pooled over {len(costs)} "
                                    f"runs' probes: ×{1 + max(c, 0.0):.3f}"))
    gone = ({"interference_fit", "prior:host.interference"}
            | ({"same_thread_fit"} if "same_thread" in host else set()))
    kept = without_kinds(model.meta, gone)   # the capture's own fits, superseded
    meta = model.meta.model_copy(update={"warnings": [*kept, *notes], "sources": {
        **src, "host.interference": "inferred"}})
    return model.model_copy(update={"host": model.host.model_copy(update=host), "meta": meta})
