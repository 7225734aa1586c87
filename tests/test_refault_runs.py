"""The step's page-fault share measured over the capture and its replicates
(calibration/refault_runs.py), on five real runs of the plain demo's calibration setting
(tests/data/probe0_runs: ``nw1-r5`` ran under outside load)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from stepsim.calibration.page_faults import refault_fit
from stepsim.calibration.refault_runs import run_share
from stepsim.calibration.sidecar import load_sidecar
from stepsim.fit import calibrate

QUIET = ["nw1-r0", "nw1-r1", "nw1-r2", "nw1-r3"]



def test_a_runs_share_is_its_unprofiled_steps_mean_faults_over_the_captures_most(probe0_runs):
    side = load_sidecar(probe0_runs / "nw1-r1" / "sidecar.json")
    steps = [s for s in side.steps if not s.profiled][2:]
    assert run_share(side, 8000) == pytest.approx(min(np.mean([s.minflt for s in steps]) / 8000, 1))
    assert run_share(side, 10) == 1.0            # cut at the most the model prices
    assert run_share(side, 0) is None


def test_calibrate_measures_the_share_over_the_quiet_runs(probe0_runs):
    cap = probe0_runs / "nw1-r0"
    most = refault_fit(load_sidecar(cap / "sidecar.json")).max_faults
    shares = [run_share(load_sidecar(probe0_runs / r / "sidecar.json"), most) for r in QUIET]
    reps = [probe0_runs / r for r in QUIET[1:]] + [probe0_runs / "nw1-r5"]      # r5 loaded: left out
    model = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps)
    m, sd = np.mean(shares), np.std(shares, ddof=1)
    assert model.host.refault_share == pytest.approx(m)
    assert model.host.refault_share_range == pytest.approx(
        (max(m - math.sqrt(3) * sd, 0), min(m + math.sqrt(3) * sd, 1)))
    assert model.meta.sources["host.refault_share"] == "measured"
    assert sum("page faults over 4 runs" in w for w in model.meta.warnings) == 1
    assert not any("drawn uniformly over 0–1 per run (assumed" in w for w in model.meta.warnings)
    alone = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json")
    assert (alone.host.refault_share, alone.meta.sources["host.refault_share"]) == (0.5, "assumed")
    # the step's CPU the point prices grows with the measured share, by its re-faulting CPU
    op, op0 = model.host.ops[-1], alone.host.ops[-1]
    assert op.refault_us == pytest.approx(op0.refault_us)
