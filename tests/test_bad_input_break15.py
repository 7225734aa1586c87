"""Bad input on session 5's new readings (break15): the gloo window check's ``d``
(:mod:`calibration.gloo_window`), the model notes the straggler and barrier what-ifs and the
replay read as numbers (:data:`models.param_meta.NOTE_BOUNDS`,
:func:`scenarios.ddp_release.noted_release_us`), and a DDP sidecar's barrier records without
a step record to bound them (:mod:`calibration.sidecar_counts`). A record that cannot be right
is dropped and said where the rest calibrates; a model file that cannot be right is refused in
one line naming it (exit 2), no traceback, the file unchanged."""
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from stepsim.calibration.gloo_window import WindowDrift, beyond_speed, rank_drifts
from stepsim.calibration.sidecar import load_sidecar
from stepsim.models.param_meta import MAX_WINDOW_SPEED, Meta
from tests.test_quirks import cli, one_line_error

DATA = Path(__file__).parent / "data"
JOB = DATA / "gloo_loader_job"


def _drift(d: float, rank: int = 0) -> WindowDrift:
    return WindowDrift(rank, 20e3, 20e3 * d, 1.0, 8, 30, d, 0.01)


@pytest.mark.parametrize("d, wild", [(1 / MAX_WINDOW_SPEED, False), (MAX_WINDOW_SPEED, False),
                                     (0.729, False), (0.0043, True), (162.6, True),
                                     (MAX_WINDOW_SPEED * 1.001, True)])
def test_a_window_drift_beyond_a_hosts_speed_is_not_the_host(d, wild):
    """Closed form: ``d`` inside ``[1/4, 4]`` (0.73-0.81 measured) is a host's speed moving,
    beyond it either way the step records cannot be right."""
    assert beyond_speed([_drift(d)]) == ([_drift(d)] if wild else [])


def _job_side(tmp_path, rank: int, cpu_us_of) -> object:
    """The checked-in job's ``rank`` sidecar with each unprofiled step after the window given
    the main thread's CPU ``cpu_us_of(step)`` (the file itself left as it was)."""
    src = JOB / f"rank{rank}" / "sidecar.json"
    before = src.read_bytes()
    d = json.loads(before)
    seen = False
    for s in d["steps"]:
        seen = seen or s.get("profiled", False)
        if seen and not s.get("profiled"):
            s["cpu_us"] = cpu_us_of(s)
            s.pop("proc_cpu_us", None), s.pop("next_proc_cpu_us", None)
    p = tmp_path / f"rank{rank}.sidecar.json"
    p.write_text(json.dumps(d))
    assert src.read_bytes() == before
    return load_sidecar(p)


def test_a_ranks_window_drift_of_records_that_cannot_be_right_is_dropped_and_said(tmp_path):
    """Rank 0's unprofiled steps after the window at 100 µs of training-thread CPU read
    ``d`` 0.0043 and priced its host ops at 0.1 ms a step (the replay +689 %): its drift is
    left out of the scale and the notes, said in one warning naming it; rank 1's (its own
    records) is kept as without rank 0's."""
    sides = {0: _job_side(tmp_path, 0, lambda s: s["next_cpu_us"] + 100.0),
             1: load_sidecar(JOB / "rank1" / "sidecar.json")}
    warnings: list[str] = []
    scale, notes = rank_drifts([0, 1], sides, {}, True, warnings)
    plain, _ = rank_drifts([0, 1], {r: load_sidecar(JOB / f"rank{r}" / "sidecar.json")
                                    for r in (0, 1)}, {}, True, [])
    assert list(scale) == [1] and scale[1] == plain[1] and 0.25 < plain[0] < 4
    assert notes["window_drift"].startswith("1:") and "0:" not in notes["window_drift"]
    assert notes["window_speed"] == pytest.approx(1 / scale[1])
    (said,) = [w for w in warnings if "ignored the window check" in w]
    assert "rank 0's sidecar" in said and "×0.0043" in said and "rank 1" not in said


MODEL = DATA / "ddp_demo_model.json"


