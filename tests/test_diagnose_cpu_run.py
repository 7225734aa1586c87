"""The diagnosis tree of a CPU run (no GPU work): no GPU evidence or GPU fix that cannot apply,
and host cores that no sidecar measured are called assumed; a bare CPU trace's cores are
assumed from the threads the run itself used, not from the machine that reads it."""
from __future__ import annotations

import shutil

from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, Meta, StepModel
from stepsim.models.param_types import DeviceParams, DeviceTask
from stepsim.scenarios.diagnose import diagnose

FAST = {"steps": 8, "warmup": 4, "draws": 0, "jobs": 1}


def _cpu_model(cores_source: str) -> StepModel:
    """Main-thread loading (3 ms) then 2 ms of training-step CPU work, nothing on a device."""
    return StepModel(
        loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=3000.0), host_cores=1),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=2000.0)]),
        meta=Meta(sources={"loader.host_cores": cores_source}))


def test_a_cpu_run_gets_no_gpu_branches():
    m = _cpu_model("measured")
    assert not m.on_device()
    d = diagnose(m, **FAST)
    gaps = [f for f in d.findings if f.stage == "gaps"]
    evidence = " ".join(e for f in d.findings for e in f.evidence)
    for gpu_only in ("pageable", "host syncs", "device tasks waiting", "exposed communication",
                     "every kernel free"):
        assert gpu_only not in evidence
    fixes = [w.fix for f in d.findings for w in f.whatifs]
    assert not any(f.startswith(("cuda_graphs", "pin_memory")) for f in fixes), fixes
    leaves = {f.key: f for f in gaps if f.key}
    assert set(leaves) == {"input", "host_compute"}
    assert leaves["input"].whatifs[0].fix.startswith("more_workers")
    assert "no named fix" in leaves["host_compute"].verdict
    assert not any(f.stage == "roofline" and f.key == "launch" for f in d.findings)
    assert "assumed" not in evidence


def test_a_cpu_run_whose_host_enqueues_collectives_gets_no_cuda_graphs_leaf():
    """A gloo job's host ops launch its collectives, the only tasks of a CPU model: no
    'host paces the device: CUDA graphs' leaf (a user's 2-rank job got one, "floor: the
    device's busy time 204.57 ms", under "no roofline: the model has no device work")."""
    m = _cpu_model("measured")
    ar = DeviceTask(id="gloo.ar0", stream="gloo", kind="collective", category="communication",
                    phase="backward", dur_us=15000.0)
    m = m.model_copy(update={
        "device": DeviceParams(streams={"gloo": [ar]}),
        "host": HostParams(ops=[HostOp(kind="next_batch"),
                                HostOp(kind="cpu", dur_us=30000.0, phase="backward"),
                                HostOp(kind="launch", task="gloo.ar0", dur_us=50.0),
                                HostOp(kind="sync", task="gloo.ar0")])})
    assert not m.on_device()
    d = diagnose(m, **FAST)
    assert not any(f.stage == "roofline" and f.key == "launch" for f in d.findings)


def test_assumed_host_cores_are_said_to_be_assumed():
    d = diagnose(_cpu_model("assumed"), **FAST)
    head = next(f for f in d.findings if f.stage == "gaps")
    assert any(e.startswith("host cores: 1, assumed") for e in head.evidence)


def test_bare_cpu_trace_assumes_a_core_per_thread_it_used(cpu_run_nw1, tmp_path):
    from stepsim.fit import calibrate
    from stepsim.calibration.cpu import traced_threads
    from stepsim.calibration.events import build_table
    from stepsim.calibration.trace_io import load_trace

    bare = tmp_path / "trace.json.gz"   # the capture's trace without its sidecar
    shutil.copy(cpu_run_nw1 / "trace.json.gz", bare)
    m = calibrate(bare)
    threads = traced_threads(build_table(load_trace(bare)))
    assert threads >= 1
    assert m.loader.host_cores == threads + m.loader.num_workers
    assert m.meta.sources["loader.host_cores"] == "assumed"
    note = next(w for w in m.meta.warnings if w.startswith("host cores unknown"))
    assert f"assumed {m.loader.host_cores}" in note and "thread(s) in the trace" in note


def test_a_cpu_model_and_its_trace_give_one_reason_for_no_memory_verdict(cpu_run_nw0):
    """On the model it said "a model has no memory events (give the trace)", on the trace "no
    device kernels (a CPU run)": a CPU model knows it has no device kernels, so both say that."""
    from stepsim.fit import calibrate
    from stepsim.diagnosis import diagnose as top

    def memory(d) -> str:
        return next(f.verdict for f in d.diagnosis.findings if f.stage == "memory")

    on_trace = memory(top(cpu_run_nw0, None, None, None, **FAST))
    on_model = memory(top(calibrate(cpu_run_nw0), None, None, None, **FAST))
    assert on_model == on_trace == "no memory verdict: no device kernels (a CPU run): no " \
                                   "device memory to fit"
    assert memory(top(_cpu_model("measured"), None, None, None, **FAST)) == on_trace
