"""A predicted change within the host's run-to-run noise says so (``whatif``, ``plan``): one
re-measured run of each setting cannot confirm it (the user's project: whatif predicted 2
workers 1.17x faster, and one setting re-measured a minute apart differed by 15 %). The noise
is the model's own: the P10–P90 half-width of one run's speed against another's, from its
measured ``host.speed_runs`` pooled with the stated range, else the stated range."""
from __future__ import annotations

import json
import math

import pytest
from scipy.stats import norm, t as student_t

from stepsim.models.host_drift import two_run_noise
from stepsim.models.params import StepModel, save_model
from tests.test_quirks import cli


def _model(speed_runs=(), nw: int = 0) -> StepModel:
    return StepModel.model_validate({
        "loader": {"num_workers": nw, "produce": {"mean_us": 10_000.0}, "host_cores": 4},
        "host": {"ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "name": "training step", "dur_us": 4000}],
                 "speed_runs": list(speed_runs)},
        "meta": {"ranges": {"host.cpu_scale": [0.94, 1.06]}}})


def test_two_run_noise_closed_form():
    # prior only: uniform 0.94–1.06 (the next run against the capture): P10–P90 0.952–1.048
    half, source = two_run_noise(_model())
    assert half == pytest.approx(0.048) and "stated range 0.94–1.06" in source
    # two measured runs (the user's model: 0.9955 and 0.8584) pooled with that range (2 dof)
    a, b = 0.9955, 0.8584
    s2 = (math.log(a) - math.log(b)) ** 2 / 2                 # sample variance, ddof 1
    s0 = math.log(1.048 / 0.952) / 2 / (norm.ppf(0.9) * math.sqrt(2))
    s_p = math.sqrt((2 * s0 * s0 + s2) / 3)
    want = math.exp(student_t.ppf(0.9, 3) * math.sqrt(2) * s_p) - 1
    half, source = two_run_noise(_model([a, b]))
    assert half == pytest.approx(want, rel=1e-9) and 0.15 < half < 0.17
    assert source.startswith("2 measured runs")
    assert two_run_noise(_model().model_copy(update={"meta": _model().meta.model_copy(
        update={"ranges": {}})})) is None


def _whatif(tmp_path, model: StepModel, *args: str) -> tuple[str, dict]:
    path = tmp_path / "m.json"
    save_model(model, path)
    common = ("--draws", "0", "--steps", "40", "--warmup", "5", "--jobs", "1", *args)
    rc, err, text = cli("whatif", path, *common)
    assert rc == 0, err
    rc, err, doc = cli("whatif", path, *common, "--json")
    assert rc == 0, err
    return " ".join(text.split()), json.loads(doc)


def test_whatif_says_a_change_within_the_noise(tmp_path):
    """produce 10 -> 11 ms at num_workers=0: about 1.07x slower, inside ±16 % (two measured
    runs 14 % apart) but outside ±4.8 % (the stated range alone)."""
    text, doc = _whatif(tmp_path, _model([0.9955, 0.8584]), "--set",
                        "loader.produce.mean_us=11000")
    assert 1.04 < 1 / doc["speedup"] < 1.10
    assert doc["within_host_noise"] is True and 15 < doc["host_noise_pct"] < 17
    assert "is within this host's run-to-run noise (±16 %" in text
    assert "one re-measured run of each setting cannot confirm it" in text
    text, doc = _whatif(tmp_path, _model(), "--set", "loader.produce.mean_us=11000")
    assert doc["within_host_noise"] is False and doc["host_noise_pct"] == pytest.approx(4.8)
    assert "run-to-run noise" not in text


def test_whatif_past_the_noise_says_nothing(tmp_path):
    text, doc = _whatif(tmp_path, _model([0.9955, 0.8584]), "--set", "loader.num_workers=1")
    assert doc["speedup"] > 1.25 and doc["within_host_noise"] is False
    assert "run-to-run noise" not in text


def test_plan_marks_each_move_against_the_noise(tmp_path):
    path = tmp_path / "m.json"
    save_model(_model([0.9955, 0.8584]), path)
    rc, err, out = cli("plan", path, "--draws", "0", "--steps", "40", "--warmup", "5",
                       "--jobs", "1", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert 15 < doc["host_noise_pct"] < 17 and doc["moves"]
    for m in doc["moves"]:
        assert m["within_host_noise"] == (abs(math.log(m["speedup"]))
                                          < math.log1p(doc["host_noise_pct"] / 100))


def test_drift_cap_says_what_the_hosts_drift_allows():
    """The demo's goal (coverage ≥ 80 % within a median width of 20 %) against the host's
    measured drift: 5 runs of log sd 0.1 (this project's 2-core machine measures 0.095) and
    the pooled mean of 2 re-measured runs need a P10–P90 about 27 % wide for host noise
    alone, so 20 % holds at most 68 % (t with 4 dof, scale 0.1 · sqrt(1/2 + 1/5)); the demo
    prints it instead of leaving the miss unexplained. A host as quiet as the stated range
    can meet it; without measured runs nothing is said."""
    from stepsim.models.host_drift import drift_cap
    from stepsim.models.host_speed import coverage_at_width

    m = _model([math.exp(x) for x in (0.0, 0.1, -0.1, 0.1, -0.1)])
    text, nums = drift_cap(m, 2)
    scale = 0.1 * math.sqrt(1 / 2 + 1 / 5)
    assert nums["needed_width_pct"] == pytest.approx(
        200 * (math.exp(student_t.ppf(0.9, 4) * scale) - 1))
    assert nums["coverage_at_goal_width"] == pytest.approx(
        2 * student_t.cdf(math.log(1.1) / scale, 4) - 1)
    assert 27 < nums["needed_width_pct"] < 28 and 0.67 < nums["coverage_at_goal_width"] < 0.69
    assert (nums["needed_width_pct"], nums["coverage_at_goal_width"]) == pytest.approx(
        tuple(v * f for v, f in zip(coverage_at_width(m.host.speed_runs, (0.94, 1.06), 2, 0.2),
                                    (100, 1))))
    assert "holds at most 68 % of settings" in text and "cannot be had" in text
    quiet, _ = drift_cap(_model([1.0, 1.01, 0.99, 1.0, 1.005]), 2)
    assert "cannot be had" not in quiet
    assert drift_cap(_model(), 2) is None
