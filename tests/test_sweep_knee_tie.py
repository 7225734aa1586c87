"""A tie for the best along a sweep line names the smallest setting and says the others are
the same (the user's sweep: ``knee of loader.num_workers: 1 (33.4 ms; best 4 at 32.6 ms)``
where 2 and 4 both showed 32.6 ms)."""
from __future__ import annotations

import io
from dataclasses import asdict

from rich.console import Console

from stepsim.models.params import StepModel
from stepsim.report.planner import print_sweep
from stepsim.scenarios.predict import Prediction
from stepsim.scenarios.sweep import SweepPoint, SweepResult, _knee

PATH = "loader.num_workers"


def _pred(mean_us: float) -> Prediction:
    return Prediction("sweep point", mean_us, mean_us, "input", "input pipeline (DataLoader)",
                      None, 10, 3, 0)


def _result(steps_us) -> SweepResult:
    values = [0, 1, 2, 4][:len(steps_us)]
    points = tuple(SweepPoint({PATH: v}, _pred(s)) for v, s in zip(values, steps_us))
    r = SweepResult({PATH: values}, "baseline", points, {})
    return SweepResult(r.grid, r.base, points, {PATH: _knee(r, PATH, StepModel(), tol=0.05)})


def _printed(r: SweepResult, monkeypatch) -> str:
    buf = io.StringIO()
    monkeypatch.setattr("stepsim.report.planner.console", lambda: Console(file=buf, width=300))
    print_sweep(r)
    return buf.getvalue()


def test_a_tie_names_the_smallest_setting(monkeypatch):
    # 2 and 4 show 32.6 ms (4 a hair lower); 1 is the knee (within 5 %)
    r = _result([48_000.0, 33_400.0, 32_610.0, 32_580.0])
    k = r.knees[PATH]
    assert (k.value, k.best_value, k.best_ties) == (1, 2, (4,))
    assert k.best_step_us == 32_610.0
    line = next(x for x in _printed(r, monkeypatch).splitlines() if x.startswith("knee of"))
    assert "knee of loader.num_workers: 1 (33.4 ms; best 2 at 32.6 ms (4 the same))" in line
    assert asdict(k)["best_ties"] == (4,)       # sweep --json: the knee's fields


def test_a_clear_best_has_no_tie(monkeypatch):
    r = _result([48_000.0, 33_400.0, 32_900.0, 32_580.0])
    k = r.knees[PATH]
    assert (k.best_value, k.best_ties, k.best_step_us) == (4, (), 32_580.0)
    assert "best 4 at 32.6 ms):" in _printed(r, monkeypatch)
