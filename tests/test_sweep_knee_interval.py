"""The knee's advice at the last value of a sweep reads the intervals: a gain inside the
overlapping P10-P90 intervals of the last two points is not a reason to extend the sweep."""
from __future__ import annotations

from types import SimpleNamespace

from stepsim.models.params import StepModel
from stepsim.scenarios.sweep import SweepPoint, SweepResult, _knee

PATH = "loader.num_workers"


def _pred(mean_us: float, p10_us: float | None = None, p90_us: float | None = None):
    return SimpleNamespace(mean_step_us=mean_us, p10_step_us=p10_us, p90_step_us=p90_us,
                           has_interval=p10_us is not None, bottleneck="input",
                           bottleneck_label="input pipeline (DataLoader)")


def _knee_of(preds) -> str:
    points = tuple(SweepPoint({PATH: v}, p) for v, p in zip((1, 2, 4), preds))
    result = SweepResult({PATH: [1, 2, 4]}, "baseline", points, {})
    return _knee(result, PATH, StepModel(), tol=0.05).reason


def test_still_falling_without_intervals_says_extend():
    assert "extend the sweep" in _knee_of([_pred(1000.0), _pred(800.0), _pred(700.0)])


def test_gain_inside_overlapping_intervals_is_said_to_be():
    reason = _knee_of([_pred(1000.0, 950.0, 1050.0), _pred(800.0, 760.0, 840.0),
                       _pred(700.0, 660.0, 780.0)])
    assert "within the interval" in reason and "12.5%" in reason
    assert not reason.endswith("extend the sweep")


def test_disjoint_intervals_still_say_extend():
    reason = _knee_of([_pred(1000.0, 950.0, 1050.0), _pred(800.0, 780.0, 820.0),
                       _pred(700.0, 680.0, 720.0)])
    assert reason.endswith("extend the sweep")
