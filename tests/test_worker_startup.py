"""``loader.worker_startup_us`` is measured where the capture can say it: the harness records
the instant just before ``iter(loader)`` (where a multi-process loader starts its workers), and
calibration takes the start-up as the time from it to the earliest worker's first sample fetch
(its first batch's ``t_end_us − wall_us``). It was always 0, assumed, while validation measured
the start-up step; where it is still assumed, the model's notes say why."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import STARTUP_UNMEASURED, worker_startup_us


def _side(nw: int, iter_start_us: float | None) -> Sidecar:
    produce = [{"worker": 0, "pid": 10, "seq": 0, "wall_us": 30_000.0, "cpu_us": 29_000.0,
                "t_end_us": 50_000.0},
               {"worker": 1, "pid": 11, "seq": 0, "wall_us": 35_000.0, "cpu_us": 34_000.0,
                "t_end_us": 60_000.0},
               {"worker": 0, "pid": 10, "seq": 1, "wall_us": 30_000.0, "cpu_us": 29_000.0,
                "t_end_us": 80_000.0}]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": nw},
                                   "produce": produce, "iter_start_us": iter_start_us})


def test_startup_runs_from_iter_to_the_first_sample_fetch():
    # worker 0 began its first batch at 50 000 − 30 000 = 20 000 µs, worker 1 at 25 000
    assert worker_startup_us(_side(2, 1_000.0)) == pytest.approx(19_000.0)
    assert worker_startup_us(_side(2, 25_000.0)) == 0.0       # never negative


def test_no_instant_or_no_workers_measures_nothing():
    assert worker_startup_us(_side(2, None)) is None
    assert worker_startup_us(_side(0, 1_000.0)) is None


def test_a_capture_measures_it(cpu_run_nw1):
    m = api.calibrate(cpu_run_nw1).model
    assert m.meta.sources["loader.worker_startup_us"] == "measured"
    assert 0 < m.loader.worker_startup_us < 60e6
    assert "loader.worker_startup_us" not in m.meta.notes


def test_where_it_is_assumed_the_notes_say_why(cpu_run_nw1, tmp_path):
    import shutil

    bare = tmp_path / "trace.json.gz"       # the trace without its sidecar
    shutil.copy(cpu_run_nw1 / "trace.json.gz", bare)
    m = api.calibrate(bare).model
    assert m.loader.num_workers > 0
    assert m.meta.sources["loader.worker_startup_us"] == "assumed"
    assert m.meta.notes["loader.worker_startup_us"] == STARTUP_UNMEASURED
