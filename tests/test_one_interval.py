"""One model's baseline gets one P10–P90 interval whichever verb prints it: ``whatif``,
``diagnose`` and ``plan`` draw the same number of Monte Carlo draws by default (``diagnose``
drew 8 where ``whatif`` drew 16, so the same baseline printed two intervals)."""
from __future__ import annotations

import inspect

from stepsim import api, limits
from stepsim.cli_args import parser
from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel
from stepsim.scenarios import diagnose as diagnose_tree
from stepsim.scenarios.predict import DEFAULT_DRAWS


def _model() -> StepModel:
    """Main-thread loading (3 ms, varying) then 2 ms of CPU work: the loader's produce time
    assumed, so the interval has a width."""
    m = StepModel(
        loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=3000.0, cv=0.2),
                            host_cores=1),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=2000.0)]))
    m.meta.sources["loader.produce"] = "assumed"
    return m


def test_every_verb_defaults_to_the_same_draws():
    assert limits.DEFAULT_DRAWS == DEFAULT_DRAWS
    p = parser()
    for verb in ("whatif", "diagnose", "validate", "plan", "report"):
        extra = {"validate": ["T"], "report": ["-o", "r.html"]}.get(verb, [])
        args = p.parse_args([verb, "m.json", *extra])
        assert args.draws == DEFAULT_DRAWS, verb
    for f in (api.whatif, api.diagnose, api.validate, api.plan, api.report,
              diagnose_tree.diagnose):
        assert inspect.signature(f).parameters["draws"].default == DEFAULT_DRAWS, f


def test_diagnose_and_whatif_print_one_interval_for_one_baseline():
    m = _model()
    kw = {"steps": 40, "warmup": 5, "seed": 3, "jobs": 1}
    w = api.whatif(m, set=["loader.produce.mean_us=2500"], **kw).baseline
    d = api.diagnose(m, **kw).diagnosis.baseline
    assert w.draws == d.draws == DEFAULT_DRAWS
    assert w.p90_step_us > w.p10_step_us
    assert (d.p10_step_us, d.p50_step_us, d.p90_step_us) == (
        w.p10_step_us, w.p50_step_us, w.p90_step_us)


def test_each_interval_says_what_it_is_of():
    from stepsim.scenarios.predict import interval_scope, predict

    assert interval_scope() == "one run's mean step"
    assert interval_scope(2, 41) == "the pooled mean step of 2 runs over 41 measured steps"
    assert interval_scope(1, 21) == "one run's mean step over 21 measured steps"
    m = _model()
    p = predict(m, [], steps=30, warmup=5, intervals=4, runs=2, measured_steps=41)
    assert p.scope == interval_scope(2, 41) == p.to_dict()["interval_of"]


def test_the_demo_row_is_what_validate_gives(cpu_run_nw1, tmp_path):
    """The demo's table row of a setting is `stepsim validate` of that setting's runs: the
    same point (steps chosen as every verb chooses them, not 120) and the same interval."""
    from stepsim.demo.run import _validated_row
    from stepsim.models.params import load_model

    api.calibrate(cpu_run_nw1, output=tmp_path / "m.json")
    m = load_model(tmp_path / "m.json")
    v = api.validate(m, [cpu_run_nw1], set=["loader.num_workers=1"], jobs=1).prediction
    row = _validated_row(m, {1: [cpu_run_nw1]}, 1, tmp_path, 0, 1.0, [], [])
    assert row["predicted_mean_ms"] == v.mean_step_us / 1e3
    assert (row["predicted_p10_ms"], row["predicted_p90_ms"]) == (
        v.p10_step_us / 1e3, v.p90_step_us / 1e3)
