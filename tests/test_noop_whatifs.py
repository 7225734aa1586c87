"""A what-if that cannot apply is never a silent no-op (scenarios.noop, scenarios.caveats,
scenarios.transforms): a setting nothing in the model reads says why in one line, PyTorch's
refusals (prefetch_factor, persistent_workers without workers) are refusals, an unchanged
prediction says so; and the noise is cut: one "not varied" line, the threads caveat only when
the co-running threads change."""
from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

from stepsim import api
from stepsim.models.params import StepModel, save_model
from stepsim.report.planner import not_varied_line
from stepsim.scenarios.caveats import caveats, threads_caveat
from stepsim.scenarios.transforms import FixOp, PrefetchWithoutWorkers, SetOp, apply_with_notes
from stepsim.scenarios.op_text import parse_set
from tests.test_host_physics import host_model
from tests.test_quirks import cli, one_line_error

FAST = {"steps": 10, "warmup": 2, "draws": 0, "jobs": 1}


def cpu_model(nw: int = 0, **loader) -> StepModel:
    return StepModel.model_validate({
        "loader": {"num_workers": nw, "produce": {"mean_us": 10_000.0}, "host_cores": 4,
                   **loader},
        "host": {"ops": [{"kind": "next_batch"},
                         {"kind": "cpu", "name": "training step", "dur_us": 4000}]}})


def gpu_model(h2d: bool) -> StepModel:
    tasks = [{"id": "k", "stream": "7", "kind": "kernel", "dur_us": 3000, "phase": "forward"}]
    ops = [{"kind": "next_batch"}, {"kind": "launch", "task": "k", "dur_us": 10}]
    if h2d:
        tasks.insert(0, {"id": "c", "stream": "7", "kind": "memcpy", "copy_kind": "h2d",
                         "dur_us": 500})
        ops.insert(1, {"kind": "launch", "task": "c", "dur_us": 10})
    return StepModel.model_validate({
        "loader": {"num_workers": 1, "produce": {"mean_us": 1000.0}, "batch_bytes": 1 << 20},
        "host": {"ops": [*ops, {"kind": "sync", "dur_us": 5}]},
        "device": {"streams": {"7": tasks}}})


def said(model: StepModel, *sets: str) -> list[str]:
    return [c for c in caveats(model, [parse_set(s) for s in sets]) if "changes nothing" in c]


@pytest.mark.parametrize("nw,setting,why", [
    (0, "loader.in_order=false", "in_order only applies when num_workers > 0"),
    (1, "loader.in_order=false", "from the main thread or one worker"),
    (0, "loader.unpickle_us=500", "read only for DataLoader workers"),
    (0, "loader.worker_startup_us=9000", "read only for DataLoader workers"),
    (2, "loader.persistent_workers=true", "no epoch boundary"),
    (2, "loader.pin_gbps=1", "loader.pin_memory is off"),
    (0, "comm.bus_gbps=10", "the model has no collectives"),
    (0, "comm.world_size=8", "the model has no collectives"),
    (0, "comm.latency_us=100", "the model has no collectives"),
    (0, "loader.prefetch_factor=2", "raises ValueError (leave it out)"),
])
def test_a_setting_nothing_reads_says_why_in_one_line(nw, setting, why):
    (line,) = said(cpu_model(nw), setting)
    assert line.startswith(f"{setting} changes nothing") and why in line


def test_a_setting_the_model_reads_says_nothing():
    assert not said(cpu_model(2), "loader.in_order=false")
    # at 0 workers the main process makes a drawn batch on threads_per_worker threads
    # (stall19): 10 ms of batch on 2 of 4 cores is 5 ms of the step (break19)
    assert not said(cpu_model(0), "loader.threads_per_worker=2")
    assert not said(cpu_model(2, batches_per_epoch=10, worker_startup_us=5000),
                    "loader.persistent_workers=true")
    # pinning needs a device (torch pins nothing without an accelerator): gpu_model has one
    pinned = gpu_model(h2d=True)
    pinned = pinned.model_copy(update={"loader": pinned.loader.model_copy(
        update={"pin_memory": True})})
    assert not said(pinned, "loader.pin_gbps=1")
    (line,) = said(cpu_model(2, pin_memory=True), "loader.pin_gbps=1")
    assert "no device" in line and "pins nothing" in line
    assert not said(cpu_model(0), "loader.num_workers=2", "loader.unpickle_us=500")
    assert not said(gpu_model(h2d=True), "loader.pin_memory=true")
    assert not said(gpu_model(h2d=True), "comm.grad_accum_steps=4")   # skips the optimizer


def test_pin_memory_without_copies_to_pin_is_said():
    (line,) = said(gpu_model(h2d=False), "loader.pin_memory=true")
    assert "no host-to-device copies to pin" in line


