"""The DDP demo's host term drawn from every run of its calibration setting: the timed
re-runs' wall factors after the profiled runs' (demo.ddp_noise), the point's host factor on
their mean (h-ddp18b)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.job_runs import unprofiled_wall_us
from stepsim.calibration.sidecar import load_sidecar
from stepsim.demo.ddp_noise import timed_wall_us, with_remeasured_walls
from stepsim.models.host_speed import noise_runs
from stepsim.models.params import load_model

DATA = Path(__file__).parent / "data"
CAPTURE = DATA / "gloo_loader_job"


def _timed(mean_us: list[float], steps: int = 20) -> list[dict]:
    """A timed run whose rank r steps every ``mean_us[r]`` µs."""
    return [{"step_starts_us": list(1e6 + m * np.arange(steps + 1))} for m in mean_us]


def test_timed_wall_is_the_mean_start_to_start_step():
    run = [{"step_starts_us": [0.0, 10.0, 30.0, 36.0]}, {"step_starts_us": [5.0]}]
    assert timed_wall_us(run) == [12.0, None]


def test_each_timed_rerun_is_the_geometric_mean_of_its_ranks_over_the_capture():
    """Closed form: rank 0 at 1.21x the capture's unprofiled mean wall, rank 1 at 1.00x:
    the run's factor is sqrt(1.21) = 1.1; a second at 0.81x / 1.00x is 0.9. They follow the
    model's own wall runs; the CPU speed runs do not move, the interval then draws from the
    walls (they spread wider) and the centre (``cpu_scale``) is their mean."""
    base = [unprofiled_wall_us(load_sidecar(CAPTURE / f"rank{r}" / "sidecar.json"))
            for r in (0, 1)]
    model = load_model(DATA / "ddp_demo_model.json")
    runs = [_timed([1.21 * base[0], base[1]]), _timed([0.81 * base[0], base[1]])]
    got_model, got = with_remeasured_walls(model, CAPTURE, runs)
    assert got == pytest.approx([1.1, 0.9], rel=1e-9)
    assert got_model.host.wall_runs == pytest.approx(list(model.host.wall_runs) + [1.1, 0.9])
    assert got_model.host.speed_runs == model.host.speed_runs
    prior = tuple(model.meta.ranges["host.cpu_scale"])
    assert noise_runs(got_model.host, prior) == got_model.host.wall_runs
    # the centre on the runs the spread counts: their geometric mean, put in CPU units by the
    # 2 profiled runs measured in both (models.host_speed.runs_centre, h-anchor18)
    walls = list(model.host.wall_runs) + [1.1, 0.9]
    want = math.exp(np.mean(np.log(walls)) + np.mean(np.log(model.host.speed_runs))
                    - np.mean(np.log(model.host.wall_runs)))
    assert got_model.host.cpu_scale == pytest.approx(want, rel=1e-9)
    assert got_model.host.cpu_scale != pytest.approx(model.host.cpu_scale, rel=1e-3)
    assert any("timed re-runs" in w for w in got_model.meta.warnings)


def test_without_profiled_wall_runs_the_capture_counts_as_one():
    model = load_model(DATA / "ddp_demo_model.json")
    bare = model.model_copy(update={"host": model.host.model_copy(update={"wall_runs": []})})
    base = [unprofiled_wall_us(load_sidecar(CAPTURE / f"rank{r}" / "sidecar.json"))
            for r in (0, 1)]
    got_model, got = with_remeasured_walls(bare, CAPTURE, [_timed([b * 1.2 for b in base])])
    assert got == pytest.approx([1.2])
    assert got_model.host.wall_runs == pytest.approx([1.0, 1.2])


def test_a_run_without_steps_leaves_the_model_as_it_was():
    model = load_model(DATA / "ddp_demo_model.json")
    got_model, got = with_remeasured_walls(model, CAPTURE, [[{"step_starts_us": [1.0]}] * 2])
    assert got == [] and got_model is model
    assert math.isfinite(model.host.cpu_scale)
