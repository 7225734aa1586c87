"""Coarsening: merged chains keep the replayed step and the per-category breakdown."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepsim.models.coarsen import coarsen
from stepsim.models.params import DeviceParams, DeviceTask, HostOp, HostParams, StepModel
from stepsim.models.simulate import simulate

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def k(i, dur, cat="gemm", stream="7", phase="forward", **kw):
    return DeviceTask(id=f"t{i}", stream=stream, name=f"kernel{i}", category=cat, phase=phase,
                      dur_us=dur, **kw)


def model(tasks, ops):
    streams: dict[str, list] = {}
    for t in tasks:
        streams.setdefault(t.stream, []).append(t)
    return StepModel(host=HostParams(ops=ops), device=DeviceParams(streams=streams))


def launch(i, dur=5.0):
    return HostOp(kind="launch", name="cudaLaunchKernel", dur_us=dur, task=f"t{i}")


def cpu(d):
    return HostOp(kind="cpu", name="cpu", dur_us=d)


def step_us(m):
    return simulate(m, steps=3, warmup=2).median_step_us


def test_queued_chain_merges_with_breakdown():
    # the host launches t1..t3 quickly; the device is busy with t0, so t1..t3 queue up
    tasks = [k(0, 500), k(1, 100, "elementwise"), k(2, 200, "gemm"), k(3, 50, "elementwise")]
    ops = [launch(0), cpu(10), launch(1), cpu(10), launch(2), cpu(10), launch(3),
           HostOp(kind="sync", name="cudaStreamSynchronize", task="t3"), cpu(30)]
    m = model(tasks, ops)
    c = coarsen(m)
    ts = c.device.streams["7"]
    assert len(ts) == 1 and ts[0].id == "t0"
    assert ts[0].dur_us == pytest.approx(850.0)
    assert ts[0].breakdown_us == {"gemm": 700.0, "elementwise": 150.0}
    assert ts[0].category == "gemm"
    assert [o.kind for o in c.host.ops] == ["launch", "cpu", "cpu", "sync", "cpu"]
    assert [o.task for o in c.host.ops if o.kind == "sync"] == ["t0"]
    launch_cpu = [o for o in c.host.ops if o.kind == "cpu" and o.category == "launch"]
    assert launch_cpu[0].dur_us == pytest.approx(15.0)
    assert step_us(c) == pytest.approx(step_us(m), rel=1e-9)
    assert c.meta.notes["coarsened_tasks"] == "4 -> 1"
    assert m.device.streams["7"][1].id == "t1"  # the input is not changed


def test_merged_chain_keeps_launch_slots_and_moves_gaps_to_its_front():
    tasks = [k(0, 500, gap_us=4.0), k(1, 100, gap_us=3.0), k(2, 200, gap_us=3.0), k(3, 50)]
    ops = [launch(0), cpu(10), launch(1), cpu(10), launch(2), cpu(10), launch(3),
           HostOp(kind="sync", name="cudaStreamSynchronize", task="t3"), cpu(30)]
    m = model(tasks, ops)
    c = coarsen(m)
    (t,) = c.device.streams["7"]
    assert (t.launches, t.gap_us, t.dur_us) == (4, pytest.approx(10.0), pytest.approx(850.0))
    assert "idle" not in t.breakdown_us
    assert step_us(c) == pytest.approx(step_us(m), rel=1e-9)


def test_chains_are_capped_by_gaps_and_launches():
    tasks = [k(0, 500)] + [k(i, 10, gap_us=30.0) for i in range(1, 4)]
    ops = [launch(i, 1.0) for i in range(4)] + [HostOp(kind="sync", task="t3")]
    m = model(tasks, ops)
    # 30 us of inner gap fits under 50, 60 does not: t0+t1, then t2+t3
    assert [t.id for t in coarsen(m).device.streams["7"]] == ["t0", "t2"]
    assert [t.launches for t in coarsen(m, max_chain_gap_us=1e9, max_chain_launches=3)
            .device.streams["7"]] == [3, 1]


def test_host_bound_tasks_merge_only_within_the_span():
    # each kernel finishes before the host launches the next: launches are on the critical path
    tasks = [k(0, 10), k(1, 10), k(2, 10), k(3, 10)]
    ops = [launch(0), cpu(100), launch(1), cpu(100), launch(2), cpu(100), launch(3), cpu(100)]
    m = model(tasks, ops)
    assert len(coarsen(m, max_chain_span_us=0).device.streams["7"]) == 4
    # launched 105 us apart: t0+t1 within 200 us, then t2; t3, the stream's last task (which
    # a next step's work may await), never joins a chain that ends early
    c = coarsen(m)
    assert [(t.id, t.dur_us) for t in c.device.streams["7"]] == [
        ("t0", 20.0), ("t2", 10.0), ("t3", 10.0)]
    assert step_us(c) == pytest.approx(step_us(m))


def test_a_launch_bound_chain_whose_end_matters_is_split():
    # t1 waited for its launch; t2 queued behind t1 and is awaited by the sync: merging t1
    # into t0's chain would end it early, so t1 starts its own chain (t1+t2, exact end)
    tasks = [k(0, 10), k(1, 300), k(2, 100)]
    ops = [launch(0), cpu(50), launch(1), launch(2), HostOp(kind="sync", task="t2"), cpu(20)]
    m = model(tasks, ops)
    c = coarsen(m)
    assert [(t.id, t.dur_us) for t in c.device.streams["7"]] == [("t0", 10.0), ("t1", 400.0)]
    assert step_us(c) == pytest.approx(step_us(m))


def test_synced_task_ends_a_chain():
    tasks = [k(0, 500), k(1, 100), k(2, 100), k(3, 100)]
    ops = [launch(0), launch(1), HostOp(kind="sync", name="cudaEventSynchronize", task="t1"),
           launch(2), launch(3), cpu(5)]
    m = model(tasks, ops)
    c = coarsen(m)
    # t1 is awaited by the sync, so nothing after it joins its chain
    merged = {t.id: t.dur_us for t in c.device.streams["7"]}
    assert merged["t0"] == pytest.approx(600.0)
    assert step_us(c) == pytest.approx(step_us(m))


def test_waiting_task_starts_a_new_chain_and_waits_are_remapped():
    tasks = [k(0, 300), k(1, 100), k(5, 50, "communication", stream="20", kind="collective"),
             k(2, 100, "optimizer", phase="forward", waits=["t5"]), k(3, 100)]
    ops = [launch(0), launch(1), launch(5), launch(2), launch(3), cpu(5),
           HostOp(kind="sync", name="cudaDeviceSynchronize")]
    m = model(tasks, ops)
    c = coarsen(m)
    s7 = c.device.streams["7"]
    assert [t.id for t in s7] == ["t0", "t2"]
    assert s7[1].waits == ["t5"] and len(c.device.streams["20"]) == 1
    assert step_us(c) == pytest.approx(step_us(m))


def test_copies_and_phases_are_kept_apart():
    tasks = [k(0, 300), DeviceTask(id="t1", stream="7", name="Memcpy HtoD", kind="memcpy",
                                   category="memcpy", dur_us=50, copy_kind="h2d", pinned=True),
             k(2, 100), k(3, 100, phase="backward")]
    ops = [launch(0), launch(1), launch(2), launch(3), cpu(5),
           HostOp(kind="sync", name="cudaDeviceSynchronize")]
    c = coarsen(model(tasks, ops))
    assert [t.id for t in c.device.streams["7"]] == ["t0", "t1", "t2", "t3"]


def test_shared_trace_coarsens_without_changing_the_replay():
    p = SHARED / "hta" / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    if not p.exists():
        pytest.skip(f"shared traces not present at {SHARED}")
    from stepsim.fit import calibrate_gpu

    m = calibrate_gpu(p, coarse=False)
    c = coarsen(m)
    n_fine = sum(len(ts) for ts in m.device.streams.values())
    n_coarse = sum(len(ts) for ts in c.device.streams.values())
    assert n_coarse < n_fine / 10
    fine = simulate(m, steps=3, warmup=2).median_step_us
    coarse = simulate(c, steps=3, warmup=2).median_step_us
    assert coarse == pytest.approx(fine, rel=0.005)
    cats_f: dict[str, float] = {}
    for t in m.task_map().values():
        for kk, v in t.category_us().items():
            cats_f[kk] = cats_f.get(kk, 0.0) + v
    cats_c: dict[str, float] = {}
    for t in c.task_map().values():
        for kk, v in t.category_us().items():
            cats_c[kk] = cats_c.get(kk, 0.0) + v
    assert cats_c == pytest.approx(cats_f)


@st.composite
def host_device(draw) -> StepModel:
    """A host that launches 2-12 kernels on one or two streams with random CPU between the
    launches, random durations and gaps, a cross-stream wait or a sync on a task now and then,
    and a device-wide sync at the end."""
    n = draw(st.integers(2, 12))
    tasks, ops, ids = [], [], []
    for i in range(n):
        waits = [draw(st.sampled_from(ids))] if ids and draw(st.integers(0, 5)) == 0 else []
        tasks.append(k(i, draw(st.floats(1.0, 300.0)), stream=draw(st.sampled_from(["7", "9"])),
                       gap_us=draw(st.sampled_from([0.0, 2.0, 40.0])), waits=waits,
                       phase=draw(st.sampled_from(["forward", "forward", "backward"]))))
        ops += [cpu(draw(st.floats(0.0, 250.0))), launch(i, draw(st.floats(1.0, 10.0)))]
        if draw(st.integers(0, 6)) == 0:
            ops.append(HostOp(kind="sync", task=f"t{i}"))
        ids.append(f"t{i}")
    return model(tasks, ops + [HostOp(kind="sync"), cpu(draw(st.floats(0.0, 100.0)))])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host_device())
def test_coarsening_keeps_the_replay_busy_time_gaps_and_launches(m):
    c = coarsen(m)
    assert step_us(c) == pytest.approx(step_us(m), rel=1e-9)
    fine, coarse = m.task_map().values(), c.task_map().values()
    assert sum(t.dur_us for t in coarse) == pytest.approx(sum(t.dur_us for t in fine))
    assert sum(t.gap_us for t in coarse) == pytest.approx(sum(t.gap_us for t in fine))
    assert sum(t.launches for t in coarse) == len(fine)
