"""Ranks that meet only at collectives, solved without events (models/solo_ranks.py), against
the SimPy processes: same step times, spans, task runs and host waits."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from stepsim.models import processes
from stepsim.models.params import (CommParams, DeviceParams, DeviceTask, HostOp, HostParams,
                                   RankParams, StepModel)
from stepsim.models.simulate import simulate
from tests.conftest import shared_traces
from tests.test_solo import MS, assert_same, assert_same_where_simulable


def _solved_without_events(m: StepModel, monkeypatch) -> bool:
    """Whether ``simulate(m)`` takes the event-free path (the processes never start)."""
    ran = []
    real = processes.simulated
    monkeypatch.setattr("stepsim.models.simulate.simulated",
                        lambda *a: ran.append(1) or real(*a))
    simulate(m, steps=2, warmup=1)
    monkeypatch.setattr("stepsim.models.simulate.simulated", real)
    return not ran


@st.composite
def rank_models(draw) -> StepModel:
    """2-4 ranks: a compute stream, a copy stream sharing its copy engines and a comm stream
    of collectives, each waiting on random
    tasks (mostly launched earlier), compute tasks waiting on collectives, syncs on either, a small
    launch queue, per-rank delays and phase skews, gradient accumulation."""
    n = draw(st.integers(2, 7))
    kinds = [draw(st.integers(0, 2)) == 0 for _ in range(n)]
    # copies on the compute stream and a copy stream: two streams share an engine
    copies = [None if coll else draw(st.sampled_from([None, None, "h2d", "d2h"]))
              for coll in kinds]
    on = [draw(st.sampled_from(["7", "22"])) if c else "7" for c in copies]
    ids = [f"{'c' if coll else 'k'}{i}" for i, coll in enumerate(kinds)]
    lag = draw(st.sampled_from([0, 0, -2.5, 1.5, 3.5]))

    def key(j: int) -> float:
        return j + (lag if kinds[j] else 0.0)

    streams: dict[str, list[DeviceTask]] = {}
    ops, launched = [], []
    for i, coll in enumerate(kinds):
        s = "comm" if coll else on[i]
        tid = ids[i]
        # on tasks before it in an order where the comm stream is shifted by ``lag``, so that
        # it may wait on a task launched after it (a launch queue then fills with tasks whose
        # ends wait on the host) and the waits stay acyclic
        waits = [w for j, w in enumerate(ids) if key(j) < key(i) and draw(st.integers(0, 3)) == 0]
        streams.setdefault(s, []).append(DeviceTask(
            id=tid, stream=s, dur_us=draw(st.floats(1.0 if copies[i] else 0.0, 2 * MS)),
            waits=waits,
            prev_waits=[w for w in launched if draw(st.integers(0, 6)) == 0],
            gap_us=draw(st.sampled_from([0.0, 0.0, 120.0])),
            kind="collective" if coll else "memcpy" if copies[i] else "kernel",
            copy_kind=copies[i] or "", pinned=False if copies[i] and draw(st.booleans()) else None,
            category="communication" if coll else "memcpy" if copies[i] else "gemm",
            phase=draw(st.sampled_from(["forward", "backward", "optimizer"]))))
        ops.append(HostOp(kind="cpu", dur_us=draw(st.floats(0, 1.5 * MS)),
                          samples_us=draw(st.sampled_from([None, [100.0, 700.0]]))))
        ops.append(HostOp(kind="launch", task=tid, dur_us=draw(st.floats(0, 0.3 * MS))))
        launched.append(tid)
        if draw(st.integers(0, 3)) == 0:
            ops.append(HostOp(kind="sync", task=draw(st.sampled_from(launched + [None]))))
    n_ranks = draw(st.integers(2, 4))
    phases = ["forward", "backward"]
    ranks = [RankParams(rank=r, delay_us=draw(st.sampled_from([0.0, 0.0, 900.0])),
                        phase_extra_us={p: 400.0 for p in phases if draw(st.booleans())})
             for r in range(n_ranks)]
    return StepModel(
        host=HostParams(ops=ops, uses_core=draw(st.booleans())),
        device=DeviceParams(streams=streams, launch_queue_depth=draw(st.integers(1, 3))),
        comm=CommParams(world_size=n_ranks, grad_accum_steps=draw(st.integers(1, 2))),
        ranks=ranks)


@settings(max_examples=60, deadline=None)
@given(rank_models())
def test_ranks_solver_matches_the_processes(m):
    assert_same_where_simulable(m, steps=6, warmup=2, seed=3)


def _ring(n_ranks: int, delays: list[float], depth: int = 1024) -> StepModel:
    """Forward, two bucketed all-reduces overlapping backward, an optimizer after both, a
    loss ``.item()`` sync on the last all-reduce; rank skews from ``delays``."""
    comp = [DeviceTask(id="fwd", stream="7", dur_us=3 * MS, phase="forward"),
            DeviceTask(id="bwd0", stream="7", dur_us=2 * MS, phase="backward"),
            DeviceTask(id="bwd1", stream="7", dur_us=2 * MS, phase="backward"),
            DeviceTask(id="opt", stream="7", dur_us=0.5 * MS, phase="optimizer",
                       waits=["ar0", "ar1"])]
    comm = [DeviceTask(id="ar0", stream="comm", kind="collective", waits=["bwd0"],
                       dur_us=1.5 * MS, phase="backward", bytes=2 ** 20),
            DeviceTask(id="ar1", stream="comm", kind="collective", waits=["bwd1"],
                       dur_us=1.5 * MS, phase="backward", bytes=2 ** 20)]
    ops = [HostOp(kind="cpu", dur_us=400.0)]
    ops += [HostOp(kind="launch", task=t, dur_us=20.0)
            for t in ("fwd", "bwd0", "ar0", "bwd1", "ar1", "opt")]
    ops += [HostOp(kind="sync", task="ar1")]
    return StepModel(host=HostParams(ops=ops),
                     device=DeviceParams(streams={"7": comp, "comm": comm},
                                         launch_queue_depth=depth),
                     comm=CommParams(world_size=n_ranks),
                     ranks=[RankParams(rank=r, delay_us=d) for r, d in enumerate(delays)])


def test_a_straggler_sets_every_ranks_collective_start(monkeypatch):
    m = _ring(4, [0.0, 0.0, 2 * MS, 0.0])
    assert _solved_without_events(m, monkeypatch)
    assert_same(m, steps=8, warmup=2)
    res = simulate(m, steps=4, warmup=1)
    # closed form: every rank's step is the straggler's path (each step ends in a sync on
    # ar1): its delay, the CPU op and fwd's launch, fwd, bwd0, bwd1, then ar1 (the last
    # entry is its own, after bwd1)
    path = 2 * MS + 400.0 + 20.0 + 3 * MS + 2 * MS + 2 * MS + 1.5 * MS
    assert res.step_us == pytest.approx(path, abs=1e-6)
    skew = [s for s in res.spans if s.cause == "arrival_skew" and s.step == 2]
    assert {s.rank for s in skew} == {0, 1, 3}
    # a fast rank enters ar0 the delay earlier, less the 80 µs by which the previous step's
    # optimizer (0.5 ms after ar1) outlasts its CPU op and fwd's launch (0.42 ms)
    assert [s.dur_us for s in skew if s.name == "ar0"] == pytest.approx([2 * MS - 80.0] * 3)


def test_a_launch_queue_full_of_collectives_matches(monkeypatch):
    m = _ring(3, [0.0, 1.3 * MS, 0.4 * MS], depth=2)
    assert _solved_without_events(m, monkeypatch)
    assert_same(m, steps=8, warmup=2, seed=5)


def test_a_collective_one_rank_never_enters_falls_back_to_the_processes_error():
    from stepsim.simcore.errors import SimulationError

    m = _ring(2, [0.0, 0.0])
    # rank-dependent sync on a collective the host launches after it: a deadlock
    ops = [HostOp(kind="sync", task="ar0")] + list(m.host.ops)
    bad = m.model_copy(update={"host": HostParams(ops=ops)})
    with pytest.raises(SimulationError, match="deadlock"):
        simulate(bad, steps=2, warmup=0)


def test_ranks_sharing_a_contended_host_stay_in_simpy(monkeypatch):
    m = _ring(2, [0.0, 0.0])
    ranks = [r.model_copy(update={"host": "h0"}) for r in m.ranks]
    busy = m.model_copy(update={"ranks": ranks, "loader": m.loader.model_copy(
        update={"host_cores": 1}), "host": m.host.model_copy(update={"uses_core": True})})
    assert not _solved_without_events(busy, monkeypatch)
    assert _solved_without_events(m, monkeypatch)


def test_the_dlrm_job_matches_the_processes(monkeypatch):
    """The real 8-rank DLRM trace, calibrated: all-to-alls and all-reduces across ranks, and
    three streams per rank sharing the H2D copy engine."""
    from stepsim.fit import calibrate_gpu
    from stepsim.models.coarsen import coarsen

    m = coarsen(calibrate_gpu(shared_traces() / "param" / "dlrm_kineto", coarse=False))
    assert len(m.ranks) == 8
    assert _solved_without_events(m, monkeypatch)
    assert_same(m, steps=4, warmup=2)
