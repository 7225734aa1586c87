"""An interval draws only what the model in that setting reads (scenarios.noop.unread_params,
scenarios.draws.uncertain_params): loader.pin_gbps without pinned memory, the workers' fields
without workers, and a step's parallel_efficiency on its captured threads are not sources."""
from __future__ import annotations

import pytest

from stepsim.models.params import DeviceParams, DeviceTask, HostOp, StepModel
from stepsim.scenarios.draws import draw_plan, uncertain_params
from stepsim.scenarios.predict import predict
from stepsim.scenarios.op_text import parse_fix, parse_set
from tests.test_host_physics import host_model


def _model(nw: int, pin: bool) -> StepModel:
    m = host_model(nw, 2, 30.0, 20.0, threads=2, parallel=0.8)
    ops = [op.model_copy(update={"capture_threads": 2, "parallel_efficiency": 0.75})
           if op.kind == "cpu" else op for op in m.host.ops]
    # a device (one 1 µs kernel): torch pins only where an accelerator is available, and so
    # does the model (StepModel.pins_memory)
    ops += [HostOp(kind="launch", task="k", dur_us=0.0)]
    return m.model_copy(update={
        "loader": m.loader.model_copy(update={"pin_memory": pin, "batch_bytes": 2 ** 20}),
        "host": m.host.model_copy(update={"ops": ops}),
        "device": DeviceParams(streams={"7": [DeviceTask(id="k", stream="7", dur_us=1.0)]}),
        "meta": m.meta.model_copy(update={"sources": {
            "loader.pin_gbps": "assumed", "loader.threads_per_worker": "assumed",
            "loader.produce": "inferred", "host.ops[1].parallel_efficiency": "assumed"}})})


@pytest.mark.parametrize("nw,pin,ops,read", [
    (2, False, [], {"loader.produce", "loader.threads_per_worker"}),
    (2, True, [], {"loader.produce", "loader.threads_per_worker", "loader.pin_gbps"}),
    (0, True, [], {"loader.produce"}),                 # no pin thread without workers
    (2, False, ["loader.pin_memory=true"], {"loader.produce", "loader.threads_per_worker",
                                            "loader.pin_gbps"}),
    (0, False, ["loader.num_workers=2"], {"loader.produce", "loader.threads_per_worker"}),
    (2, False, ["fix:intra_op_threads"], {"loader.produce", "loader.threads_per_worker",
                                          "host.ops[1].parallel_efficiency"}),
])
def test_only_what_the_setting_reads_is_varied(nw, pin, ops, read):
    m = _model(nw, pin)
    todo = [parse_fix(o[4:]) if o.startswith("fix:") else parse_set(o) for o in ops]
    varied, skipped = uncertain_params(m, todo)
    assert set(varied) == read
    for path in set(m.meta.sources) - read:
        assert skipped[path].startswith("not read here: ")
    assert set(uncertain_params(m)[0]) == set(m.meta.sources)     # None: every quantity


def test_the_plan_keeps_the_other_paths_factors():
    """Common random numbers: leaving out an unread path does not move the others' draws."""
    m = _model(2, False)
    every, read = draw_plan(m, 6, 3), draw_plan(m, 6, 3, ops=[])
    unread = ("loader.pin_gbps", "host.ops[1].parallel_efficiency")
    assert [({p: f for p, f in fs.items() if p not in unread}, s) for fs, s in every] == read
    assert all("loader.pin_gbps" in fs for fs, _ in every)


def test_width_sources_name_no_unread_parameter():
    m = _model(2, False)
    p = predict(m, [parse_set("loader.num_workers=3")], steps=20, warmup=5, intervals=4,
                decompose=True)
    assert "loader.pin_gbps" not in p.width_sources and "loader.pin_gbps" not in p.uncertain
    assert "loader.produce" in p.width_sources
    assert p.skipped["loader.pin_gbps"].startswith("not read here: loader.pin_memory is off")
