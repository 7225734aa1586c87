"""The machine's busy CPU less the run's own (calibration.machine_stat.run_busy_share, which a
gloo job's runs are set apart by, calibration.ddp_runs) counts the run's DataLoader workers as
its own: the sidecar's ``machine.proc_cpu_us`` is the main process's alone
(``time.process_time``), and the workers are processes of their own
(calibration.outside_load.worker_cpu_us).

The sidecar is a real run of a user's CNN at num_workers=2 (2 intra-op threads, 2 shared
cores, 2026-12-05 21:38, h-fresh9) whose threads held 96 % of their cores: quiet. Its window
read other processes busy 26 % of the cores, its own 2 workers' batches."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from stepsim.calibration.machine_stat import busy_share, run_busy_share
from stepsim.calibration.run_load import remeasured_load
from stepsim.calibration.outside_load import worker_cpu_us
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_cross import step_window
from stepsim.models.load_bound import LOAD_WARN

DATA = Path(__file__).parent / "data"


def _side(name: str, tmp_path: Path):
    path = tmp_path / f"{name}.json"
    with gzip.open(DATA / f"cnn2t_{name}.sidecar.json.gz", "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return load_sidecar(path)


def test_a_quiet_runs_workers_are_not_other_processes(tmp_path):
    side = _side("nw2_quiet", tmp_path)
    assert remeasured_load(side).slowdown < LOAD_WARN          # quiet by its held share
    m = side.machine.model_dump()
    alone = run_busy_share([("h", side.machine)])
    assert alone == pytest.approx(busy_share(m, m["proc_cpu_us"]))
    assert alone > LOAD_WARN                                  # what the main process leaves
    workers = worker_cpu_us(side)
    # the workers' batches inside the window: about one 28 ms batch a step, 8 steps
    lo, hi = step_window(side.steps)
    inside = [r for r in side.produce if r.worker >= 0 and lo <= r.t_end_us <= hi]
    assert 0.8 * sum(r.work_us for r in inside) < workers < 1.5 * sum(r.work_us for r in inside)
    # busy less the main process's and the workers' CPU: none left, within a tick a core
    with_workers = run_busy_share([("h", side.machine, workers)])
    assert with_workers < LOAD_WARN
    assert with_workers == pytest.approx(max(alone - workers / (m["cores"] * m["wall_us"]), 0))


def test_without_workers_nothing_is_added(tmp_path):
    side = _side("nw0_calm", tmp_path)
    assert worker_cpu_us(side) == 0.0
    assert run_busy_share([("h", side.machine, 0.0)]) == run_busy_share([("h", side.machine)])
