"""The DDP demo's host term from every run of its calibration setting, as ``stepsim demo``
carries it (issue 12).

The demo runs its calibration setting (DDP's defaults) seven times: the profiled capture, its
three profiled replicates and three timed re-runs (the replay row's repeats, one a round).
Calibration measures the host's run-to-run speed from the quiet profiled runs alone
(``host.speed_runs``, ``host.wall_runs``; :mod:`calibration.ddp_runs` leaves a run out whose
cores or CPU speed were off the others'), so where two of them were left out the interval drew
the host from two runs pooled with the stated ±6 % range, while the same host moved the
re-measured runs 20-30 % (2026-12-06 21:51: runs 1.000 and 1.065, every row 5-19 % fast and
outside its ±8 %; the replay's three runs 19.9, 29.1 and 24.0 ms). The plain demo draws the
host from all its calibration setting's runs (:mod:`demo.run`); this does the same here.

Each timed re-run's job wall factor is :func:`calibration.job_runs.wall_factors`'s, against
the model's capture: per rank its mean start-to-start step over the capture's unprofiled
steps' mean wall (:func:`calibration.job_runs.unprofiled_wall_us`), the geometric mean over
the ranks. They go after the quiet profiled runs' ``host.wall_runs`` (or the capture's 1.0
where calibration measured none), and the interval draws from those wherever they spread
wider than the CPU time's ``host.speed_runs`` (:func:`models.host_speed.noise_runs`). Where
they do, the point's host factor ``host.cpu_scale`` moves onto their mean log speed too
(:func:`models.host_speed.runs_centre`: the drawn runs' geometric mean, put in CPU units by
the profiled runs measured in both, wall and CPU time; h-anchor18, before the capture's alone,
whose own slow wall moved every point): the predictive ``s · sqrt(1/k + 1/n) · T(n − 1)`` holds
the next runs around the mean of the same ``n`` runs it counts (issue 12, h-ddp18b; before,
the spread counted the 7 runs while the centre was the profiled runs' CPU time, an offset the
``1/n`` term did not carry). Only the calibration setting's runs: the out-of-sample rows'
runs are never read. The replay row (those timed runs) is in sample.

Measured on the 22 kept demos of 2026-12-06 (08:47-21:53), each run against the median of the
setting's six other runs: the timed re-runs' wall reads -0.067 / +0.079 /
-0.066 (rounds 1-3, mean log), the profiled runs' +0.044 (capture) / +0.103 / +0.011 /
-0.029; so the two kinds differ by about 4 % in the mean against a run-to-run log sd of
0.12-0.20: the host's spread, not the kind's, dominates. Rescored, the 69 scored out-of-sample
rows of those demos: 50 → 60 inside, median width 14.7 → 18.9 %, errors unchanged
(docs/measurements.md, h-ddp17).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from stepsim.calibration.job_runs import unprofiled_wall_us, wall_factors
from stepsim.models.host_speed import HOST_NOISE_PRIOR, from_walls, noise_runs, runs_centre
from stepsim.models.params import StepModel

__all__ = ["timed_wall_us", "with_remeasured_walls"]


def timed_wall_us(ranks: list[dict]) -> list[float | None]:
    """Per rank of a timed run (:class:`demo.ddp_job.RunResult` as a dict), its mean
    start-to-start step (µs); None for a rank with under two step starts."""
    out = []
    for r in ranks:
        d = np.diff(np.asarray(r.get("step_starts_us") or [], dtype=float))
        out.append(float(d.mean()) if len(d) else None)
    return out


def with_remeasured_walls(model: StepModel, capture: Path, timed: list[list[dict]]
                          ) -> tuple[StepModel, list[float]]:
    """``model`` with its ``host.wall_runs`` followed by the wall factors of the timed runs
    ``timed`` of its calibration setting against its capture's folder ``capture`` (rank
    sidecars), and those factors; where the interval then draws from the walls, its
    ``host.cpu_scale`` their centre (:func:`models.host_speed.runs_centre`); ``model``
    unchanged (and ``[]``) where a run or the capture lacks a rank's steps."""
    from stepsim.calibration.calibrate import _rank_sidecars
    from stepsim.calibration.sidecar import load_sidecar

    base = [unprofiled_wall_us(load_sidecar(p)) for p in _rank_sidecars(capture).values()]
    got = wall_factors([base] + [timed_wall_us(run) for run in timed])[1:]
    if not got or len(got) != len(timed):
        return model, []
    walls = list(model.host.wall_runs) or [1.0]
    host = model.host.model_copy(update={"wall_runs": walls + got})
    meta = model.meta
    note = (f"the demo's {len(got)} timed re-runs of this setting took "
            f"{', '.join(f'{w:.3f}' for w in got)}x the capture's wall a step: with its "
            f"{len(walls)} profiled run(s) they are the runs the interval draws the host's "
            "run-to-run noise from where they spread wider than the CPU time of identical "
            "work")
    prior = tuple(meta.ranges.get("host.cpu_scale", HOST_NOISE_PRIOR))
    noise = noise_runs(host, prior)
    if from_walls(host, noise):
        # the centre on the runs the spread counts (models.host_speed.runs_centre)
        paired = len(model.host.wall_runs) if len(model.host.wall_runs) == len(
            model.host.speed_runs) else 1   # the profiled runs measured in both
        centre = runs_centre(host, noise, paired)
        note += (f"; the point's host factor is their mean too, in CPU units of the {paired} "
                 f"profiled run(s) measured in both: host.cpu_scale {host.cpu_scale:.3f} -> "
                 f"{centre:.3f} (the profiled runs' CPU time before)")
        host = host.model_copy(update={"cpu_scale": centre})
    meta = meta.model_copy(update={"sources": {**meta.sources, "host.wall_runs": "measured"},
                                   "warnings": [*meta.warnings, note]})
    return model.model_copy(update={"host": host, "meta": meta}), got
