"""Metrics against closed forms: exposed communication, skew vs transfer, Amdahl, attribution."""
from __future__ import annotations

import math

import pytest

from stepsim.models.metrics import (amdahl_ceiling, exposed_us, name_bottleneck, split_collective,
                            summarize)
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                           LoaderParams, StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import ModelError

MS = 1000.0


def iv(*pairs):
    return [(a * MS, b * MS) for a, b in pairs]


def test_exposed_communication_closed_forms():
    compute = iv((0, 100))
    assert exposed_us(iv((40, 55), (70, 85), (100, 112)), compute) == pytest.approx(12 * MS)
    assert exposed_us(iv((40, 55), (90, 105), (105, 117)), compute) == pytest.approx(17 * MS)


def test_collective_split_skew_transfer_straggler():
    s = split_collective({0: 0.0, 1: 8 * MS}, {0: 9 * MS, 1: 9 * MS})
    assert s.transfer_us == 1 * MS and s.skew_us == {0: 8 * MS, 1: 0.0} and s.straggler == 1
    with pytest.raises(ModelError):
        split_collective({0: 5.0}, {0: 1.0})


def test_amdahl():
    assert amdahl_ceiling(0.30) == pytest.approx(1.43, abs=0.005)
    # kernels fill 55 % of the step: work on kernels that removes everything between them
    # (fusion, CUDA graphs) buys at most step / kernel-sum = 1 / 0.55
    assert amdahl_ceiling(1 - 0.55) == pytest.approx(1.8, abs=0.02)
    assert math.isinf(amdahl_ceiling(1.0)) and amdahl_ceiling(0.0) == 1.0
    with pytest.raises(ModelError):
        amdahl_ceiling(1.5)


def buckets_model(compute_ms: list[float], bucket_ms: list[float]) -> StepModel:
    """Compute kernels back to back; bucket i follows compute kernel i on the comm stream."""
    comp = [DeviceTask(id=f"c{i}", stream="compute", dur_us=d * MS, category="gemm",
                       phase="backward") for i, d in enumerate(compute_ms)]
    comm = [DeviceTask(id=f"b{i}", stream="comm", dur_us=d * MS, kind="collective",
                       category="communication", waits=[f"c{i}"]) for i, d in enumerate(bucket_ms)]
    ops = [HostOp(kind="launch", task=t.id) for t in comp] + [HostOp(kind="sync")]
    return StepModel(host=HostParams(ops=ops, uses_core=False),
                     device=DeviceParams(streams={"compute": comp, "comm": comm}))


@pytest.mark.parametrize("compute_ms, bucket_ms, exposed_ms", [
    ([40, 30, 30], [15, 15, 12], 12.0),   # buckets [40,55] [70,85] [100,112]
    ([40, 50, 10], [15, 15, 12], 17.0),   # buckets [40,55] [90,105] [105,117]
])
def test_simulated_exposed_communication(compute_ms, bucket_ms, exposed_ms):
    s = summarize(simulate(buckets_model(compute_ms, bucket_ms), steps=3, warmup=1))
    assert s.exposed_comm_us == pytest.approx(exposed_ms * MS)
    assert s.comm_busy_us == pytest.approx(sum(bucket_ms) * MS)
    assert s.mean_step_us == pytest.approx((100 + exposed_ms) * MS)
    assert s.critical_path_us == pytest.approx({"comm": exposed_ms * MS, "compute:gemm": 100 * MS})
    assert s.kernel_ratio == pytest.approx(100 / (100 + exposed_ms))


def input_copy_model(pinned: bool = True) -> StepModel:
    """next() → copy → forward: the copy waits for its launch, which waits for the worker."""
    return StepModel(
        loader=LoaderParams(num_workers=1, prefetch_factor=1, host_cores=4,
                            produce=DurationSpec(mean_us=30 * MS)),
        host=HostParams(uses_core=False, ops=[
            HostOp(kind="next_batch"), HostOp(kind="launch", task="cp"),
            HostOp(kind="launch", task="fwd"), HostOp(kind="cpu", dur_us=5 * MS),
            HostOp(kind="sync")]),
        device=DeviceParams(streams={
            "h2d": [DeviceTask(id="cp", stream="h2d", kind="memcpy", copy_kind="h2d",
                               pinned=pinned, category="memcpy", dur_us=2 * MS)],
            "compute": [DeviceTask(id="fwd", stream="compute", category="conv", dur_us=10 * MS,
                                   waits=["cp"])]}))


def test_gap_traces_through_the_copy_to_the_worker():
    s = summarize(simulate(input_copy_model(), steps=4, warmup=2))
    # batch k+1 starts when batch k is returned: the host waits 30 - 12 = 18 ms per step
    assert s.mean_step_us == pytest.approx(30 * MS)
    assert s.gap_us == pytest.approx({"input": 18 * MS, "h2d": 2 * MS})
    assert s.bottleneck == "input"
    assert [(h.start_us, h.dur_us) for h in s.holes] == [(0.0, 20 * MS)]


