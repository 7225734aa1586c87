"""``scenarios.predict_many`` (``whatif``'s baseline and scenario in one executor call) gives
exactly ``predict``'s predictions, one by one: point, interval, every field to the last bit."""
from __future__ import annotations

import pytest

from stepsim.scenarios.predict import predict
from stepsim.scenarios.predict_many import predict_many
from stepsim.scenarios.transforms import FixOp, SetOp
from stepsim.simcore.errors import ModelError
from tests.test_planner import cpu_model
from tests.test_scenarios_transforms import rich_model


def _same(model, ops_list, **kw) -> None:
    got = predict_many(model, ops_list, **kw)
    want = [predict(model, ops, **kw) for ops in ops_list]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w
        assert repr(g) == repr(w)   # floats to the last digit, the summary's holes included
        assert g.to_dict() == w.to_dict()
        assert g.model == w.model


@pytest.mark.parametrize("jobs", [1, 2])
def test_rich_model_with_draws(jobs):
    _same(rich_model(), [[], [FixOp(name="pin_memory")]], steps=10, warmup=3, seed=2,
          intervals=5, jobs=jobs)


def test_uncertain_cpu_model_and_no_draws():
    m = cpu_model(2, cv=0.2, sources={"loader.produce": "inferred"})
    ops = [[], [SetOp(path="loader.num_workers", value=4)]]
    _same(m, ops, steps=12, warmup=3, seed=0, intervals=6, jobs=2)
    _same(m, ops, steps=12, warmup=3, seed=0, intervals=0, jobs=2)


def test_deterministic_model_interval_is_the_point():
    m = cpu_model(1)   # nothing uncertain, nothing sampled: predict draws nothing
    _same(m, [[], [SetOp(path="loader.num_workers", value=4)]], steps=12, warmup=3, seed=0,
          intervals=8, jobs=2)


def test_chosen_step_count_falls_back_to_one_by_one():
    m = cpu_model(2, cv=0.2, sources={"loader.produce": "inferred"})
    _same(m, [[], [SetOp(path="loader.num_workers", value=3)]], steps=None, warmup=3, seed=1,
          intervals=4, jobs=2)


def test_errors_in_predicts_order():
    m = cpu_model(1)
    zero = [SetOp(path="host.ops.1.dur_us", value=0), SetOp(path="loader.produce",
                                                            value={"mean_us": 0})]
    with pytest.raises(ModelError) as want:
        predict(m, zero, steps=5, warmup=1, intervals=2, jobs=2)
    with pytest.raises(ModelError) as got:
        predict_many(m, [[], zero], steps=5, warmup=1, intervals=2, jobs=2)
    assert str(got.value) == str(want.value)
