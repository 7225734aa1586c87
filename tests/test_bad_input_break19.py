"""Bad input on session 9's new readings (break19): the one-thread rank's CPU a step that
``--fix intra_op_threads`` prices DDP ranks from (``meta.notes['one_thread_cpu_us']`` and its
range, :mod:`scenarios.rank_one_thread`), and ``loader.threads_per_worker`` at
``num_workers=0`` (the main process makes a drawn batch on that many threads, stall19). A
record that cannot be right is dropped and counted; a model is refused (one line, exit 2, the
file named and unchanged) only where it cannot be simulated."""
import hashlib
import json
from pathlib import Path

import pytest

from stepsim.models.params import StepModel
from stepsim.scenarios.noop import unread_settings
from stepsim.scenarios.transforms import set_path
from tests.test_quirks import cli, one_line_error

DATA = Path(__file__).parent / "data"
COMM = "150.0,600.0"


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _spun(w1, rng=None) -> dict:
    """The DDP demo's model (2 ranks on host vm, 2 cores) as if captured at 2 threads a rank,
    with the one-thread readings ``w1`` (and a range on it)."""
    data = json.loads((DATA / "ddp_demo_model.json").read_text())
    data["meta"]["notes"].update({"intra_op_threads": 2, "one_thread_cpu_us": w1,
                                  "one_thread_comm_cpu": COMM})
    if rng is not None:
        data["meta"]["ranges"]["meta.notes.one_thread_cpu_us"] = rng
    return data


@pytest.mark.parametrize("w1", [-1.0, 1e300, "abc", True])
def test_a_one_thread_cpu_that_cannot_be_right_is_one_line_naming_it(tmp_path, w1):
    """1e300, 'abc' or True were read as a model without the readings: the fix refused with
    a line telling the user to calibrate the capture again. Now the file is refused, the
    note named, as the other numeric notes are (NOTE_BOUNDS)."""
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_spun(w1)))
    before = _md5(p)
    rc, err, _ = cli("whatif", p, "--fix", "intra_op_threads", "--steps", "5", "--warmup", "1",
                     "--draws", "0", "--jobs", "1")
    one_line_error(rc, err, "m.json", "one_thread_cpu_us", "must be a number")
    assert _md5(p) == before


@pytest.mark.parametrize("rng", [[1e-300, 1e300], [0.5, 1e300]])
def test_a_range_that_draws_the_one_thread_cpu_past_any_duration_is_dropped(tmp_path, rng):
    """A range whose high end took W₁ past its bound made a draw's W₁ unreadable: the fix
    refused the whole what-if (exit 2, 'calibrate the capture again') although the model's
    point prices it. The range cannot be right: dropped, said in a warning; the what-if runs
    and its fix still sets the ops' CPU to W₁."""
    m = StepModel.model_validate(_spun(50_000.0, rng))
    assert "meta.notes.one_thread_cpu_us" not in m.meta.ranges
    assert any("1 range(s) dropped" in w and "one_thread_cpu_us" in w for w in m.meta.warnings)
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_spun(50_000.0, rng)))
    before = _md5(p)
    rc, err, out = cli("whatif", p, "--fix", "intra_op_threads", "--steps", "5", "--warmup",
                       "1", "--draws", "4", "--jobs", "1", "--json")
    assert rc == 0 and "Traceback" not in err, err
    assert json.loads(out)["scenario"]["mean_step_ms"] > 0
    assert _md5(p) == before


def test_a_range_within_the_bound_is_kept():
    m = StepModel.model_validate(_spun(50_000.0, [0.8, 1.2]))
    assert m.meta.ranges["meta.notes.one_thread_cpu_us"] == (0.8, 1.2)
    assert not any("range(s) dropped" in w for w in m.meta.warnings)


def _zero_workers(tpw: int = 1) -> StepModel:
    return StepModel.model_validate(
        {"loader": {"num_workers": 0, "produce": {"mean_us": 20_000.0}, "host_cores": 2,
                    "threads_per_worker": tpw},
         "host": {"ops": [{"kind": "next_batch"}, {"kind": "cpu", "dur_us": 30_000.0}]}})


