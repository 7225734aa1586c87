"""Predictions, intervals, sweeps, simulated ceilings and the fix chain.

Closed-form anchors use a CPU model whose step is ``max(produce / workers, host work)`` when
the cores suffice."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.models.params import StepModel, load_model
from stepsim.scenarios import REFERENCE
from stepsim.scenarios.ceiling import ceilings, components
from stepsim.scenarios.plan import plan
from stepsim.scenarios.predict import draw_plan, perturb, predict, uncertain_params
from stepsim.scenarios.sweep import parse_axis, sweep
from stepsim.scenarios.transforms import FixOp, ScaleOp, SetOp, apply_ops
from stepsim.scenarios.op_text import load_scenario
from stepsim.simcore.errors import ModelError
from tests.test_scenarios_transforms import rich_model

SIM = {"steps": 12, "warmup": 3, "seed": 0}


def cpu_model(workers: int = 1, produce_us: float = 10_000, cv: float = 0.0, cores: int = 8,
              sources: dict | None = None) -> StepModel:
    """The demo's shape: ``next()`` then one CPU op of 4 ms on the host thread."""
    return StepModel.model_validate({
        "loader": {"num_workers": workers, "produce": {"mean_us": produce_us, "cv": cv},
                   "host_cores": cores},
        "host": {"ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "name": "train step", "dur_us": 4000}]},
        "meta": {"name": "cpu", "sources": sources or {}},
    })


# ---------------------------------------------------------------- predict ----------------
def test_predict_closed_form_workers():
    assert predict(cpu_model(1), **SIM).mean_step_us == pytest.approx(10_000)
    p = predict(cpu_model(1), [SetOp(path="loader.num_workers", value=4)], **SIM)
    assert p.mean_step_us == pytest.approx(4000)
    assert p.bottleneck == "host_compute" and p.what == "set loader.num_workers=4"


def test_predict_does_not_change_the_model_and_is_deterministic():
    m = rich_model()
    before = m.model_dump_json()
    a = predict(m, [FixOp(name="pin_memory")], intervals=4, **SIM)
    b = predict(m, [FixOp(name="pin_memory")], intervals=4, **SIM)
    assert m.model_dump_json() == before
    assert a == b


def test_uncertain_params_defaults_and_ranges():
    m = cpu_model(sources={"loader.produce": "inferred", "loader.host_cores": "assumed",
                           "host.ops.1.dur_us": "measured", "device.idle": "inferred"})
    varied, skipped = uncertain_params(m)
    assert varied == {"loader.produce": (0.8, 1.2), "loader.host_cores": (0.5, 1.5)}
    assert "device.idle" in skipped
    m = m.model_copy(update={"meta": m.meta.model_copy(update={"ranges": {
        "loader.produce": (0.9, 1.3), "host.ops.1.dur_us": (1.0, 2.0)}})})
    varied, _ = uncertain_params(m)
    assert varied["loader.produce"] == (0.9, 1.3) and varied["host.ops.1.dur_us"] == (1.0, 2.0)


def test_perturb_kinds():
    m = rich_model()
    out = perturb(m, {"loader.produce": 2.0, "loader.host_cores": 0.1,
                      "device.tasks.fwd": 0.5, "ranks.1.phase_extra_us": 3.0})
    assert out.loader.produce.mean_us == 16_000 and out.loader.host_cores == 1
    assert out.task_map()["fwd"].breakdown_us["gemm"] == 1500
    assert out.ranks[1].phase_extra_us == {"forward": 3000}
    with pytest.raises(ModelError, match="cannot be varied"):
        perturb(m, {"loader.pin_memory": 2.0})


def test_draw_plan_depends_only_on_seed_and_paths():
    m = cpu_model(sources={"loader.produce": "assumed"})
    assert draw_plan(m, 5, 3) == draw_plan(m, 5, 3) != draw_plan(m, 5, 4)
    assert all(0.5 <= f["loader.produce"] <= 1.5 for f, _ in draw_plan(m, 20, 0))


def prior_model(workers: int = 1) -> StepModel:
    """A CPU loop on 2 cores whose interference coefficient and run-to-run speed are stated
    priors (as calibration without a probe leaves them)."""
    return StepModel.model_validate({
        "loader": {"num_workers": workers, "produce": {"mean_us": 30_000, "cv": 0.05},
                   "host_cores": 2, "corun_ref": 0.4},
        "host": {"interference": 0.15, "interference_range": [0.0, 0.3], "ops": [
            {"kind": "next_batch"},
            {"kind": "cpu", "name": "train step", "dur_us": 12_000, "corun_ref": 0.5}]},
        "meta": {"sources": {"host.interference": "assumed", "host.cpu_scale": "assumed"},
                 "ranges": {"host.cpu_scale": [0.98, 1.02]}},
    })


def test_interval_coverage_on_simulated_ground_truth():
    """Truths drawn from the stated priors (interference coefficient, host speed), simulated
    long at a setting with more workers than cores; the P10–P90 interval of the prediction
    from the prior model contains the true mean about 80 % of the time, and an interval that
    leaves the interference prior out misses far more often."""
    m = prior_model()
    rng = np.random.default_rng(7)
    ops = [SetOp(path="loader.num_workers", value=4)]
    hit, hit_without = 0, 0
    trials = 12
    no_prior = m.model_copy(update={"host": m.host.model_copy(
        update={"interference_range": None})})
    for i in range(trials):
        a, f = rng.uniform(0.0, 0.3), rng.uniform(0.98, 1.02)
        truth = m.model_copy(update={"host": m.host.model_copy(
            update={"interference": a, "cpu_scale": f})})
        true_us = predict(truth, ops, steps=60, warmup=20, seed=100 + i).mean_step_us
        p = predict(m, ops, steps=60, warmup=20, seed=i, intervals=12)
        q = predict(no_prior, ops, steps=60, warmup=20, seed=i, intervals=12)
        hit += p.covers(true_us)
        hit_without += q.covers(true_us)
    print(f"coverage {hit}/{trials}, without the interference prior {hit_without}/{trials}")
    assert 0.6 <= hit / trials <= 1.0
    assert hit_without < hit


def test_interval_need_not_contain_the_point():
    """The interval is the draws' P10–P90 as they fall: with a convex response to an assumed
    produce time that only slows (range 1–1.5), every draw is slower than the point."""
    m = cpu_model(1, sources={"loader.produce": "assumed"})
    m = m.model_copy(update={"meta": m.meta.model_copy(update={"ranges": {
        "loader.produce": (1.2, 1.5)}})})
    p = predict(m, intervals=8, **SIM)
    assert p.p10_step_us > p.mean_step_us and not p.covers(p.mean_step_us)


def test_interval_widens_with_assumed_parameters():
    narrow = predict(cpu_model(1, sources={"loader.produce": "inferred"}), intervals=8, **SIM)
    wide = predict(cpu_model(1, sources={"loader.produce": "assumed"}), intervals=8, **SIM)
    assert (wide.p90_step_us - wide.p10_step_us) > (narrow.p90_step_us - narrow.p10_step_us) > 0


# ---------------------------------------------------------------- sweep ------------------
def test_parse_axis():
    assert parse_axis("loader.num_workers=0,1,2,4") == ("loader.num_workers", [0, 1, 2, 4])
    assert parse_axis("loader.produce={mean_us: 1, cv: 0}, {mean_us: 2}")[1][1] == {"mean_us": 2}
    for bad in ("loader.num_workers", "x=1,1"):
        with pytest.raises(ModelError):
            parse_axis(bad)


def test_sweep_equals_the_individual_runs():
    m = cpu_model(0, cv=0.2, sources={"loader.produce": "inferred"})
    grid = {"loader.num_workers": [0, 1, 2, 4], "loader.prefetch_factor": [1, 2]}
    base = [ScaleOp(select={"lane": "host"}, factor=1.0)]
    r = sweep(m, grid, base, intervals=3, jobs=2, **SIM)
    # (0 workers, prefetch_factor 1) is left out: PyTorch's DataLoader refuses it
    assert len(r.points) == 7 and {"loader.num_workers": 0, "loader.prefetch_factor": 1} \
        not in [pt.values for pt in r.points] and "1 grid point(s) left out" in r.notes[0]
    for pt in r.points:
        ops = base + [SetOp(path=k, value=v) for k, v in pt.values.items()]
        assert pt.prediction == predict(m, ops, intervals=3, brief=True, **SIM)
        full = predict(m, ops, intervals=3, **SIM)
        assert (pt.prediction.mean_step_us, pt.prediction.bottleneck, pt.prediction.p90_step_us) \
            == (full.mean_step_us, full.bottleneck, full.p90_step_us)


def test_sweep_knee_workers():
    r = sweep(cpu_model(0), {"loader.num_workers": [0, 1, 2, 3, 4, 8]}, **SIM)
    k = r.knees["loader.num_workers"]
    assert k.value == 3 and k.step_us == pytest.approx(4000, rel=0.02)
    assert "input pipeline" in k.reason and "host compute" in k.reason


def test_sweep_knee_still_improving_and_useless():
    r = sweep(cpu_model(0), {"loader.num_workers": [0, 1]}, **SIM)
    assert "still improving" in r.knees["loader.num_workers"].reason
    r = sweep(cpu_model(4), {"loader.prefetch_factor": [1, 2, 4]}, **SIM)
    assert "does not help" in r.knees["loader.prefetch_factor"].reason


def test_sweep_rejects_unknown_path_before_running():
    with pytest.raises(ModelError, match="num_worker"):
        sweep(cpu_model(), {"loader.num_worker": [1, 2]}, **SIM)


# ---------------------------------------------------------------- ceilings ---------------
def test_ceilings_are_what_the_simulation_gives_when_removed():
    m = rich_model()
    r = ceilings(m, **SIM)
    base = r.baseline.mean_step_us
    comps = components(m)
    assert {x.key for x in r.rows} == set(comps)
    for x in r.rows:
        free = predict(m, comps[x.key], **SIM).mean_step_us
        assert x.free_step_us == pytest.approx(free)
        assert x.ceiling <= base / free + 1e-9
    assert [x.ceiling for x in r.rows] == sorted((x.ceiling for x in r.rows), reverse=True)


def test_a_partial_improvement_never_beats_the_ceiling():
    m = cpu_model(1)
    r = ceilings(m, **SIM)
    top = r.top
    assert top.key == "input" and top.ceiling == pytest.approx(2.5)
    half = predict(m, [ScaleOp(select={"lane": "loader"}, factor=0.5)], **SIM)
    assert r.baseline.mean_step_us / half.mean_step_us <= top.ceiling + 1e-9


def test_ceiling_simulated_differs_from_subtracted_when_hidden():
    """Input hidden behind a longer host step: the share-based ceiling says nothing, the
    simulation agrees; kernel line absent on a CPU model."""
    r = ceilings(cpu_model(4, produce_us=8000), **SIM)
    row = next(x for x in r.rows if x.key == "input")
    assert row.ceiling == pytest.approx(1.0, abs=0.01)
    assert r.kernel_ceiling is None


# ---------------------------------------------------------------- plan -------------------
def test_plan_reproduces_the_case_study():
    m = load_model(REFERENCE / "case_study.yaml")
    p = plan(m, steps=20, warmup=4, seed=0)
    assert [mv.op.name for mv in p.moves] == ["more_workers", "pin_memory", "cuda_graphs",
                                              "fused_elementwise"]
    tops = [p.largest_ceiling.key] + [mv.largest_ceiling.key for mv in p.moves]
    assert tops == ["input", "h2d", "launch", "compute:elementwise", "compute:gemm"]
    assert len(set(tops)) == 5
    assert p.baseline.mean_step_us == pytest.approx(380_000, rel=0.03)
    assert p.final_prediction.mean_step_us == pytest.approx(166_000, rel=0.02)
    assert p.speedup == pytest.approx(2.29, abs=0.06)
    assert p.category_share["gemm"] > 0.5
    assert "mixed_precision (numerics)" in p.stop and "parallelism" in p.stop
    steps = [p.baseline.mean_step_us] + [mv.prediction.mean_step_us for mv in p.moves]
    assert steps == sorted(steps, reverse=True)


def test_reference_fixes_scenario_matches_the_plan():
    m = load_model(REFERENCE / "case_study.yaml")
    ops = load_scenario(REFERENCE / "case_study_fixes.yaml").ops
    assert predict(m, ops, **SIM).mean_step_us == pytest.approx(166_000, rel=0.01)


def test_plan_stops_when_only_numerics_would_help_and_can_be_allowed():
    m = load_model(REFERENCE / "case_study.yaml")
    ops = load_scenario(REFERENCE / "case_study_fixes.yaml").ops
    p = plan(m, ops, **SIM)
    assert not p.moves and "numerics" in p.stop
    p = plan(m, ops, allow=("systems", "numerics"),
             fix_args={"mixed_precision": {"factor": 0.5}}, max_moves=1, **SIM)
    assert [mv.op.name for mv in p.moves] == ["mixed_precision"]


def test_plan_on_the_cpu_model_picks_the_knee_of_workers():
    p = plan(cpu_model(0), **SIM)
    assert [mv.op.describe() for mv in p.moves] == ["fix more_workers(workers=3)"]
    assert p.final_prediction.mean_step_us == pytest.approx(4000, rel=0.02)


def test_plan_rejects_bad_fix_args():
    with pytest.raises(ModelError, match="unknown argument"):
        plan(cpu_model(), fix_args={"more_workers": {"worker": 2}}, **SIM)


def test_plan_with_intervals():
    p = plan(cpu_model(0, sources={"loader.produce": "assumed"}), draws=4, **SIM)
    assert p.baseline.has_interval and all(mv.prediction.has_interval for mv in p.moves)


def test_apply_ops_of_a_plan_reproduces_its_prediction():
    m = cpu_model(0)
    p = plan(m, **SIM)
    assert predict(apply_ops(m, p.ops), **SIM).mean_step_us == pytest.approx(
        p.final_prediction.mean_step_us)


def test_a_deterministic_model_is_not_drawn():
    p = predict(cpu_model(1, sources={"loader.pin_memory": "assumed"}), intervals=8, **SIM)
    assert p.draws == 0 and p.p10_step_us == p.p50_step_us == p.p90_step_us == p.mean_step_us
    assert not p.skipped


def test_plan_goes_down_the_ranking_when_the_top_has_no_fix():
    """GEMMs dominate (no systems fix); the straggler is fixable and still worth it."""
    m = StepModel.model_validate({
        "host": {"ops": [{"kind": "launch", "task": "mm", "dur_us": 10},
                         {"kind": "launch", "task": "ar", "dur_us": 10},
                         {"kind": "sync", "task": "ar"}]},
        "device": {"streams": {
            "7": [{"id": "mm", "stream": "7", "category": "gemm", "dur_us": 50_000}],
            "comm": [{"id": "ar", "stream": "comm", "kind": "collective",
                      "category": "communication", "dur_us": 5000, "waits": ["mm"]}]}},
        "comm": {"world_size": 2},
        "ranks": [{"rank": 0}, {"rank": 1, "delay_us": 10_000}],
    })
    p = plan(m, **SIM)
    assert p.largest_ceiling.key == "compute:gemm"
    assert [(mv.op.name, mv.relieves.key) for mv in p.moves] == [
        ("remove_straggler", "arrival_skew")]
    assert p.final_prediction.mean_step_us == pytest.approx(55_020, rel=0.01)
    assert "mixed_precision" in p.stop


def test_a_host_running_ahead_is_held_to_the_device_pace():
    def gpu(sync: bool) -> StepModel:
        return StepModel.model_validate({
            "loader": {"num_workers": 2, "produce": {"mean_us": 2000}, "host_cores": 4},
            "host": {"ops": [{"kind": "next_batch"},
                             {"kind": "launch", "task": "mm", "dur_us": 10},
                             {"kind": "cpu", "dur_us": 1000}]
                     + ([{"kind": "sync", "task": "mm"}] if sync else [])},
            "device": {"streams": {"7": [{"id": "mm", "stream": "7", "category": "gemm",
                                          "dur_us": 20_000}]}}})
    free = predict(gpu(False), **SIM)
    # nothing makes the host wait, yet the step is the device's pace, not the host's 1 ms
    assert free.device_floor_us == 20_000
    assert free.mean_step_us == pytest.approx(20_000, rel=0.01) and not free.runs_ahead
    synced = predict(gpu(True), **SIM)
    assert synced.mean_step_us == pytest.approx(20_010, rel=0.01) and not synced.runs_ahead


def test_plan_says_when_it_ran_out_of_moves():
    p = plan(load_model(REFERENCE / "case_study.yaml"), max_moves=2, **SIM)
    assert len(p.moves) == 2 and "max_moves" in p.stop
