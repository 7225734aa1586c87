"""Bad input on session 6's new readings (break16): the loader's drift check on the gloo path
(:func:`calibration.gloo_loader.at_loader_drift`), the single-process window check
(:mod:`calibration.single_window`) and the warnings' ranking (:mod:`stepsim.warning_order`).
A reading from records that cannot be right is left out and said in one warning; a warning
whose numbers do not read as numbers is kept, unsized, never a traceback."""
import json
import shutil
from pathlib import Path

import pytest

from stepsim.calibration.single_window import single_drift
from stepsim.warning_order import printed_texts, rank_one, ranked
from tests.test_quirks import cli
from tests.test_single_window import _side

JOB = Path(__file__).parent / "data" / "gloo_loader_job"


def _window_end(d: dict) -> float:
    last = [s for s in d["steps"] if s.get("profiled")][-1]
    return last["t_start_us"] + last["wall_us"]


@pytest.mark.parametrize("where, said", [("after", "×0 the CPU"), ("window", "×inf the CPU")])
def test_a_jobs_batches_at_no_cpu_are_no_loader_drift_and_said(tmp_path, where, said):
    """Every rank's batches after the window (or in it) at 0 µs of CPU: the ratio ×0 (×inf)
    was left out without a word; now left out and said once, the job calibrates (exit 0), its
    files unchanged."""
    dst = tmp_path / "job"
    shutil.copytree(JOB, dst)
    for f in sorted(dst.glob("rank*/sidecar.json")):
        d = json.loads(f.read_text())
        end = _window_end(d)
        for r in d["produce"]:
            if (r["t_end_us"] > end) == (where == "after"):
                r["cpu_us"] = r["proc_cpu_us"] = 0.0
        f.write_text(json.dumps(d))
    before = {f: f.read_bytes() for f in dst.rglob("*") if f.is_file()}
    rc, err, _ = cli("calibrate", dst, "-o", tmp_path / "m.json")
    assert rc == 0 and "Traceback" not in err, err
    got = [w for w in printed_texts(err) if "ignored the loader's drift check" in w]
    assert len(got) == 1 and said in got[0] and "66 batches after" in got[0], got
    assert "loader_drift" not in json.loads((tmp_path / "m.json").read_text())["meta"]["notes"]
    assert before == {f: f.read_bytes() for f in dst.rglob("*") if f.is_file()}


def test_a_captures_later_steps_beyond_a_hosts_speed_are_said():
    """The unprofiled steps after the window at 0.05 ms of CPU outside next() against 25 ms
    profiled at factor 0.8: d = 0.05 / 20 = 0.0025, no host's speed: None and one warning;
    inside the range (20 ms after) nothing is said."""
    said: list[str] = []
    assert single_drift(_side(after_ms=(0.05,) * 20), 0.8, said) is None
    assert len(said) == 1 and "×0.0025" in said[0] and "20 unprofiled steps" in said[0], said
    quiet: list[str] = []
    assert single_drift(_side(), 0.8, quiet) is not None and quiet == []


TAIL = ("the profiled window is not the run's steps (measured): its 8 steps took {} ms on "
        "average, the 30 unprofiled steps after it 5 ms; step work scaled × 0.9, adding {} ms "
        "to the step")


@pytest.mark.parametrize("took, adding", [("5", "+.,"), ("5", "-1e308"), ("5", "+" + "9" * 400)])
def test_a_warnings_numbers_that_do_not_read_leave_it_unsized(took, adding):
    """``+.,`` raised ValueError out of the ranking (a traceback in calibrate); ``-1e308`` ms
    (-inf µs) or a 400-digit effect made ``warnings_ranked`` invalid JSON (inf). Each is kept
    whole, unsized."""
    text = TAIL.format(took, adding)
    r = rank_one(text)
    assert r.text == text and r.effect_us is None
    json.dumps([x.to_dict(1e4) for x in ranked([text])], allow_nan=False)


def test_a_warnings_odd_number_in_a_sized_rule_falls_to_unsized():
    """The page-fault and profiler rules with ``...`` where their numbers are: unsized, no
    error."""
    for text in ("page faults (measured): a step re-faulted up to 5 pages x = ... ms of CPU",
                 "profiler overhead (measured): the training step's durations are the profiled "
                 "window's × ...."):
        assert rank_one(text).effect_us is None