def test_threads_per_worker_set_at_zero_workers_is_not_said_to_change_nothing(tmp_path):
    """stall19 made the main process make a drawn batch on ``threads_per_worker`` threads at
    ``num_workers=0``; the what-if still warned that the set 'changes nothing with
    loader.num_workers=0 ... read only for DataLoader workers' while the step moved 50 -> 40
    ms (closed form: 20 ms of batch on min(2, 2 cores) threads, 10 ms, + 30 ms)."""
    m = _zero_workers()
    after = set_path(m, "loader.threads_per_worker", 2)
    assert unread_settings(m, after, [("loader.threads_per_worker", 2)]) == []
    assert unread_settings(m, set_path(m, "loader.unpickle_us", 5.0),
                           [("loader.unpickle_us", 5.0)])     # still said for a worker field
    p = tmp_path / "m.json"
    p.write_text(m.model_dump_json())
    rc, err, out = cli("whatif", p, "--set", "loader.threads_per_worker=2", "--steps", "20",
                       "--warmup", "2", "--draws", "0", "--jobs", "1", "--json")
    got = json.loads(out)
    assert rc == 0 and "threads_per_worker" not in err, err
    assert got["baseline"]["mean_step_ms"] == pytest.approx(50.0)
    assert got["scenario"]["mean_step_ms"] == pytest.approx(40.0)


@pytest.mark.parametrize("fix", ["intra_op_threads:efficiency=0.5",
                                 "intra_op_threads:threads=1,efficiency=0.5"])
def test_an_efficiency_on_ranks_priced_one_thread_each_says_why(tmp_path, fix):
    """With an efficiency given, a model that holds the one-thread readings was refused with
    'calibrate the capture again with this version ... (it reads the training thread's CPU)':
    the readings were there; the efficiency is what does not apply (no modelled team)."""
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_spun(50_000.0)))
    rc, err, _ = cli("whatif", p, "--fix", fix, "--steps", "5", "--warmup", "1", "--draws",
                     "0", "--jobs", "1")
    line = one_line_error(rc, err, "m.json", "efficiency=0.5", "leave efficiency out")
    assert "calibrate the capture again" not in line


def _demo_model() -> StepModel:
    return StepModel.model_validate(json.loads((DATA / "ddp_demo_model.json").read_text()))


@pytest.mark.parametrize("runs", [[[0.0] * 3, [0.0] * 3], [[float("nan")] * 3, [3e4] * 3],
                                  [[1e-3] * 3, [1e-3] * 3], [[3e6] * 3, [3e6] * 3]])
def test_a_level_search_that_cannot_reach_the_timed_runs_keeps_the_level(runs):
    """Timed runs of 0 µs raised ZeroDivisionError in the search; 1e-3 µs (under the
    model's non-CPU floor: the gloo transfers, the waits) took ``cpu_scale`` to 4.3e-8 and
    100x the point to 151: no host level. The model keeps its own (None: nothing done)."""
    from stepsim.demo.ddp_level import on_timed_level

    m = _demo_model()
    assert on_timed_level(m, runs, 0) == (m, None)


def test_a_level_search_within_the_bound_still_moves():
    """Timed runs 5 % over the model's point: within what the transfer level may move (4x),
    the search reaches them (h-ddp23: the CPU level is the runs' CPU, here unrecorded)."""
    from stepsim.demo.ddp_level import TOLERANCE, _point_us, on_timed_level

    m = _demo_model()
    p0 = _point_us(m, 0)
    out, got = on_timed_level(m, [[1.04 * p0] * 3, [1.06 * p0] * 3], 0)
    assert got is not None and abs(got["point_us"] / (1.05 * p0) - 1) <= TOLERANCE
    assert out.host.centre_runs == 2


@pytest.mark.parametrize("centre", [3, 4, 999])
def test_a_centre_of_more_runs_than_the_walls_hold_is_dropped(tmp_path, centre):
    """``host.centre_runs`` 999 beside 3 wall runs was read as a centre as sure as 999 runs'
    mean (the interval's 1/n); 3 of 3 left no run of the other phase. Dropped, said."""
    data = json.loads((DATA / "ddp_demo_model.json").read_text())
    data["host"].update(wall_runs=[1.0, 1.08, 0.93], centre_runs=centre)
    m = StepModel.model_validate(data)
    assert m.host.centre_runs == 0
    assert any(f"host.centre_runs {centre} dropped" in w for w in m.meta.warnings)
    data["host"]["centre_runs"] = 2
    assert StepModel.model_validate(data).host.centre_runs == 2
