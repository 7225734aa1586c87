"""The simulated step count chosen from the mean's standard error (scenarios.stepcount): one
answer per question, whatever the seed."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel
from stepsim.scenarios.predict import predict
from stepsim.scenarios.stepcount import (FIRST_STEPS, SE_TARGET, mean_std_error_us,
                                         simulate_counted, step_bound)
from tests.conftest import run_cli, shared_traces

MS = 1000.0
STALLS = [1 * MS] * 20 + [100 * MS] * 5
"""A loader's measured next() times with stalls: 20 of 1 ms, 5 of 100 ms (mean 20.8 ms)."""


def stalled(train_us: float = 100 * MS) -> StepModel:
    """num_workers=0: each step loads a batch (resampled from ``STALLS``) on the main thread,
    then trains for ``train_us``; the long-run mean step is exactly mean(STALLS) + train_us."""
    return StepModel(loader=LoaderParams(num_workers=0,
                                         produce=DurationSpec.from_samples(STALLS)),
                     host=HostParams(ops=[HostOp(kind="next_batch"),
                                          HostOp(kind="cpu", dur_us=train_us, name="train")]))


def test_batch_means_standard_error_closed_forms():
    assert mean_std_error_us([5.0] * 100) == 0.0
    assert mean_std_error_us([5.0]) == 0.0
    # fewer steps than batches: one step a batch, the plain std / sqrt(n)
    x = [1.0, 2.0, 3.0, 4.0]
    assert mean_std_error_us(x) == pytest.approx(np.std(x, ddof=1) / 2)
    # 40 steps in 20 batches of two: alternating 0, 2 has batch means all 1, so no error,
    # while a slow drift (a queue draining) is seen by the batches
    assert mean_std_error_us([0.0, 2.0] * 20) == pytest.approx(0.0)
    drift = np.repeat([0.0, 10.0], 20)
    assert mean_std_error_us(drift) == pytest.approx(np.std(np.repeat([0.0, 10.0], 10), ddof=1)
                                                     / math.sqrt(20))


def test_a_deterministic_model_stops_at_the_first_batch():
    m = stalled().model_copy(update={"loader": LoaderParams(
        num_workers=0, produce=DurationSpec.constant(5 * MS))})
    _, c = simulate_counted(m, None, warmup=5, seed=0)
    assert c.chosen and c.steps == FIRST_STEPS and c.std_error_us == 0.0 and c.met


def test_two_seeds_agree_within_the_stated_error_and_on_the_closed_form():
    truth = np.mean(STALLS) + 100 * MS
    # 30 steps, as before: the seed moves the answer by several standard errors of nothing
    few = [simulate_counted(stalled(), 30, 5, s)[1].mean_us for s in (0, 7)]
    counts = [simulate_counted(stalled(), None, 5, s)[1] for s in (0, 7)]
    for c in counts:
        assert c.chosen and c.met and c.steps > 30, c
        assert c.rel_error <= SE_TARGET
        assert abs(c.mean_us - truth) <= 3 * c.std_error_us, (c, truth)
    a, b = counts
    assert abs(a.mean_us - b.mean_us) <= 3 * math.hypot(a.std_error_us, b.std_error_us)
    assert abs(a.mean_us - b.mean_us) < abs(few[0] - few[1])
    # the same seed is the same answer
    assert simulate_counted(stalled(), None, 5, 0)[1] == a


def test_given_steps_are_exact_and_the_bound_is_said():
    r, c = simulate_counted(stalled(), 30, 5, 0)
    assert c.steps == 30 and not c.chosen and r.job_step_us.size == 30
    assert "given" in c.describe()
    _, c = simulate_counted(stalled(), None, 5, 0, max_steps=60)
    assert c.steps == 60 and not c.met and "--steps" in c.describe()
    assert step_bound(stalled()) >= 1000


def test_predict_reports_the_count_and_draws_take_fewer_steps():
    p = predict(stalled(), [], seed=0, intervals=4)
    assert p.count is not None and p.count.met and p.steps == p.count.steps
    assert 0 < p.draw_steps <= p.steps and p.draw_std_error_us is not None
    d = p.to_dict()
    assert d["steps_chosen"] and d["std_error_pct"] <= d["std_error_target_pct"]
    assert d["std_error_target_pct"] >= 100 * SE_TARGET   # scenarios.interval_steps
    fixed = predict(stalled(), [], steps=30, seed=0, intervals=2)
    assert fixed.steps == 30 and fixed.draw_steps == 30 and not fixed.count.chosen


def test_simulate_cli_says_how_many_steps(tmp_path):
    path = tmp_path / "stalled.json"
    path.write_text(stalled().model_dump_json())
    r = run_cli("simulate", str(path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["steps_chosen"] and doc["std_error_met"] and doc["steps"] > 30
    r = run_cli("simulate", str(path), "--steps", "12", "--json")
    doc = json.loads(r.stdout)
    assert doc["steps"] == 12 and not doc["steps_chosen"]
    r = run_cli("simulate", str(path))
    assert "chosen so that the mean's standard error" in r.stdout


def test_input_stalled_real_trace_agrees_across_seeds(tmp_path):
    """param/resnet_kineto: a multi-process loader that stalls for up to 750 ms. At 30 steps
    the mean moved from 285 ms (seed 0) to 329 ms (seed 3); chosen counts agree."""
    from stepsim.fit import calibrate

    m = calibrate(shared_traces() / "param" / "resnet_kineto.json.gz")
    counts = [simulate_counted(m, None, 20, s)[1] for s in (0, 7)]
    a, b = counts
    assert abs(a.mean_us - b.mean_us) <= 3 * math.hypot(a.std_error_us, b.std_error_us)
    assert all(c.met or c.steps == step_bound(m) for c in counts), counts
