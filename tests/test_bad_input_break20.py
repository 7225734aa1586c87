"""Hostile replicate sidecars fed to the probes pooled over runs (calibration/probe_pool.py),
on real runs (tests/data/probe0_runs; break20, 2026-12-07): a probe is recorded after its own
run's steps (calibration.capture), so a probe whose steps start before its run's last step
ends is another run's (copied in) and cannot be right: dropped, counted in a warning, and not
pooled as a fit of this run."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stepsim.calibration.sidecar import load_sidecar
from stepsim.fit import calibrate


def _with_probe_of(dst: Path, run: Path, other: Path) -> Path:
    """``run``'s sidecar with ``other``'s probe section (another run's, earlier on the clock)
    written to ``dst``."""
    data = json.loads((run / "sidecar.json").read_text())
    data["probe"] = json.loads((other / "sidecar.json").read_text())["probe"]
    dst.mkdir()
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def test_a_probe_before_its_runs_steps_end_is_dropped_with_a_warning(probe0_runs, tmp_path):
    bad = _with_probe_of(tmp_path / "r3", probe0_runs / "nw1-r3", probe0_runs / "nw1-r1")
    side = load_sidecar(bad / "sidecar.json")
    assert side.probe is None
    assert any("probe" in n and "before" in n for n in side._dropped)
    good = load_sidecar(probe0_runs / "nw1-r3" / "sidecar.json")   # the real one: kept
    assert good.probe is not None and not any("probe" in n for n in good._dropped)


def test_a_copied_probe_is_not_pooled_as_the_replicates_fit(probe0_runs, tmp_path):
    """With r3's probe replaced by r1's, the pool is the capture's, r1's and r2's (as with r3
    given no probe), not r1's probe counted twice."""
    cap = probe0_runs / "nw1-r0"
    bad = _with_probe_of(tmp_path / "r3", probe0_runs / "nw1-r3", probe0_runs / "nw1-r1")
    none = tmp_path / "r3none"
    none.mkdir()
    data = json.loads((probe0_runs / "nw1-r3" / "sidecar.json").read_text())
    (none / "sidecar.json").write_text(json.dumps(dict(data, probe=None)))
    reps = [probe0_runs / "nw1-r1", probe0_runs / "nw1-r2"]
    got = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps + [bad])
    ref = calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps + [none])
    assert got.host.interference == pytest.approx(ref.host.interference)
    assert got.host.interference_range == pytest.approx(ref.host.interference_range)
    assert any("pooled over the probes of 3 runs" in w for w in got.meta.warnings)


def test_the_cli_warns_once_and_calibrates(probe0_runs, tmp_path):
    cap = probe0_runs / "nw1-r0"
    bad = _with_probe_of(tmp_path / "r3", probe0_runs / "nw1-r3", probe0_runs / "nw1-r1")
    out = tmp_path / "m.json"
    p = subprocess.run([sys.executable, "-m", "stepsim", "calibrate", str(cap / "trace.json.gz"),
                        "--sidecar", str(cap / "sidecar.json"), "--replicate",
                        str(probe0_runs / "nw1-r1"), "--replicate", str(bad), "-o", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "Traceback" not in p.stderr and out.is_file()
    assert sum("probe" in line and "before" in line for line in p.stderr.splitlines()) == 1
