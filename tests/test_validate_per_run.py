"""validate with several runs pooled prints each run's line under the pooled row (fresh user,
2026-12-05): one row of the pooled mean hid which run was loaded or slow."""
from __future__ import annotations

from stepsim.fit import calibrate
from stepsim.models.params import save_model
from tests.conftest import run_cli
from tests.test_outside_load import _cpu_times

QUICK = ("--steps", "10", "--warmup", "3", "--draws", "0", "--jobs", "1")


def test_pooled_validate_prints_each_runs_line(cpu_run_nw0, cpu_run_nw1, tmp_path):
    quiet = _cpu_times(cpu_run_nw1, tmp_path / "quiet", 1.0)
    loaded = _cpu_times(cpu_run_nw1, tmp_path / "loaded", 0.4)
    model = tmp_path / "m.json"
    save_model(calibrate(cpu_run_nw0), model)
    r = run_cli("validate", str(model), str(quiet / "trace.json.gz"),
                str(loaded / "trace.json.gz"), *QUICK, "--set", "loader.num_workers=1")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("  run ")]
    assert len(lines) == 2, r.stdout
    assert "quiet" in lines[0] and "threads held 100 %" in lines[0] and " ms, median " in lines[0]
    assert "loaded" in lines[1] and "threads held 40 %" in lines[1]
    one = run_cli("validate", str(model), str(quiet / "trace.json.gz"), *QUICK,
                  "--set", "loader.num_workers=1")
    assert one.returncode == 0 and "  run 1" not in one.stdout