def test_persistent_workers_without_workers_is_refused_as_pytorch_does():
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        DataLoader(range(4), num_workers=0, persistent_workers=True)
    for ops in ([SetOp(path="loader.persistent_workers", value=True)],
                [SetOp(path="loader.num_workers", value=2),
                 SetOp(path="loader.persistent_workers", value=True),
                 SetOp(path="loader.num_workers", value=0)]):
        with pytest.raises(PrefetchWithoutWorkers, match="persistent_workers option needs"):
            apply_with_notes(cpu_model(0), ops)
    # workers taken away take persistent_workers with them, and a note says so
    out, notes = apply_with_notes(cpu_model(2, persistent_workers=True),
                                  [SetOp(path="loader.num_workers", value=0)])
    assert not out.loader.persistent_workers
    assert any("persistent_workers=True is dropped with the workers" in n for n in notes)


def test_the_cli_refuses_persistent_workers_without_workers(tmp_path):
    save_model(cpu_model(0), tmp_path / "m.json")
    one_line_error(*cli("whatif", tmp_path / "m.json", "--set", "loader.persistent_workers=true",
                        "--steps", "5", "--draws", "0")[:2],
                   "persistent_workers option needs num_workers > 0")


def test_an_unchanged_prediction_is_said_once():
    w = api.whatif(cpu_model(0), set="device.gap_scale=2", **FAST)
    assert w.scenario.mean_step_us == w.baseline.mean_step_us
    (line,) = [x for x in w.warnings if "changes nothing" in x]
    assert line.startswith("set device.gap_scale=2 changes nothing in the prediction")
    # a setting already said to change nothing is not said twice
    w = api.whatif(cpu_model(0), set="loader.unpickle_us=500", **FAST)
    assert len([x for x in w.warnings if "changes nothing" in x]) == 1
    # a what-if that changes the step says nothing of the kind
    w = api.whatif(cpu_model(0), set="loader.num_workers=2", **FAST)
    assert not [x for x in w.warnings if "changes nothing" in x]


def test_the_threads_caveat_only_when_the_co_runners_change():
    """An oversubscribed capture (2 intra-op threads beside 2 workers on 2 cores): a what-if
    that leaves threads and cores as they are keeps the captured stall, which the baseline
    holds; one that changes them gets the caveat; no ops (simulate, validate) keeps it."""
    m = host_model(2, 2, 30.0, 20.0, threads=2, parallel=0.8)
    hit = [c for c in caveats(m, []) if "intra-op threads" in c]
    assert hit
    for same in ("loader.produce.mean_us=20000", "loader.prefetch_factor=4"):
        assert not [c for c in caveats(m, [parse_set(same)]) if "intra-op threads" in c]
    assert not threads_caveat(m, [FixOp(name="prefetch_factor")])
    for other, named in (("loader.num_workers=3", True), ("loader.host_cores=3", True),
                         ("host.ops.1.threads=3", True), ("loader.host_cores=4", False)):
        got = [c for c in caveats(m, [parse_set(other)]) if "intra-op threads" in c]
        assert bool(got) == named, other          # 4 threads on 4 cores: no stall
    assert threads_caveat(m, [parse_set("loader.num_workers=1")])


def test_not_varied_is_one_line():
    line = not_varied_line({"loader.unpickle_us": "0: a factor range varies nothing (...)",
                            "loader.worker_startup_us": "0: a factor range varies nothing (...)",
                            "x.y": "a str value cannot be varied"})
    assert "\n" not in line and line.startswith("not varied: 2 inferred or assumed value(s) at 0")
    assert line.endswith("; x.y (a str value cannot be varied)")


def test_not_varied_names_each_list_in_its_own_clause():
    # a fresh user read "...at 0, which no factor varies (see skipped in --json); a, b, which
    # nothing in this setting reads" as one list: each clause says what it counts, then names
    line = not_varied_line({"loader.unpickle_us": "0: a factor range varies nothing (...)",
                            "loader.pin_gbps": "not read here: no pinned copy",
                            "host.ops[1].parallel_efficiency": "not read here: one thread"})
    assert line == ("not varied: 1 inferred or assumed value(s) at 0, which no factor varies "
                    "(named in skipped in --json); 2 value(s) nothing in this setting reads: "
                    "loader.pin_gbps, host.ops[1].parallel_efficiency")


def test_whatif_prints_one_not_varied_line_and_none_without_draws(tmp_path):
    m = cpu_model(1, unpickle_us=0.0)
    m = m.model_copy(update={"meta": m.meta.model_copy(update={"sources": {
        "loader.unpickle_us": "assumed", "loader.worker_startup_us": "assumed",
        "loader.produce": "inferred"}})})
    save_model(m, tmp_path / "m.json")
    base = ("whatif", tmp_path / "m.json", "--set", "loader.num_workers=2", "--steps", "10",
            "--warmup", "2", "--jobs", "1")
    rc, err, out = cli(*base, "--draws", "3")
    assert rc == 0, err
    assert [ln for ln in out.splitlines() if "not varied" in ln] == [
        "not varied: 2 inferred or assumed value(s) at 0, which no factor varies (named in "
        "skipped in --json)"]
    rc, err, out = cli(*base, "--draws", "0")
    assert rc == 0 and "not varied" not in out
