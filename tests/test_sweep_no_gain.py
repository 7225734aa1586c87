"""A sweep whose first value is fastest says what its table shows (the user's sweep of
num_workers=0..4: every point with workers 0.85x, bound by host compute, where the knee line
said "does not help by more than 5%: the step is bound by input pipeline"), and a
prefetch_factor at num_workers=0, which PyTorch refuses, shows as "-"."""
from __future__ import annotations

from stepsim.models.params import StepModel
from stepsim.scenarios.predict import Prediction
from stepsim.scenarios.sweep import SweepPoint, SweepResult, _knee
from tests.test_sweep_knee_tie import _printed

PATH = "loader.num_workers"
INPUT = ("input", "input pipeline (DataLoader)")
HOST = ("host", "host compute (CPU work on the host thread)")


def _pred(mean_us: float, bound=INPUT, model=None) -> Prediction:
    return Prediction("sweep point", mean_us, mean_us, *bound, None, 10, 3, 0, model=model)


def _result(points, grid) -> SweepResult:
    r = SweepResult(grid, "baseline", tuple(points), {})
    return SweepResult(grid, "baseline", r.points,
                       {p: _knee(r, p, StepModel(), tol=0.05) for p in grid})


def test_every_other_value_slower_is_said(monkeypatch):
    values = [0, 1, 2, 3, 4]
    pts = [SweepPoint({PATH: 0}, _pred(92_000.0))] + [
        SweepPoint({PATH: v}, _pred(108_000.0, HOST)) for v in values[1:]]
    line = next(x for x in _printed(_result(pts, {PATH: values}), monkeypatch).splitlines()
                if x.startswith("knee of"))
    assert "does not help" not in line and "input pipeline" not in line
    assert "no value is faster than loader.num_workers=0" in line
    assert "slower (0.85x vs it)" in line and "host compute" in line


def test_within_tolerance_names_both_bottlenecks(monkeypatch):
    pts = [SweepPoint({PATH: 0}, _pred(86_300.0)), SweepPoint({PATH: 1}, _pred(87_100.0, HOST))]
    line = next(x for x in _printed(_result(pts, {PATH: [0, 1]}), monkeypatch).splitlines()
                if x.startswith("knee of"))
    assert "does not help by more than 5%" in line
    assert "input pipeline (DataLoader) at 0, by host compute" in line


def test_prefetch_factor_without_workers_is_not_applicable(monkeypatch):
    m0 = StepModel()                                            # num_workers=0
    m1 = StepModel.model_validate({"loader": {"num_workers": 1}})
    grid = {PATH: [0, 1], "loader.prefetch_factor": [2, 4]}
    pts = [SweepPoint({PATH: 0, "loader.prefetch_factor": 2}, _pred(90_000.0, model=m0)),
           SweepPoint({PATH: 1, "loader.prefetch_factor": 2}, _pred(80_000.0, model=m1)),
           SweepPoint({PATH: 1, "loader.prefetch_factor": 4}, _pred(80_000.0, model=m1))]
    rows = [x.split("│") for x in _printed(_result(pts, grid), monkeypatch).splitlines()
            if x.count("│") >= 4]
    assert [c[1].strip() for c in rows] == ["-", "2", "4"]
