"""DataLoader model against closed forms (torch/utils/data/dataloader.py semantics)."""
from __future__ import annotations

import pytest

from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                           LoaderParams, StepModel)
from stepsim.models.simulate import simulate

MS = 1000.0


def consumer(loader: LoaderParams, cpu_us: float = 0.0, uses_core: bool = True) -> StepModel:
    """A training loop that only takes batches (and optionally computes ``cpu_us`` per step)."""
    ops = [HostOp(kind="next_batch")]
    if cpu_us:
        ops.append(HostOp(kind="cpu", dur_us=cpu_us, name="train"))
    return StepModel(loader=loader, host=HostParams(ops=ops, uses_core=uses_core))


def on_device(model: StepModel) -> StepModel:
    """``model`` with a device (one 1 µs kernel launched at the end of the step): torch pins
    only where an accelerator is available, and so does the model (StepModel.pins_memory)."""
    ops = [*model.host.ops, HostOp(kind="launch", task="k", dur_us=0.0)]
    return model.model_copy(update={
        "host": model.host.model_copy(update={"ops": ops}),
        "device": DeviceParams(streams={"7": [DeviceTask(id="k", stream="7", dur_us=1.0)]})})


def batches_per_s(model: StepModel, steps: int, warmup: int) -> float:
    return 1e6 / simulate(model, steps=steps, warmup=warmup).mean_step_us


def worker_spans(res, kind="busy"):
    return [s for s in res.spans if ".worker" in s.lane and s.kind == kind]


def test_eight_workers_on_four_cores_make_forty_batches_per_s_not_eighty():
    lp = LoaderParams(num_workers=8, prefetch_factor=2, host_cores=4,
                      produce=DurationSpec(mean_us=100 * MS))
    # the 8 workers finish together every 200 ms: measure whole bursts of 8
    assert batches_per_s(consumer(lp), steps=64, warmup=16) == pytest.approx(40.0, rel=0.03)
    lp8 = lp.model_copy(update={"host_cores": 9})
    assert batches_per_s(consumer(lp8), steps=64, warmup=16) == pytest.approx(80.0, rel=0.01)


def test_slow_worker_in_order_vs_out_of_order():
    lp = LoaderParams(num_workers=2, prefetch_factor=2, host_cores=4, produce_by_worker=[
        DurationSpec(mean_us=1000 * MS), DurationSpec(mean_us=100 * MS)])
    assert batches_per_s(consumer(lp), steps=40, warmup=10) == pytest.approx(2.0, rel=0.01)
    ooo = consumer(lp.model_copy(update={"in_order": False}))
    # worker 0 yields 1 batch/s, worker 1 ten: 11 in every second once worker 0 holds its cap
    assert batches_per_s(ooo, steps=110, warmup=22) == pytest.approx(11.0, rel=0.01)


def test_paused_consumer_gets_exactly_workers_times_prefetch_batches_then_workers_idle():
    lp = LoaderParams(num_workers=3, prefetch_factor=2, host_cores=8,
                      produce=DurationSpec(mean_us=10 * MS))
    paused = StepModel(loader=lp, host=HostParams(ops=[
        HostOp(kind="cpu", dur_us=10_000 * MS, name="paused"), HostOp(kind="next_batch")]))
    res = simulate(paused, steps=1, warmup=0)
    before = [s for s in worker_spans(res) if s.start_us < 10_000 * MS]
    assert len(before) == 6                                  # num_workers x prefetch_factor
    assert max(s.end_us for s in before) == 20 * MS          # two rounds of 10 ms, then idle
    ready = [v for t, v in res.samples["rank0.loader.ready"] if t < 10_000 * MS]
    assert ready[-1] == 6 and res.loader_stats[0].max_outstanding == 6


def test_indices_go_round_robin_and_bound_holds():
    lp = LoaderParams(num_workers=3, prefetch_factor=2, host_cores=8,
                      produce=DurationSpec(mean_us=30 * MS))
    res = simulate(consumer(lp, cpu_us=5 * MS), steps=30, warmup=0)
    for s in worker_spans(res):
        idx = int(s.name.split()[1])
        assert s.lane == f"rank0.worker{idx % 3}"
    assert res.loader_stats[0].max_outstanding == 6
    assert res.loader_stats[0].consumed == list(range(len(res.loader_stats[0].consumed)))


