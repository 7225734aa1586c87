"""The probe fits pooled over the capture and its replicates (calibration/probe_pool.py), on
five real runs of the plain demo's calibration setting (``num_workers=1``, each with a probe
at ``num_workers=0``; 2026-12-07 08:47–08:52 UTC, zero20; ``nw1-r5`` ran under outside load,
its threads holding 58 % of the core time they could have held)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from stepsim.calibration.corun import fit_interference, probe_activities
from stepsim.calibration.probe_pool import MIN_RUNS, pooled_fit
from stepsim.calibration.probe_steps import uniform_with_p10_p90
from stepsim.calibration.sidecar import load_sidecar
from stepsim.fit import calibrate

QUIET = ["nw1-r0", "nw1-r1", "nw1-r2", "nw1-r3"]



def _own_fit(folder: Path):
    side = load_sidecar(folder / "sidecar.json")
    return fit_interference(*probe_activities(side), side.host_cores, 0)


def test_pooled_fit_is_the_mean_with_its_student_t_interval():
    pts = [0.102, 0.008, 0.033, 0.068, 0.062]
    m, (lo, hi) = pooled_fit(pts)
    half = stats.t.ppf(0.9, len(pts) - 1) * np.std(pts, ddof=1) / math.sqrt(len(pts))
    assert m == pytest.approx(np.mean(pts))
    assert (lo, hi) == pytest.approx((np.mean(pts) - half, np.mean(pts) + half))
    with pytest.raises(ValueError):
        pooled_fit([0.1])


def test_one_runs_probe_alone_is_narrower_than_the_runs_disagree(probe0_runs):
    """The mechanism: each run's bootstrap P10–P90 holds only its own records, and two quiet
    runs of one setting give ranges that do not overlap."""
    fits = {r: _own_fit(probe0_runs / r) for r in QUIET}
    assert all(isinstance(f, tuple) for f in fits.values())
    (a0, (lo0, hi0)), (a2, (lo2, hi2)) = fits["nw1-r0"], fits["nw1-r2"]
    assert hi2 < lo0          # r2's P90 below r0's P10


def test_calibrate_pools_the_quiet_runs_probes(probe0_runs):
    cap = probe0_runs / "nw1-r0"
    reps = [probe0_runs / r for r in QUIET[1:]] + [probe0_runs / "nw1-r5"]
    model = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps)
    pts = [_own_fit(probe0_runs / r)[0] for r in QUIET]          # the loaded r5 left out
    m, (lo, hi) = pooled_fit(pts)
    assert model.host.interference == pytest.approx(max(m, 0.0))
    assert model.host.interference_range == pytest.approx(
        uniform_with_p10_p90(max(lo, 0.0), max(hi, 0.0)))
    assert model.meta.sources["host.interference"] == "inferred"
    text = " ".join(model.meta.warnings)
    assert f"pooled over the probes of {len(QUIET)} runs" in text
    assert "fitted from the probe at num_workers=0" not in text      # the capture's, superseded
    alone = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json")
    assert alone.host.interference == pytest.approx(_own_fit(cap)[0])
    assert alone.host.interference != pytest.approx(model.host.interference)


def test_fewer_runs_than_the_least_keep_the_captures_own_fit(probe0_runs):
    cap = probe0_runs / "nw1-r0"
    reps = [probe0_runs / r for r in QUIET[1:MIN_RUNS - 1]]
    model = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps)
    assert model.host.interference == pytest.approx(_own_fit(cap)[0])
    assert "pooled over the probes" not in " ".join(model.meta.warnings)


def test_a_capture_whose_own_fit_read_as_drift_is_pooled_with_its_runs(probe0_quiet):
    """The quiet demo's run 8 fitted −0.070 alone (P90 below 0: read as drift, the prior
    kept); pooled with four runs that fitted 0.010–0.027 it is their mean, inferred."""
    cap = probe0_quiet / "nw1-r7"
    alone = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json")
    own = _own_fit(cap)
    assert own[1][1] <= 0 and alone.meta.sources["host.interference"] == "assumed"
    runs = ["nw1-r7", "nw1-r0", "nw1-r1", "nw1-r2", "nw1-r3"]
    model = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json",
                      replicates=[probe0_quiet / r for r in runs[1:]])
    m, (lo, hi) = pooled_fit([_own_fit(probe0_quiet / r)[0] for r in runs])
    assert hi > 0
    assert model.host.interference == pytest.approx(max(m, 0.0))
    assert model.meta.sources["host.interference"] == "inferred"
    text = " ".join(model.meta.warnings)
    assert "where the capture's alone kept the prior" in text
    assert "co-run interference not calibrated" not in text      # the prior's line, superseded
