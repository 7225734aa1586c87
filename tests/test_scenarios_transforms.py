"""The what-if language: paths, selectors, scale/remove, named fixes, scenario files.

Every transform is checked to be pure (the input model is unchanged) and to give a valid
model (it survives a JSON round trip and simulates)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.fixes import FIXES
from stepsim.scenarios.paths import get_value, set_value, split_path
from stepsim.scenarios.select import Selector, select
from stepsim.scenarios.transforms import FixOp, RemoveOp, ScaleOp, SetOp, apply_ops
from stepsim.scenarios.op_text import (load_scenario, parse_fix, parse_remove, parse_scale,
                                       parse_selector, parse_set)
from stepsim.simcore.errors import InputError, ModelError


def rich_model() -> StepModel:
    """Two ranks with skew, a worker DataLoader, a pageable copy, coarsened tasks, a DDP
    all-reduce on a comm stream, and a sync at the end of the step."""
    return StepModel.model_validate({
        "loader": {"num_workers": 2, "produce": {"mean_us": 8000, "cv": 0.2}, "host_cores": 4,
                   "unpickle_us": 200, "batch_bytes": 8_000_000},
        "host": {"ops": [
            {"kind": "next_batch"},
            {"kind": "launch", "name": "copy", "task": "h2d", "dur_us": 20},
            {"kind": "cpu", "name": "python fwd", "dur_us": 300, "phase": "forward"},
            {"kind": "launch", "name": "launch fwd", "task": "fwd", "dur_us": 400},
            {"kind": "launch", "name": "launch bwd", "task": "bwd", "dur_us": 600},
            {"kind": "launch", "name": "allreduce", "task": "ar", "dur_us": 30},
            {"kind": "launch", "name": "launch opt", "task": "opt", "dur_us": 200},
            {"kind": "sync", "name": "loss.item()", "task": "opt", "dur_us": 15},
        ]},
        "device": {"streams": {
            "7": [
                {"id": "h2d", "stream": "7", "name": "Memcpy HtoD (Pageable -> Device)",
                 "kind": "memcpy", "category": "memcpy", "dur_us": 1500, "bytes": 8_000_000,
                 "copy_kind": "h2d", "pinned": False},
                {"id": "fwd", "stream": "7", "name": "forward", "category": "gemm",
                 "phase": "forward", "dur_us": 5000,
                 "breakdown_us": {"gemm": 3000, "elementwise": 1500, "normalization": 500}},
                {"id": "bwd", "stream": "7", "name": "backward", "category": "gemm",
                 "phase": "backward", "dur_us": 9000,
                 "breakdown_us": {"gemm": 6000, "elementwise": 3000}},
                {"id": "opt", "stream": "7", "name": "optimizer", "category": "optimizer",
                 "phase": "optimizer", "dur_us": 800, "waits": ["ar"]},
            ],
            "comm": [{"id": "ar", "stream": "comm", "name": "allreduce", "kind": "collective",
                      "category": "communication", "phase": "backward", "dur_us": 2500,
                      "bytes": 50_000_000, "waits": ["bwd"]}],
        }},
        "comm": {"world_size": 2, "grad_params": [
            {"name": f"p{i}", "bytes": 10_000_000, "ready_task": "bwd"} for i in range(5)]},
        "ranks": [{"rank": 0}, {"rank": 1, "delay_us": 500, "phase_extra_us": {"forward": 1000}}],
        "meta": {"name": "rich", "sources": {"loader.produce": "inferred",
                                             "loader.unpickle_us": "assumed"}},
    })


def every_op() -> list:
    """At least one of every kind of operation, and every named fix."""
    sel = Selector.model_validate
    ops = [
        SetOp(path="loader.num_workers", value=4),
        SetOp(path="loader.produce.mean_us", value=9000),
        SetOp(path="ranks.1.delay_us", value=0),
        SetOp(path="device.tasks.fwd.dur_us", value=6000),
        SetOp(path="meta.notes.tried", value=True),
        SetOp(path="comm.bus_gbps", value=50.0),
        ScaleOp(select=sel({"category": "elementwise"}), factor=0.5),
        ScaleOp(select=sel({"phase": "forward"}), factor=1.2),
        ScaleOp(select=sel({"name": "back*"}), factor=0.8),
        ScaleOp(select=sel({"lane": "host"}), factor=0.5),
        ScaleOp(select=sel({"lane": "loader"}), factor=0.0),
        ScaleOp(select=sel({"rank": 1}), factor=0.5),
        ScaleOp(select=sel({"direction": "h2d"}), factor=0.0),
        ScaleOp(select=sel({"kind": "collective"}), factor=0.5),
        ScaleOp(select=sel({}), factor=1.1),
        RemoveOp(select=sel({"name": "allreduce"})),
        RemoveOp(select=sel({"category": "elementwise"})),
        RemoveOp(select=sel({"lane": "host", "kind": "sync"})),
        RemoveOp(select=sel({"lane": "host", "kind": "launch"})),
        RemoveOp(select=sel({"rank": [0, 1]})),
        RemoveOp(select=sel({"name": "optimizer"})),
        RemoveOp(select=sel({"direction": "h2d"})),
    ]
    args = {"mixed_precision": {"factor": 0.5}, "bucket_cap_mb": {"mb": 5},
            "straggler": {"rank": 1, "ms": 40}, "intra_op_threads": {"threads": 1}}
    ops += [FixOp(name=n, args=args.get(n, {})) for n in FIXES]
    return ops


@pytest.mark.parametrize("op", every_op(), ids=lambda o: o.describe())
def test_every_transform_is_pure_and_valid(op):
    model = rich_model()
    if isinstance(op, FixOp) and op.name == "intra_op_threads":
        # the fix needs an intra-op team: the host's forward work on 2 threads, half parallel
        data = model.model_dump()
        data["host"]["ops"][2].update(threads=2, capture_threads=2, parallel_fraction=0.5)
        model = StepModel.model_validate(data)
    before = model.model_dump_json()
    out = op.apply(model)
    assert model.model_dump_json() == before, "the input model was changed"
    assert out is not model
    again = StepModel.model_validate_json(out.model_dump_json())
    assert again == out
    simulate(out, steps=2, warmup=1, seed=0)


def test_every_fix_is_covered():
    assert {o.name for o in every_op() if isinstance(o, FixOp)} == set(FIXES)


# ---------------------------------------------------------------- paths ------------------
def test_split_path_brackets_hold_dots():
    assert split_path("device.tasks[a.b].dur_us") == ["device", "tasks", "a.b", "dur_us"]
    with pytest.raises(ModelError):
        split_path("loader..num_workers")


@pytest.mark.parametrize("path, named", [
    ("loader.num_worker", "num_worker"),
    ("loader.produce.mean", "mean"),
    ("ranks.7.delay_us", "no rank '7'"),
    ("host.ops.99.dur_us", "index 99 out of range"),
    ("device.tasks.nope.dur_us", "nope"),
    ("loader.num_workers.x", "int value"),
])
def test_unknown_path_is_an_error_that_names_it(path, named):
    with pytest.raises(ModelError, match=named):
        set_value(rich_model(), path, 1)


def test_set_names_the_bad_value():
    with pytest.raises(ModelError, match="loader.num_workers"):
        set_value(rich_model(), "loader.num_workers", -1)


def test_set_list_keys_rank_then_id_then_index():
    m = rich_model()
    assert get_value(m, "ranks.1").rank == 1
    assert get_value(m, "device.streams.7.fwd").id == "fwd"
    assert get_value(m, "device.streams.7.0").id == "h2d"
    assert get_value(m, "host.ops[loss.item()]").kind == "sync"


def test_set_mean_rescales_samples():
    m = set_value(rich_model(), "loader.produce", {"mean_us": 10, "samples_us": [5, 15]})
    out = set_value(m, "loader.produce.mean_us", 20)
    assert out.loader.produce.samples_us == [10, 30]


def test_set_num_workers_resizes_per_worker_produce():
    m = set_value(rich_model(), "loader.produce_by_worker", [{"mean_us": 1}, {"mean_us": 2}])
    out = set_value(m, "loader.num_workers", 3)
    assert [d.mean_us for d in out.loader.produce_by_worker] == [1, 2, 8000]
    assert [d.mean_us for d in set_value(m, "loader.num_workers", 1)
            .loader.produce_by_worker] == [1]


# ---------------------------------------------------------------- selectors / scale ------
def test_selector_resolution():
    m = rich_model()
    p = select(m, Selector(category=("elementwise",)))
    assert p.device == {"fwd": frozenset({"elementwise"}), "bwd": frozenset({"elementwise"})}
    assert not p.host and not p.loader
    p = select(m, Selector(phase=("forward",)))
    assert set(p.device) == {"fwd"} and [m.host.ops[i].name for i in p.host] == [
        "python fwd", "launch fwd"]
    assert select(m, Selector(lane=("loader",))).loader == {"produce", "pin", "unpickle"}
    with pytest.raises(ModelError, match="unknown lane"):
        select(m, Selector(lane=("stream:9",)))
    with pytest.raises(ModelError, match="cannot be combined"):
        select(m, Selector(rank=(1,), category=("gemm",)))


def test_scale_coarsened_category_closed_form():
    out = ScaleOp(select=Selector(category=("elementwise",)), factor=0.5).apply(rich_model())
    t = out.task_map()
    assert t["fwd"].breakdown_us == {"gemm": 3000, "elementwise": 750, "normalization": 500}
    assert t["fwd"].dur_us == 4250 and t["bwd"].dur_us == 7500


def test_scale_collective_under_cost_model_scales_bytes():
    m = set_value(rich_model(), "comm.bus_gbps", 100.0)
    out = ScaleOp(select=Selector(kind=("collective",)), factor=0.5).apply(m)
    assert out.task_map()["ar"].bytes == 25_000_000


def test_scale_selecting_nothing_is_an_error():
    with pytest.raises(ModelError, match="selects nothing"):
        ScaleOp(select=Selector(category=("attention",)), factor=0.5).apply(rich_model())


# ---------------------------------------------------------------- remove -----------------
def test_remove_rewires_waits_and_launches():
    out = RemoveOp(select=Selector(name=("allreduce",))).apply(rich_model())
    t = out.task_map()
    assert "ar" not in t and t["opt"].waits == ["bwd"]
    assert all(op.task != "ar" for op in out.host.ops)


def test_remove_retargets_a_sync_to_the_task_before():
    out = RemoveOp(select=Selector(name=("optimizer",))).apply(rich_model())
    assert out.host.ops[-1].kind == "sync" and out.host.ops[-1].task == "bwd"


def test_remove_partial_category_keeps_the_task():
    out = RemoveOp(select=Selector(category=("gemm",))).apply(rich_model())
    t = out.task_map()
    assert t["bwd"].breakdown_us == {"elementwise": 3000} and t["bwd"].category == "elementwise"


def test_remove_launch_op_makes_it_free():
    out = RemoveOp(select=Selector(lane=("host",), kind=("launch",))).apply(rich_model())
    launches = [op for op in out.host.ops if op.kind == "launch"]
    assert len(launches) == 5 and all(op.dur_us == 0 for op in launches)


_FILTERS = st.fixed_dictionaries({}, optional={
    "category": st.sampled_from(["gemm", "elementwise", "memcpy", "optimizer", "launch", "sync",
                                 "produce", "communication"]),
    "phase": st.sampled_from(["forward", "backward", "optimizer"]),
    "lane": st.sampled_from(["host", "loader", "device", "7", "comm"]),
    "kind": st.sampled_from(["kernel", "memcpy", "collective", "cpu", "launch", "sync"]),
    "name": st.sampled_from(["*", "f*", "allreduce", "Memcpy*"]),
})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(filters=_FILTERS, factor=st.floats(0, 3), remove=st.booleans())
def test_scale_and_remove_are_pure_for_any_selector(filters, factor, remove):
    model = rich_model()
    before = model.model_dump_json()
    op = RemoveOp(select=Selector(**filters)) if remove else ScaleOp(
        select=Selector(**filters), factor=factor)
    try:
        out = op.apply(model)
    except ModelError as e:
        assert "selects nothing" in str(e)
        return
    assert model.model_dump_json() == before
    StepModel.model_validate_json(out.model_dump_json())
    if not remove:
        total = sum(t.dur_us for t in out.task_map().values())
        assert total >= 0


# ---------------------------------------------------------------- fixes ------------------
def test_pin_memory_makes_the_copy_pinned_and_faster():
    out = FixOp(name="pin_memory", args={"speedup": 3}).apply(rich_model())
    t = out.task_map()["h2d"]
    assert out.loader.pin_memory and t.pinned and t.dur_us == 500


def test_cuda_graphs_collapses_launches_between_syncs():
    out = FixOp(name="cuda_graphs", args={"launch_us": 7}).apply(rich_model())
    kinds = [(op.kind, op.dur_us) for op in out.host.ops]
    assert kinds == [("next_batch", 0), ("launch", 20), ("launch", 7), ("launch", 0),
                     ("launch", 0), ("launch", 0), ("sync", 15)]


def test_cuda_graphs_keeps_cpu_work_outside_the_region():
    m = set_value(rich_model(), "host.ops.2.phase", "other")
    ops = FixOp(name="cuda_graphs").apply(m).host.ops
    assert [op.name for op in ops if op.kind == "cpu"] == ["python fwd"]   # before the region


def test_fused_elementwise_shrinks_launches_by_the_elementwise_share():
    out = FixOp(name="fused_elementwise", args={"factor": 0.5}).apply(rich_model())
    launch_bwd = next(op for op in out.host.ops if op.task == "bwd")
    assert launch_bwd.dur_us == pytest.approx(600 * (1 - 3000 / 9000 * 0.5))
    assert out.task_map()["bwd"].dur_us == 7500


def test_more_workers_and_grad_accumulation_set_values():
    assert FixOp(name="more_workers").apply(rich_model()).loader.num_workers == 4
    assert FixOp(name="grad_accumulation", args={"micro_batches": 8}).apply(
        rich_model()).comm.grad_accum_steps == 8


def test_remove_straggler_zeroes_skew():
    out = FixOp(name="remove_straggler").apply(rich_model())
    assert all(r.delay_us == 0 and not r.phase_extra_us for r in out.ranks)
    with pytest.raises(ModelError, match="does not apply"):
        FixOp(name="remove_straggler").apply(out)


def test_fix_arguments_are_checked():
    with pytest.raises(ModelError, match="unknown argument"):
        FixOp(name="pin_memory", args={"sped": 2})
    # a device fix missing an argument is refused where it applies (on a CPU model it says
    # first that it does not apply at all: tests/test_ddp_caveats.py)
    with pytest.raises(ModelError, match="factor"):
        FixOp(name="mixed_precision").apply(rich_model())
    with pytest.raises(ModelError, match="unknown fix 'pinmemory'"):
        FixOp(name="pinmemory")


def test_fixes_document_what_they_change():
    for f in FIXES.values():
        assert len(f.changes) > 40 and f.kind in ("systems", "numerics", "algorithm", "hardware")
        assert f.relieves


# ---------------------------------------------------------------- CLI spellings / files --
def test_cli_spellings():
    assert parse_set("loader.num_workers=4") == SetOp(path="loader.num_workers", value=4)
    assert parse_set("loader.pin_memory=true").value is True
    op = parse_scale("0.5", "category=gemm|conv,phase=forward")
    assert op.select.category == ("gemm", "conv") and op.factor == 0.5
    assert parse_remove("name=aten::copy_*").select.name == ("aten::copy_*",)
    f = parse_fix("cuda_graphs:launch_us=8,phases=forward|backward")
    assert f.args == {"launch_us": 8, "phases": ["forward", "backward"]}
    assert parse_selector("all") == Selector()
    for bad in ("loader.num_workers", "=4", "x="):
        with pytest.raises(ModelError, match="PATH=VALUE"):
            parse_set(bad)
    with pytest.raises(ModelError, match="unknown key 'categry'"):
        parse_selector("categry=gemm")
    with pytest.raises(ModelError, match="factor"):
        parse_scale("half", "category=gemm")


def test_apply_ops_in_order():
    m = rich_model()
    a = apply_ops(m, [SetOp(path="loader.num_workers", value=3), FixOp(name="more_workers")])
    assert a.loader.num_workers == 6


def _write(tmp_path, text: str):
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def test_scenario_file_round_trip(tmp_path):
    p = _write(tmp_path, """
