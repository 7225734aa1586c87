"""``scenarios.predict_many`` (``whatif``'s baseline and scenario in one executor call) gives
exactly ``predict``'s predictions, one by one: point, interval, every field to the last bit."""
from __future__ import annotations

import pytest

from stepsim.scenarios.predict import predict
from stepsim.scenarios.predict_many import predict_many
from stepsim.scenarios.stepcount import SE_TARGET
from stepsim.models.sim_work import step_cost_us
from stepsim.scenarios.transforms import FixOp, SetOp, apply_ops
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


CHOSEN = {   # steps None: every path of the chosen count (checked with predict, seed 1)
    "quick draws stand": cpu_model(0, produce_us=2000, cv=0.3,
                                   sources={"host.ops.1.dur_us": "assumed"}),
    "point again for the width, quick draws stand": cpu_model(
        2, cv=0.3, sources={"loader.produce": "assumed"}),
    "quick draws dropped": cpu_model(0, produce_us=3000, cv=0.5,
                                     sources={"loader.produce": "assumed"}),
    "point again and quick draws dropped": cpu_model(0, cv=0.8,
                                                     sources={"loader.produce": "assumed"}),
    "nothing drawn": cpu_model(1),
}


@pytest.mark.parametrize("name", sorted(CHOSEN))
@pytest.mark.parametrize("jobs", [1, 2])
def test_chosen_step_count_every_path(name, jobs):
    ops = [[], [SetOp(path="loader.num_workers", value=3)]]
    _same(CHOSEN[name], ops, steps=None, warmup=3, seed=1, intervals=8, jobs=jobs)


def test_chosen_step_count_errors_in_predicts_order():
    m = cpu_model(1)
    zero = [SetOp(path="host.ops.1.dur_us", value=0), SetOp(path="loader.produce",
                                                            value={"mean_us": 0})]
    with pytest.raises(ModelError) as want:
        predict(m, zero, steps=None, warmup=1, intervals=2, jobs=2)
    with pytest.raises(ModelError) as got:
        predict_many(m, [[], zero], steps=None, warmup=1, intervals=2, jobs=2)
    assert str(got.value) == str(want.value)


def test_chosen_step_count_sends_the_costliest_chunks_first(monkeypatch):
    import stepsim.scenarios.predict_many as pm

    calls = []

    def spy(fn, items, jobs=1, meanwhile=None):
        calls.append(list(items))
        if meanwhile is not None:
            meanwhile()
        return [fn(item) for item in items]

    monkeypatch.setattr(pm, "run_many", spy)
    m = cpu_model(0, produce_us=2000, cv=0.3, sources={"host.ops.1.dur_us": "assumed"})
    slow = [SetOp(path="host.ops.1.dur_us", value=8000), SetOp(path="loader.num_workers",
                                                                value=2)]
    predict_many(m, [[], slow], steps=None, warmup=3, seed=1, intervals=8, jobs=2)
    points, draws = calls
    assert [kind for kind, _ in points] == ["point", "point"]
    costs = [step_cost_us(c[0] if not c[1] else apply_ops(c[0], c[1])) * len(c[2]) * (c[3] + c[4])
             for _, c in draws]
    assert costs == sorted(costs, reverse=True) and len(set(costs)) > 1


def _point(p):
    """What a prediction's point is (its interval and what that is of aside)."""
    return p.mean_step_us, p.median_step_us, p.steps, p.count, p.summary


@pytest.mark.parametrize("name", ["point again for the width, quick draws stand",
                                  "point again and quick draws dropped"])
@pytest.mark.parametrize("jobs", [1, 2])
def test_chosen_points_are_predicts_for_any_interval(name, jobs):
    """fresh11's bug 5: ``whatif``'s points (``predict_many``'s, whose first round of draws is
    the pilot) are ``predict``'s one by one for whatever interval it is asked for: one run's,
    one run's re-measured window, pooled runs (``validate``). Both models' baselines relax the
    point's target to the pilot's width."""
    m = CHOSEN[name]
    ops = [[], [SetOp(path="loader.num_workers", value=3)]]
    got = predict_many(m, ops, steps=None, warmup=3, seed=1, intervals=8, jobs=jobs)
    assert got[0].count.target > SE_TARGET   # the relaxed case
    for runs, measured in ((1, None), (1, 30), (2, 40)):
        want = [predict(m, o, steps=None, warmup=3, seed=1, intervals=8, jobs=jobs, runs=runs,
                        measured_steps=measured) for o in ops]
        assert [_point(g) for g in got] == [_point(w) for w in want]