def test_sync_waits_are_followed_to_what_the_device_was_doing():
    # host: launch a, sync on the slow comm task, then launch b: b's gap is the comm transfer
    m = StepModel(
        host=HostParams(uses_core=False, ops=[
            HostOp(kind="launch", task="a"), HostOp(kind="sync", task="ar"),
            HostOp(kind="launch", task="b"), HostOp(kind="sync")]),
        device=DeviceParams(streams={
            "compute": [DeviceTask(id="a", stream="compute", dur_us=4 * MS, category="gemm"),
                        DeviceTask(id="b", stream="compute", dur_us=4 * MS, category="gemm")],
            "comm": [DeviceTask(id="ar", stream="comm", kind="collective", dur_us=6 * MS,
                                category="communication", waits=["a"])]}))
    s = summarize(simulate(m, steps=3, warmup=1))
    assert s.gap_us == pytest.approx({"comm": 6 * MS})
    assert sum(s.critical_path_us.values()) == pytest.approx(s.mean_step_us)


def test_name_bottleneck_rules():
    shares = {"host_compute": 0.6, "input": 0.4}
    assert name_bottleneck(shares, 0.4, 0.0, 0.0, 0.8) == "input"        # producer sets pace
    assert name_bottleneck(shares, 0.4, 0.0, 0.5, 0.8) == "cpu_cores"    # ... on starved cores
    assert name_bottleneck({"host_compute": 0.8}, 0.01, 0.2, 0.0, 0.99) == "cpu_cores"
    assert name_bottleneck(shares, 0.05, 0.0, 0.0, 0.5) == "host_compute"


def producer_consumer(workers: int, cores: int) -> StepModel:
    """The CPU demo's shape: 80 ms to produce a batch, 48 ms of training per step."""
    return StepModel(loader=LoaderParams(num_workers=workers, host_cores=cores,
                                         produce=DurationSpec(mean_us=80 * MS)),
                     host=HostParams(ops=[HostOp(kind="next_batch"),
                                          HostOp(kind="cpu", dur_us=48 * MS, category="train")]))


def test_producer_slower_than_consumer_is_named_input():
    s = summarize(simulate(producer_consumer(1, 2), steps=20, warmup=5))
    assert s.mean_step_us == pytest.approx(80 * MS)
    assert s.host_split_us["wait:input"] == pytest.approx(32 * MS)
    assert s.bottleneck == "input"


def test_saturated_cores_are_named_cpu_cores():
    # two workers and the host thread on two cores: 128 ms of CPU per step on 2 cores
    s = summarize(simulate(producer_consumer(2, 2), steps=40, warmup=10))
    assert s.mean_step_us == pytest.approx(64 * MS, rel=0.05)
    assert s.cpu_pool_busy > 0.95
    assert s.bottleneck == "cpu_cores"


def test_host_bound_step_names_host_compute():
    m = StepModel(host=HostParams(uses_core=False, ops=[
        HostOp(kind="launch", task="a"), HostOp(kind="cpu", dur_us=20 * MS)]),
        device=DeviceParams(streams={"s": [DeviceTask(id="a", stream="s", dur_us=5 * MS)]}))
    s = summarize(simulate(m, steps=3))
    assert s.scarce_lane == "rank0.host" and s.bottleneck == "host_compute"
    assert s.critical_path_us == pytest.approx({"host_compute": 20 * MS})


def test_summary_renders_as_json_and_table(capsys):
    import json

    from stepsim.report.tables import print_summary
    m = buckets_model([40, 30, 30], [15, 15, 12])
    s = summarize(simulate(m, steps=3))
    print_summary(m, s, as_json=True)
    d = json.loads(capsys.readouterr().out)
    assert d["exposed_comm_ms"] == pytest.approx(12.0) and d["critical_path_ms"]["comm"] == 12.0
    assert d["collectives"][0]["observed_ms"] == pytest.approx(15.0)
    print_summary(m, s)
    out = capsys.readouterr().out
    assert "exposed 12.00" in out and "critical path" in out


def test_gaps_are_idle_charged_to_device_idle_and_expose_communication():
    # compute: a (4 ms), 2 ms of unexplained idle, b (4 ms); a 6 ms collective from t=0 on its
    # own stream is hidden under a and b but not under the gap
    k = dict(category="gemm", phase="forward")
    m = StepModel(
        host=HostParams(ops=[HostOp(kind="launch", task="a"), HostOp(kind="launch", task="b"),
                             HostOp(kind="launch", task="ar"), HostOp(kind="sync")],
                        uses_core=False),
        device=DeviceParams(streams={
            "7": [DeviceTask(id="a", stream="7", dur_us=4 * MS, **k),
                  DeviceTask(id="b", stream="7", dur_us=4 * MS, gap_us=2 * MS, **k)],
            "9": [DeviceTask(id="ar", stream="9", kind="collective", category="communication",
                             dur_us=6 * MS)]}))
    s = summarize(simulate(m, steps=3, warmup=1))
    assert s.median_step_us == pytest.approx(10 * MS)
    assert s.device_busy_us == pytest.approx(10 * MS)     # the collective covers the gap
    assert s.compute_busy_us == pytest.approx(8 * MS)
    assert s.exposed_comm_us == pytest.approx(2 * MS)
    assert s.gap_us == {"device_idle": pytest.approx(2 * MS)}
    assert s.critical_path_us == {"compute:gemm": pytest.approx(8 * MS),
                                  "device_idle": pytest.approx(2 * MS)}