name: faster input
ops:
  - {op: set, path: loader.num_workers, value: 8}
  - {op: scale, select: {category: elementwise}, factor: 0.5}
  - {op: remove, select: {lane: host, kind: sync}}
  - {op: fix, name: mixed_precision, args: {factor: 0.6}}
""")
    sc = load_scenario(p)
    assert [o.op for o in sc.ops] == ["set", "scale", "remove", "fix"]
    out = sc.apply(rich_model())
    assert out.loader.num_workers == 8


@pytest.mark.parametrize("body, named", [
    ("ops:\n  - {op: scale, select: {category: gemm}, facter: 0.5}", "unknown key 'facter'"),
    ("ops:\n  - {op: sett, path: a, value: 1}", "unknown op 'sett'"),
    ("opps: []", "unknown key 'opps'"),
    ("ops:\n  - {op: fix, name: warp_speed}", "unknown fix 'warp_speed'"),
    ("ops:\n  - {op: fix, name: pin_memory, args: {speed: 2}}", "speed: unknown argument"),
    ("ops:\n  - {op: scale, select: {categori: gemm}, factor: 1}", "unknown key 'categori'"),
    ("ops: [", "not valid YAML"),
    ("schema_version: 1\nhost: {}", "this is a StepModel"),
])
def test_bad_scenario_files_name_the_problem(tmp_path, body, named):
    with pytest.raises(InputError, match=named):
        load_scenario(_write(tmp_path, body))


def test_missing_scenario_file(tmp_path):
    with pytest.raises(InputError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")


def test_unknown_path_in_a_scenario_is_named_when_applied(tmp_path):
    sc = load_scenario(_write(tmp_path, "ops:\n  - {op: set, path: loader.nworkers, value: 2}"))
    with pytest.raises(ModelError, match="no field 'nworkers'"):
        sc.apply(rich_model())


def test_set_pin_memory_means_the_fix():
    """``--set loader.pin_memory=true`` and ``--fix pin_memory`` are one what-if."""
    from stepsim.scenarios.transforms import FixOp, SetOp, apply_ops

    m = rich_model().model_copy(deep=True)
    m.loader.pin_memory = False
    a = apply_ops(m, [SetOp(path="loader.pin_memory", value=True)])
    b = apply_ops(m, [FixOp(name="pin_memory")])
    assert a.model_dump() == b.model_dump()