def _model(tmp_path, notes: dict, barrier_exit=((0.0, 300.0), (4e4, 1300.0))) -> Path:
    d = json.loads(MODEL.read_text())
    d["meta"]["notes"].update(notes)
    d["comm"]["barrier_exit"] = [list(p) for p in barrier_exit]
    p = tmp_path / "model.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("key, value", [
    ("straggler_release_us", "abc"),     # was a ValueError's traceback in the barrier what-if
    ("straggler_release_us", "nan"),
    ("straggler_release_us", "1e400"),   # read as an infinite lag
    ("straggler_release_us", True),
    ("straggler_release_us", -5e6),
    ("straggler_release_us", 1e18),      # took every measured resume lag away
    ("window_speed", 1e300), ("window_speed", 1e-300), ("window_speed", "fast"),
])
def test_a_numeric_note_that_cannot_be_right_refuses_the_model(tmp_path, key, value):
    p = _model(tmp_path, {key: value})
    before = p.read_bytes()
    line = one_line_error(*cli("whatif", p, "--fix", "barrier")[:2], str(p), key)
    assert "must be a number" in line and p.read_bytes() == before


@pytest.mark.parametrize("notes", [{"straggler_release_us": 1000.0}, {"window_speed": 1.3},
                                   {"window_speed": 4}, {"straggler_release_us": None}])
def test_the_notes_calibration_and_the_what_ifs_write_are_taken(notes):
    assert Meta(notes=notes).notes == notes
    with pytest.raises(ValidationError):
        Meta(notes={k: "x" for k in notes})


def test_a_release_note_past_the_lags_it_was_added_to_refuses_the_barrier(tmp_path):
    """1e9 µs (inside 1e12) taken back by the barrier what-if after a straggler set every
    measured resume lag of the optimizer to 0, silently: no straggler what-if adds more than
    the smallest lag of the op it moved."""
    p = _model(tmp_path, {"straggler_release_us": 1e9})
    before = p.read_bytes()
    line = one_line_error(*cli("whatif", p, "--fix", "barrier")[:2], str(p))
    assert "straggler_release_us" in line and "past the smallest resume lag" in line
    assert p.read_bytes() == before


def test_the_straggler_and_the_barrier_still_take_back_their_own_release():
    """The what-ifs' own note round-trips: the straggler adds the probe's late release, the
    barrier after it takes it back to the lags as calibrated."""
    from stepsim.models.param_comm import barrier_release_us
    from stepsim.models.params import StepModel
    from stepsim.scenarios.ddp_release import after_wait_op, noted_release_us
    from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier

    m = StepModel.model_validate_json(MODEL.read_text())
    m = m.model_copy(update={"comm": m.comm.model_copy(
        update={"barrier_exit": [(0.0, 300.0), (4e4, 1300.0)]})})
    s = add_straggler(m, 1, "forward", 40.0)
    j = after_wait_op(s)
    late = barrier_release_us(m.comm, 4e4) - barrier_release_us(m.comm, 0.0)
    assert noted_release_us(s, j) == pytest.approx(late) == pytest.approx(1000.0)
    back = insert_barrier(s)
    assert back.host.ops[after_wait_op(back)].resume_lag_us == pytest.approx(
        m.host.ops[after_wait_op(m)].resume_lag_us)


def test_barrier_records_without_a_step_record_to_bound_them_are_dropped(tmp_path):
    """A sidecar without step records has no wall to bound its barrier releases by
    (:mod:`calibration.sidecar_counts`): a 1e11 µs release on both ranks became
    ``comm.barrier_exit``, unsaid. Dropped, said once naming the file."""
    d = {"stepsim_sidecar": 1, "host_cores": 2, "loader": {"num_workers": 0}, "steps": [],
         "ddp": {"world_size": 2, "rank": 0, "backend": "gloo",
                 "barrier_probe": [{"wait_us": 0.0, "barrier_us": 500.0, "steps": 6},
                                   {"wait_us": 4e4, "barrier_us": 1e11, "steps": 6}]}}
    p = tmp_path / "rank0.sidecar.json"
    p.write_text(json.dumps(d))
    before = p.read_bytes()
    side = load_sidecar(p)
    assert side.ddp.barrier_probe == [] and p.read_bytes() == before
    (note,) = side.dropped
    assert note.startswith(f"{p.name}: dropped 2 of 2 'ddp.barrier_probe'")
    assert "which no step record bounds (the file holds none)" in note
