"""Communication kernels that no recorded call launched (issue 9 §4): those launched by a
thread the profiler did not record are simulated as device tasks of their step; those launched
before the trace's first recorded launch call are work queued before the steps."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.fit import calibrate_gpu
from stepsim.models.simulate import simulate
from tests.conftest import shared_traces
from tests.kineto_gen import one_rank_trace

NCCL = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
COMM_US = 120.0
"""The all-reduce's duration in the standard synthetic trace (µs)."""


def unlaunch(ev):
    """Drop the launch calls of the NCCL kernels (a thread the profiler did not record)."""
    nccl = {e["args"]["correlation"] for e in ev if e["name"] == NCCL}
    ev[:] = [e for e in ev if not (e["cat"] == "cuda_runtime"
                                   and e["args"]["correlation"] in nccl)]


def step_us(model, steps=5, warmup=2) -> float:
    return simulate(model, steps=steps, warmup=warmup).median_step_us


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(the standard trace's fine model, the same trace without the NCCL launch calls)."""
    d = tmp_path_factory.mktemp("unlaunched")
    return (calibrate_gpu(one_rank_trace(d / "launched.json"), coarse=False),
            calibrate_gpu(one_rank_trace(d / "unlaunched.json", change=unlaunch), coarse=False))


def test_an_unlaunched_collective_is_a_device_task_of_its_step(pair):
    launched, m = pair
    comm = [t for t in m.device.streams["20"] if t.kind == "collective"]
    assert [t.dur_us for t in comm] == [pytest.approx(COMM_US)]
    assert not any(op.task == comm[0].id for op in m.host.ops)   # no host op launches it
    assert comm[0].waits == ["s7.5"]          # after the last backward kernel
    sgd = next(t for t in m.device.streams["7"] if "multi_tensor_apply" in t.name)
    assert comm[0].id in sgd.waits            # the optimizer still waits for the all-reduce
    assert m.meta.notes["comm_kernels_unlaunched"] == 4
    assert any("4 communication kernel(s) have no launching call" in w and "device tasks" in w
               for w in m.meta.warnings)
    # the same device work as when the launches were recorded
    assert {s: [(t.name, t.dur_us, t.waits) for t in ts] for s, ts in m.device.streams.items()} \
        == {s: [(t.name, t.dur_us, t.waits) for t in ts]
            for s, ts in launched.device.streams.items()}


def test_the_simulated_step_holds_the_unlaunched_collective(pair):
    """Closed form: every duration is measured, so the step replays the measured one; the
    all-reduce is on the critical path (the optimizer waits for it and the host for the
    optimizer), so Δ µs more of it is Δ µs more step."""
    _, m = pair
    assert step_us(m) == pytest.approx(float(np.median(m.meta.measured_step_us)), rel=1e-9)
    assert m.meta.notes["step_exposed_comm_us"] == pytest.approx(COMM_US)
    slower = m.model_copy(deep=True)
    for t in slower.device.streams["20"]:
        t.dur_us += 500.0
        t.replay_us = None
    assert step_us(slower) - step_us(m) == pytest.approx(500.0, abs=1e-6)


def test_the_coarse_model_keeps_it(tmp_path):
    m = calibrate_gpu(one_rank_trace(tmp_path / "u.json", change=unlaunch))
    assert [t.dur_us for t in m.device.streams["20"]] == [pytest.approx(COMM_US)]
    assert step_us(m) == pytest.approx(float(np.median(m.meta.measured_step_us)), rel=1e-6)


def test_a_collective_launched_before_the_recorded_launches_is_not_step_work(tmp_path, pair):
    """A kernel running before the first step, on a stream whose later kernels have recorded
    launches, with a correlation id below every recorded launch's: queued before them."""
    launched, _ = pair

    def early(ev):
        ev.append({"ph": "X", "cat": "kernel", "name": NCCL, "pid": 0, "tid": 20,
                   "ts": 999_000.0, "dur": 50.0,
                   "args": {"correlation": 0, "stream": 20, "device": 0}})
    m = calibrate_gpu(one_rank_trace(tmp_path / "early.json", change=early), coarse=False)
    assert m.meta.notes["comm_kernels_before_first_launch"] == 1
    assert m.meta.notes["comm_kernels_unlaunched"] == 0
    assert any("1 communication kernel(s) were launched before the trace's first recorded" in w
               for w in m.meta.warnings)
    assert m.device == launched.device and m.host == launched.host


def test_real_trace_collectives_without_launch_precede_the_recorded_launches():
    """``hta/trace_diff/test``: its four NCCL kernels without a launching call run in the first
    step, ahead of their stream's first recorded launch, with correlation ids below every
    recorded one: launched before the profiler recorded runtime calls (its first recorded
    launch is 0.7 ms into the first step), the backlog of earlier work."""
    path = shared_traces() / "hta" / "trace_diff" / "test" / "test.json.gz"
    m = calibrate_gpu(path, coarse=False)
    assert m.meta.notes["comm_kernels_before_first_launch"] == 4
    assert m.meta.notes["comm_kernels_unlaunched"] == 0
