"""A replicate that ran under outside load is left out of the host's run-to-run noise
(calibration.host_noise.drop_loaded): the interval covers runs without outside load past
LOAD_WARN, as the ledger scores a re-measured run under such load apart."""
from __future__ import annotations

import json
import shutil

import pytest

from stepsim.fit import calibrate
from stepsim.calibration.host_noise import loaded_replicates
from stepsim.calibration.run_load import remeasured_load
from stepsim.calibration.sidecar import load_sidecar
from stepsim.models.load_bound import LOAD_WARN
from tests.conftest import later_run, replicate_copy



def _loaded(src, dst, stretch: float = 2.0):
    """A copy of capture ``src`` on a machine where other processes held the cores: the same
    CPU time (identical work at the same speed) over ``stretch``× the wall time, every instant
    ``stretch``× as far from the first, and the difference spent waiting on the run queue."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "sidecar.json").read_text())
    t0 = min([s["t_start_us"] for s in data["steps"] if s.get("t_start_us") is not None]
             + [r["t_end_us"] for r in data["produce"] if r.get("t_end_us") is not None])
    for s in data["steps"]:
        if s.get("t_start_us") is not None:
            s["t_start_us"] = t0 + stretch * (s["t_start_us"] - t0)
        s["wall_us"] *= stretch
        s["next_wall_us"] *= stretch
        if s.get("run_wait_us") is not None:
            s["run_wait_us"] = max(s["wall_us"] - s["next_wall_us"]
                                   - (s["cpu_us"] - s["next_cpu_us"]), 0.0)
        if s.get("next_run_wait_us") is not None:
            s["next_run_wait_us"] = max(s["next_wall_us"] - s["next_cpu_us"], 0.0)
    for r in data["produce"]:
        if r.get("t_end_us") is not None:
            r["t_end_us"] = t0 + stretch * (r["t_end_us"] - t0)
        r["wall_us"] *= stretch
        if r.get("run_wait_us") is not None:
            r["run_wait_us"] = max(r["wall_us"] - r["cpu_us"], 0.0)
        if r.get("gap_wall_us"):
            r["gap_wall_us"] *= stretch
            if r.get("gap_run_wait_us") is not None:
                r["gap_run_wait_us"] = max(r["gap_wall_us"] - (r.get("gap_cpu_us") or 0.0), 0.0)
    (dst / "sidecar.json").write_text(json.dumps(later_run(data)))
    return dst


def test_loaded_replicate_held_closed_form(cpu_run_nw1, tmp_path):
    """The same CPU time over twice the wall time, waiting for a core the rest: the core time
    its runnable threads could have held at least doubles, so its held share is at most half
    the capture's (and far below 1 / (1 + LOAD_WARN)); a quiet copy is not loaded."""
    busy = _loaded(cpu_run_nw1, tmp_path / "busy")
    quiet = replicate_copy(cpu_run_nw1, tmp_path / "quiet", 1.2)
    load0 = remeasured_load(load_sidecar(cpu_run_nw1 / "sidecar.json"))
    load = remeasured_load(load_sidecar(busy / "sidecar.json"))
    assert load.cpu_us == pytest.approx(load0.cpu_us, rel=0.05)
    assert load.held <= 0.5 * load0.held * 1.05
    assert load.slowdown > LOAD_WARN
    found = loaded_replicates([(busy, load_sidecar(busy / "sidecar.json")),
                               (quiet, load_sidecar(quiet / "sidecar.json"))])
    assert found == [(busy, pytest.approx(load.held))]


def test_loaded_replicate_is_left_out_of_the_noise(cpu_run_nw1, tmp_path):
    """Capture + a quiet replicate 1.2× slower + a loaded one: the noise is measured by the
    first two alone (before, the loaded run was a third speed), and a warning counts it."""
    quiet = replicate_copy(cpu_run_nw1, tmp_path / "quiet", 1.2)
    busy = _loaded(cpu_run_nw1, tmp_path / "busy")
    both = calibrate(cpu_run_nw1, replicates=[quiet])
    model = calibrate(cpu_run_nw1, replicates=[quiet, busy])
    assert len(model.host.speed_runs) == 2
    assert model.host.speed_runs == pytest.approx(both.host.speed_runs)
    assert model.host.cpu_scale == pytest.approx(both.host.cpu_scale)
    note = [w for w in model.meta.warnings if "ran under outside load" in w
            and "replicate" in w]
    assert len(note) == 1 and note[0].startswith("1 of 2 replicate(s)")
    assert "left out of the host's run-to-run noise" in note[0] and "busy" in note[0]


def test_only_loaded_replicates_are_kept_with_a_warning(cpu_run_nw1, tmp_path):
    """Every replicate loaded: no quiet run is left, so they measure the noise all the same
    (CPU time per identical work: the loaded copy's speed is the capture's, 1.0) rather than
    the stated prior, and the warning says so."""
    busy = _loaded(cpu_run_nw1, tmp_path / "busy")
    model = calibrate(cpu_run_nw1, replicates=[busy])
    assert len(model.host.speed_runs) == 2
    assert model.host.speed_runs[1] == pytest.approx(model.host.speed_runs[0])
    note = [w for w in model.meta.warnings if w.startswith("1 of 1 replicate(s)")]
    assert len(note) == 1 and "no quiet replicate is left" in note[0]