def test_exact_timeline_one_worker_prefetch_one():
    """num_workers=1, prefetch_factor=1: production of batch k+1 starts when batch k is
    returned, so a step is produce + unpickle when the consumer is faster."""
    lp = LoaderParams(num_workers=1, prefetch_factor=1, host_cores=4, unpickle_us=1 * MS,
                      produce=DurationSpec(mean_us=10 * MS))
    res = simulate(consumer(lp, cpu_us=4 * MS), steps=3, warmup=0)
    assert [round(s.start_us) for s in worker_spans(res)][:4] == [0, 11_000, 22_000, 33_000]
    assert res.step_us[0].tolist() == [15 * MS, 11 * MS, 11 * MS]   # first: no wait before it
    waits = [s for s in res.spans if s.lane == "rank0.host" and s.cause == "input"]
    assert [(w.start_us, w.dur_us) for w in waits[:2]] == [(0.0, 10 * MS), (15 * MS, 6 * MS)]


def test_num_workers_zero_loads_on_the_main_thread():
    lp = LoaderParams(num_workers=0, produce=DurationSpec(mean_us=30 * MS), host_cores=2)
    res = simulate(consumer(lp, cpu_us=20 * MS), steps=5, warmup=1)
    assert res.mean_step_us == pytest.approx(50 * MS)
    assert not worker_spans(res)
    data = [s for s in res.spans if s.lane == "rank0.host" and s.category == "data"]
    assert data and data[0].dur_us == 30 * MS


def test_pin_memory_thread_is_one_serial_stage():
    # 4 fast workers (10 ms each) but pinning 64 MB at 8 GB/s takes 8 ms: at most 125 batches/s
    lp = LoaderParams(num_workers=4, prefetch_factor=4, host_cores=16, pin_memory=True,
                      batch_bytes=64_000_000, pin_gbps=8.0, produce=DurationSpec(mean_us=10 * MS))
    assert batches_per_s(on_device(consumer(lp)), steps=100, warmup=20) == pytest.approx(
        125.0, rel=0.01)
    pins = [s for s in simulate(on_device(consumer(lp)), steps=20).spans
            if s.lane == "rank0.pin_memory"]
    assert pins and all(a.end_us <= b.start_us + 1e-9 for a, b in zip(pins, pins[1:]))
    # without a device torch pins nothing: no pin thread, the workers' 10 ms / 4 = 2.5 ms
    assert not [s for s in simulate(consumer(lp), steps=20).spans if "pin_memory" in s.lane]
    assert batches_per_s(consumer(lp), steps=100, warmup=20) == pytest.approx(400.0, rel=0.01)


def test_unpickling_costs_the_main_thread_without_pin_memory():
    lp = LoaderParams(num_workers=4, host_cores=16, unpickle_us=3 * MS,
                      produce=DurationSpec(mean_us=1 * MS))
    res = simulate(consumer(lp, cpu_us=7 * MS), steps=10, warmup=5)
    assert res.mean_step_us == pytest.approx(10 * MS)


def test_worker_startup_every_epoch_unless_persistent():
    base = dict(num_workers=2, prefetch_factor=2, host_cores=8, batches_per_epoch=5,
                worker_startup_us=50 * MS, produce=DurationSpec(mean_us=10 * MS))
    fresh = simulate(consumer(LoaderParams(**base), cpu_us=20 * MS), steps=10, warmup=5)
    kept = simulate(consumer(LoaderParams(**base, persistent_workers=True), cpu_us=20 * MS),
                    steps=10, warmup=5)
    # each epoch starts with an empty pipeline: wait start-up + produce instead of nothing
    assert fresh.step_us[0].tolist() == [80 * MS] + [20 * MS] * 4 + [80 * MS] + [20 * MS] * 4
    assert kept.step_us[0].tolist() == [30 * MS] + [20 * MS] * 4 + [30 * MS] + [20 * MS] * 4


def test_queue_depth_series_and_pageable_free_model_runs():
    lp = LoaderParams(num_workers=2, prefetch_factor=2, host_cores=8,
                      produce=DurationSpec(mean_us=5 * MS))
    model = consumer(lp, cpu_us=20 * MS).model_copy(update={"device": DeviceParams(streams={
        "s": [DeviceTask(id="k", stream="s", dur_us=1 * MS)]})})
    res = simulate(model, steps=10)
    ready = res.samples["rank0.loader.ready"]
    assert max(v for _, v in ready) == 4 and min(v for _, v in ready) == 0


def test_produce_by_worker_must_match_num_workers():
    with pytest.raises(ValueError):
        LoaderParams(num_workers=2, produce_by_worker=[DurationSpec(mean_us=1.0)])
