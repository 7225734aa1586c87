"""Hypothesis invariants of the simulator on random small models."""
from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepsim.models.metrics import summarize
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                           LoaderParams, RankParams, StepModel)
from stepsim.models.simulate import simulate

MS = 1000.0
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def loaders(draw) -> LoaderParams:
    nw = draw(st.integers(0, 4))
    times = st.floats(0.5, 20.0).map(lambda ms: DurationSpec(mean_us=ms * MS, cv=0.3))
    return LoaderParams(
        num_workers=nw, prefetch_factor=draw(st.integers(1, 3)), in_order=draw(st.booleans()),
        pin_memory=draw(st.booleans()), batch_bytes=draw(st.sampled_from([0, 4_000_000])),
        host_cores=draw(st.integers(1, 4)), threads_per_worker=draw(st.integers(1, 2)),
        unpickle_us=draw(st.sampled_from([0.0, 500.0])),
        batches_per_epoch=draw(st.one_of(st.none(), st.integers(2, 6))),
        persistent_workers=draw(st.booleans()),
        worker_startup_us=draw(st.sampled_from([0.0, 5 * MS])),
        produce_by_worker=[draw(times) for _ in range(nw)] if nw and draw(st.booleans()) else None,
        produce=draw(times))


@st.composite
def models(draw) -> StepModel:
    n = draw(st.integers(1, 4))
    streams: dict[str, list[DeviceTask]] = defaultdict(list)
    ids = []
    for i in range(n):
        s = draw(st.sampled_from(["s0", "s1", "copy"]))
        waits = [w for w in ids if draw(st.booleans())][:1] if ids else []
        copy = s == "copy"
        streams[s].append(DeviceTask(
            id=f"t{i}", stream=s, dur_us=draw(st.floats(0.0, 10.0)) * MS, waits=waits,
            kind="memcpy" if copy else "kernel", copy_kind="h2d" if copy else "",
            pinned=draw(st.booleans()) if copy else None, category="memcpy" if copy else "gemm",
            phase="forward"))
        ids.append(f"t{i}")
    ops = [HostOp(kind="next_batch")]
    for i in ids:
        ops.append(HostOp(kind="launch", task=i, dur_us=draw(st.floats(0.0, 2.0)) * MS))
        if draw(st.booleans()):
            ops.append(HostOp(kind="cpu", dur_us=draw(st.floats(0.0, 5.0)) * MS))
    if draw(st.booleans()):
        ops.append(HostOp(kind="sync"))
    ranks = [RankParams(rank=r, delay_us=draw(st.sampled_from([0.0, 3 * MS])))
             for r in range(draw(st.integers(1, 2)))]
    return StepModel(loader=draw(loaders()), host=HostParams(ops=ops),
                     device=DeviceParams(streams=dict(streams)), ranks=ranks)


@SETTINGS
@given(models(), st.integers(0, 3))
def test_batches_are_consumed_once_and_bounds_hold(model, seed):
    res = simulate(model, steps=5, warmup=2, seed=seed)
    lp = model.loader
    for stats in res.loader_stats:
        assert len(set(stats.consumed)) == len(stats.consumed)
        assert set(stats.consumed) <= set(stats.produced)
        assert len(set(stats.produced)) == len(stats.produced)
        if lp.in_order or lp.num_workers == 0:
            assert stats.consumed == list(range(len(stats.consumed)))
        if lp.num_workers:
            cap = lp.num_workers * lp.prefetch_factor
            assert stats.max_outstanding <= cap and stats.max_ready <= cap
    for series, pts in res.samples.items():
        if series.endswith((".ready", ".buffered", ".outstanding")):
            assert all(0 <= v <= max(lp.num_workers * lp.prefetch_factor, 1) for _, v in pts)


@SETTINGS
@given(models(), st.integers(0, 3))
def test_no_lane_runs_two_things_at_once_and_step_covers_every_lane(model, seed):
    res = simulate(model, steps=5, warmup=2, seed=seed)
    by_lane = defaultdict(list)
    for sp in res.spans:
        assert sp.dur_us >= 0
        if sp.kind == "busy" and sp.dur_us > 0:
            by_lane[sp.lane].append(sp)
    for lane, spans in by_lane.items():
        spans.sort(key=lambda s: s.start_us)
        for a, b in zip(spans, spans[1:]):
            assert a.end_us <= b.start_us + 1e-6, (lane, a, b)
    s = summarize(res)
    for lane, frac in s.lane_busy.items():
        assert frac <= 1.0 + 1e-9, lane   # per step: step time >= the lane's busy time
    assert sum(s.critical_path_us.values()) == pytest.approx(s.rank_step_us[res.ranks[0]], rel=1e-6)
    assert s.compute_busy_us <= s.rank_step_us[res.ranks[0]] + 1e-6
