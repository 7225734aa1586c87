"""calibrate's replay-off warning says its size and what the user can do: where no warning
sizes a cause, that the gap is unmodelled and how to measure the level (fresh14, 2026-12-07:
"+12.0 % vs measured ... see the warnings above", and no warning above gave a size)."""
from __future__ import annotations

from pathlib import Path

from stepsim.results import Calibration
from stepsim.warning_order import Ranked

REPO = Path(__file__).resolve().parents[1]


def _cal(ranked=()) -> Calibration:
    from stepsim.api import load_model

    m = load_model(str(REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"))
    meta = m.meta.model_copy(update={"measured_step_us": [100_000.0, 100_000.0]})
    m = m.model_copy(update={"meta": meta, "replay": None})
    return Calibration(model=m, output=None, warnings=(), window=None,
                       steady_mean_us=112_000.0, steady_median_us=112_000.0, ranked=ranked)


def test_an_unsized_replay_gap_is_said_unmodelled_with_what_to_do():
    w = _cal().steady_warning
    assert "+12 % off the measured one (112.0 against 100.0 ms)" in w
    assert "no warning above sizes a cause, so the gap is unmodelled" in w
    assert "validate a fresh run of this setting" in w and "see the warnings above" not in w
    # a sized warning above: pointed at, not called unmodelled
    sized = _cal((Ranked("x", "x", effect_us=9_000.0),)).steady_warning
    assert "[step ...] size what moves it" in sized and "unmodelled" not in sized
    # a noted one (changes nothing on the step) sizes nothing
    assert "unmodelled" in _cal((Ranked("x", "x", effect_us=9_000.0, noted=True),)).steady_warning
