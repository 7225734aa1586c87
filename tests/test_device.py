"""Host thread, streams and copy engines: exact timelines on tiny models."""
from __future__ import annotations

import pytest

from stepsim.models.params import (LAUNCH_QUEUE_DEPTH, DeviceParams, DeviceTask, HostOp, HostParams,
                           RankParams, StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import ModelError

MS = 1000.0


def model(ops: list[HostOp], streams: dict[str, list[DeviceTask]], **kw) -> StepModel:
    return StepModel(host=HostParams(ops=ops, uses_core=False),
                     device=DeviceParams(streams=streams), **kw)


def k(id_: str, stream: str, ms: float, **kw) -> DeviceTask:
    return DeviceTask(id=id_, stream=stream, dur_us=ms * MS, **kw)


def launch(task: str, ms: float = 0.0) -> HostOp:
    return HostOp(kind="launch", task=task, dur_us=ms * MS)


def runs_of(res, step: int) -> dict[str, tuple[float, float]]:
    return {r.task: (r.start_us / MS, r.end_us / MS) for r in res.runs if r.step == step}


def test_kernel_never_starts_before_its_launch_and_streams_run_in_order():
    m = model([launch("a", 1), launch("b", 5), HostOp(kind="sync")],
              {"s": [k("a", "s", 2), k("b", "s", 1)]})
    res = simulate(m, steps=2, warmup=0)
    assert runs_of(res, 0) == {"a": (1, 3), "b": (6, 7)}
    assert res.step_us[0].tolist() == [7 * MS, 7 * MS]


def test_cross_stream_wait():
    m = model([launch("a"), launch("b"), launch("c"), HostOp(kind="sync")],
              {"s1": [k("a", "s1", 4), k("c", "s1", 1)],
               "s2": [k("b", "s2", 1, waits=["a"])]})
    assert runs_of(simulate(m, steps=1, warmup=0), 0) == {"a": (0, 4), "b": (4, 5), "c": (4, 5)}


def test_pageable_copy_blocks_the_host_pinned_overlaps():
    def step(pinned: bool) -> float:
        m = model([launch("fwd"), launch("cp", 0.01), HostOp(kind="cpu", dur_us=3 * MS),
                   HostOp(kind="sync")],
                  {"compute": [k("fwd", "compute", 5)],
                   "h2d": [k("cp", "h2d", 4, kind="memcpy", copy_kind="h2d", pinned=pinned)]})
        return simulate(m, steps=3, warmup=1).mean_step_us / MS
    # pageable: the host waits 4 ms for the copy, then 3 ms of CPU; pinned: they overlap
    assert step(False) == pytest.approx(0.01 + 4 + 3)
    assert step(True) == pytest.approx(5.0)


def test_copies_in_one_direction_share_one_engine():
    m = model([launch("c1"), launch("c2"), HostOp(kind="sync")],
              {"a": [k("c1", "a", 3, kind="memcpy", copy_kind="h2d")],
               "b": [k("c2", "b", 3, kind="memcpy", copy_kind="h2d")]})
    assert runs_of(simulate(m, steps=1, warmup=0), 0) == {"c1": (0, 3), "c2": (3, 6)}
    m2 = m.model_copy(deep=True)
    m2.device.streams["b"][0].copy_kind = "d2h"
    assert runs_of(simulate(m2, steps=1, warmup=0), 0) == {"c1": (0, 3), "c2": (0, 3)}


def test_device_sync_waits_for_unlaunched_work_issued_before_it():
    # the all-reduce is not launched by the host (DDP's hook): it follows "bwd" on the device
    m = model([launch("bwd"), HostOp(kind="sync"), HostOp(kind="cpu", dur_us=1 * MS)],
              {"compute": [k("bwd", "compute", 5)],
               "comm": [k("ar", "comm", 3, kind="collective", category="communication",
                          waits=["bwd"])]})
    assert simulate(m, steps=2, warmup=0).step_us[0].tolist() == [9 * MS, 9 * MS]


def test_sync_on_one_task():
    m = model([launch("a"), launch("b"), HostOp(kind="sync", task="a"),
               HostOp(kind="cpu", dur_us=1 * MS)],
              {"s1": [k("a", "s1", 2)], "s2": [k("b", "s2", 10)]})
    res = simulate(m, steps=1, warmup=0)
    # the host is done at 3 ms; the step is over when stream s2 finishes b at 10 ms
    assert res.step_starts_us[0][1] == 3 * MS
    assert res.step_us[0][0] == 10 * MS
    assert [(w.start_us, w.end_us, w.tasks) for w in res.host_waits][:1] == [(0.0, 2 * MS, ((0, "a"),))]


def test_collective_ends_when_last_rank_arrives():
    m = model([launch("fwd"), HostOp(kind="sync")],
              {"compute": [k("fwd", "compute", 10, phase="forward")],
               "comm": [k("ar", "comm", 2, kind="collective", category="communication",
                          waits=["fwd"])]},
              ranks=[RankParams(rank=0), RankParams(rank=1, phase_extra_us={"forward": 8 * MS})])
    res = simulate(m, steps=1, warmup=0)
    ar = {r.rank: r for r in res.runs if r.task == "ar" and r.step == 0}
    assert (ar[0].ready_us, ar[0].start_us, ar[0].end_us) == (10 * MS, 18 * MS, 20 * MS)
    assert (ar[1].ready_us, ar[1].start_us, ar[1].end_us) == (18 * MS, 18 * MS, 20 * MS)
    skew = [s for s in res.spans if s.cause == "arrival_skew" and s.step == 0]
    assert [(s.rank, s.dur_us) for s in skew] == [(0, 8 * MS)]


def test_launch_queue_bounds_run_ahead():
    ops = [launch(f"k{i}", 0.001) for i in range(LAUNCH_QUEUE_DEPTH + 10)]
    m = model(ops, {"s": [k(f"k{i}", "s", 10) for i in range(LAUNCH_QUEUE_DEPTH + 10)]})
    res = simulate(m, steps=1, warmup=0)
    waits = [s for s in res.spans if s.cause == "launch_queue"]
    # 1024 launches of 1 us fill the queue; the next waits for the first kernel (ends 10.001 ms)
    assert (waits[0].start_us, waits[0].end_us) == pytest.approx((1024.0, 10_001.0))


def test_sync_on_a_task_launched_later_is_a_deadlock_error():
    m = model([HostOp(kind="sync", task="a"), launch("a")], {"s": [k("a", "s", 1)]})
    with pytest.raises(ModelError, match="deadlocked"):
        simulate(m, steps=1, warmup=0)


def test_cpu_op_samples_are_drawn_per_step_with_the_host_stream():
    m = model([HostOp(kind="cpu", dur_us=1.0, samples_us=[1 * MS, 3 * MS])], {})
    a = simulate(m, steps=200, warmup=0, seed=1)
    assert set(a.step_us[0].tolist()) == {1 * MS, 3 * MS}
    assert a.mean_step_us == pytest.approx(2 * MS, rel=0.15)
    b = simulate(m, steps=200, warmup=0, seed=1)
    assert a.step_us.tolist() == b.step_us.tolist()


def test_same_seed_same_spans():
    from stepsim.models.params import DurationSpec, LoaderParams
    m = model([HostOp(kind="next_batch"), launch("a", 0.1), HostOp(kind="sync")],
              {"s": [k("a", "s", 2)]}).model_copy(update={"loader": LoaderParams(
                  num_workers=3, host_cores=2, produce=DurationSpec(mean_us=5 * MS, cv=0.5))})
    assert simulate(m, seed=7).spans == simulate(m, seed=7).spans


def test_coarsened_task_holds_one_slot_per_fine_launch():
    cap = LAUNCH_QUEUE_DEPTH
    # one task standing for cap - 1 fine launches fills the queue but for one slot
    m = model([launch("big", 0.001), launch("a", 0.001), launch("b", 0.001), HostOp(kind="sync")],
              {"s": [k("big", "s", 10, launches=cap - 1), k("a", "s", 1), k("b", "s", 1)]})
    res = simulate(m, steps=1, warmup=0)
    waits = [s for s in res.spans if s.cause == "launch_queue" and s.step == 0]
    assert len(waits) == 1 and (waits[0].start_us, waits[0].end_us) == pytest.approx((2.0, 10_001.0))


def test_gap_is_idle_after_ready_not_busy():
    # b is ready when a ends (2 ms) but starts 1.5 ms later: a wait span, not busy time
    m = model([launch("a"), launch("b"), HostOp(kind="sync")],
              {"s": [k("a", "s", 2), k("b", "s", 1, gap_us=1.5 * MS)]})
    res = simulate(m, steps=1, warmup=0)
    assert runs_of(res, 0) == {"a": (0, 2), "b": (3.5, 4.5)}
    run_b = [r for r in res.runs if r.task == "b"][0]
    assert (run_b.ready_us, run_b.gap_us) == (2 * MS, 1.5 * MS)
    idle = [s for s in res.spans if s.cause == "device_idle" and s.step == 0]
    assert [(s.start_us, s.dur_us, s.kind) for s in idle] == [(2 * MS, 1.5 * MS, "wait")]
    busy = sorted(s.dur_us for s in res.spans
                  if s.kind == "busy" and ".stream:" in s.lane and s.step == 0)
    assert busy == [1 * MS, 2 * MS]
    # device.gap_scale scales every gap
    m2 = m.model_copy(update={"device": m.device.model_copy(update={"gap_scale": 0.0})})
    assert runs_of(simulate(m2, steps=1, warmup=0), 0)["b"] == (2, 3)


def test_a_collective_is_entered_after_its_gap():
    m = model([launch("fwd"), HostOp(kind="sync")],
              {"compute": [k("fwd", "compute", 10, phase="forward")],
               "comm": [k("ar", "comm", 2, kind="collective", category="communication",
                          waits=["fwd"], gap_us=3 * MS)]},
              ranks=[RankParams(rank=0), RankParams(rank=1, phase_extra_us={"forward": 1 * MS})])
    res = simulate(m, steps=1, warmup=0)
    ar = {r.rank: r for r in res.runs if r.task == "ar" and r.step == 0}
    # rank 0 enters at 10 + 3, rank 1 at 11 + 3: 1 ms of skew on rank 0, then 2 ms transfer
    assert (ar[0].start_us, ar[0].end_us) == (14 * MS, 16 * MS)
    skew = [s for s in res.spans if s.cause == "arrival_skew" and s.step == 0]
    assert [(s.rank, s.start_us, s.dur_us) for s in skew] == [(0, 13 * MS, 1 * MS)]
