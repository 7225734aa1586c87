"""The DataLoader solved without events (models/solo_loader.py) against the SimPy processes:
same step times, spans, task runs, host waits and queue depths wherever no thread waits for
a core; closed forms of the producer- and consumer-bound pipelines; real traces."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stepsim.models.engine import Runs, Setup, Waits, solved
from stepsim.models.metrics import summarize
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                                   LoaderParams, RankParams, StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.record import NullRecorder
from tests.conftest import shared_traces
from tests.test_solo import _us, real_span

MS = 1000.0


def _stop(res) -> float:
    last = res.warmup + res.step_us.shape[1] - 1
    ends = [r.end_us for r in res.runs if r.step == last]
    return max([res.step_starts_us[0][-1], *ends])


def _spans(res) -> list[tuple]:
    """Spans up to the last measured step; of those tied to no step (workers, pin thread),
    the ones that ended before the run's stop (at the stop instant itself the processes keep
    or drop one by SimPy's order of simultaneous events); no zero-length waits."""
    last, stop = res.warmup + res.step_us.shape[1] - 1, _stop(res) - 1e-6
    return sorted((s.lane, s.name, s.kind, round(s.start_us, 6), round(s.dur_us, 6), s.step,
                   s.cause, s.category) for s in res.spans
                  if real_span(s) and s.step <= last
                  and (s.step >= 0 or s.start_us + s.dur_us < stop))


def _depths(res) -> dict[str, list[tuple]]:
    """Each queue-depth series as its value after every instant before the stop (the order of
    changes within one instant is SimPy's event order)."""
    stop = _stop(res) - 1e-6
    out = {}
    for name, pts in res.samples.items():
        last: dict[float, float] = {}
        for t, v in pts:
            if t < stop:
                last[round(t, 6)] = v
        out[name] = sorted(last.items())
    return out


def assert_same(m: StepModel, steps: int = 8, warmup: int = 2, seed: int = 0) -> None:
    a = simulate(m, steps=steps, warmup=warmup, seed=seed, engine="events")
    b = simulate(m, steps=steps, warmup=warmup, seed=seed)
    np.testing.assert_allclose(b.step_us, a.step_us, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(b.step_starts_us, a.step_starts_us, rtol=1e-12, atol=1e-6)
    assert _spans(b) == _spans(a)
    last = a.warmup + a.step_us.shape[1] - 1
    runs = [sorted((r.step, r.task, round(r.start_us, 6), round(r.end_us, 6))
                   for r in x.runs if r.step <= last) for x in (a, b)]
    assert runs[0] == runs[1]
    assert sorted((w.step, round(w.start_us, 6), round(w.end_us, 6), w.cause)
                  for w in b.host_waits) == sorted(
        (w.step, round(w.start_us, 6), round(w.end_us, 6), w.cause) for w in a.host_waits)
    assert _depths(b) == _depths(a)
    sa, sb = a.loader_stats[0], b.loader_stats[0]
    assert sb.consumed == sa.consumed
    assert sb.max_outstanding == sa.max_outstanding
    assert summarize(b).critical_path_us == pytest.approx(summarize(a).critical_path_us, abs=1e-3)


def _is_solved(m: StepModel) -> bool:
    su = Setup(m, 2, 0, 0, False, NullRecorder())
    return solved(su, Runs(False), Waits(False)) is not None


_PRODUCE = [DurationSpec(mean_us=2 * MS), DurationSpec(mean_us=1.5 * MS, cv=0.4),
            DurationSpec(mean_us=500.0, samples_us=[200.0, 800.0]),
            DurationSpec(mean_us=4 * MS, samples_us=[3 * MS, 5 * MS])]


@st.composite
def models(draw) -> StepModel:
    """One rank with a DataLoader of 1-4 workers on enough cores: any prefetch, pin memory,
    unpickling, per-worker times, intra-op threads, start-up, epochs; a host step of CPU work,
    launches and a sync, sometimes a second next() or none."""
    nw = draw(st.integers(1, 4))
    tpw = draw(st.integers(1, 2))
    pin = draw(st.booleans())
    per_worker = [draw(st.sampled_from(_PRODUCE)) for _ in range(nw)] \
        if draw(st.booleans()) else None
    lp = LoaderParams(
        num_workers=nw, prefetch_factor=draw(st.integers(1, 3)), pin_memory=pin,
        produce=draw(st.sampled_from(_PRODUCE)), produce_by_worker=per_worker,
        threads_per_worker=tpw, host_cores=nw * tpw + 2 + draw(st.integers(0, 2)),
        unpickle_us=draw(st.sampled_from([0.0, 0.0, 300.0])),
        batch_bytes=draw(st.sampled_from([0, 4 << 20])),
        worker_startup_us=draw(st.sampled_from([0.0, 0.0, 5 * MS])),
        persistent_workers=draw(st.booleans()),
        batches_per_epoch=draw(st.sampled_from([None, None, 3, 5])))
    n = draw(st.integers(1, 4))
    tasks = [DeviceTask(id=f"t{i}", stream="7", dur_us=draw(_us(3 * MS)),
                        gap_us=draw(st.sampled_from([0.0, 150.0]))) for i in range(n)]
    ops = [HostOp(kind="next_batch")] if draw(st.integers(0, 5)) else []
    for t in tasks:
        ops.append(HostOp(kind="cpu", dur_us=draw(_us(2 * MS)),
                          samples_us=draw(st.sampled_from([None, [100.0, 900.0]]))))
        ops.append(HostOp(kind="launch", task=t.id, dur_us=draw(_us(0.3 * MS))))
    if draw(st.booleans()):
        ops.insert(draw(st.integers(0, len(ops))), HostOp(kind="next_batch"))
    if draw(st.booleans()):
        ops.append(HostOp(kind="sync"))
    if not ops or all(op.kind != "next_batch" for op in ops) and draw(st.booleans()):
        ops.append(HostOp(kind="next_batch"))
    return StepModel(
        loader=lp,
        host=HostParams(ops=ops, uses_core=draw(st.booleans()),
                        cpu_scale=draw(st.sampled_from([1.0, 1.3]))),
        device=DeviceParams(streams={"7": tasks}, launch_queue_depth=draw(st.integers(1, 4))),
        ranks=[RankParams(rank=0, delay_us=draw(st.sampled_from([0.0, 700.0])))])


@settings(max_examples=80, deadline=None)
@given(models(), st.integers(0, 3))
def test_solved_loader_matches_the_processes(m, seed):
    assert _is_solved(m)
    assert_same(m, steps=10, warmup=2, seed=seed)


def _pipeline(nw: int, produce_us: float, consume_us: float, **kw) -> StepModel:
    """A step of one next() and ``consume_us`` of host CPU work, no device work to speak of."""
    ops = [HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=consume_us),
           HostOp(kind="launch", task="k", dur_us=0.0)]
    return StepModel(
        loader=LoaderParams(num_workers=nw, produce=DurationSpec(mean_us=produce_us),
                            host_cores=nw + 2, **kw),
        host=HostParams(ops=ops),
        device=DeviceParams(streams={"7": [DeviceTask(id="k", stream="7", dur_us=1.0)]}))


@pytest.mark.parametrize("nw", [1, 2, 4])
def test_producer_bound_step_is_produce_over_workers(nw):
    m = _pipeline(nw, 40 * MS, 1 * MS)
    assert _is_solved(m)
    res = simulate(m, steps=20, warmup=10)
    # the workers run in lock step: nw batches at once every 40 ms, so over nw steps
    per = res.step_us[0].reshape(-1, nw).sum(axis=1)
    np.testing.assert_allclose(per, 40 * MS, rtol=1e-9)
    assert_same(m, steps=8, warmup=4)


def test_consumer_bound_step_is_consume():
    m = _pipeline(4, 10 * MS, 5 * MS, pin_memory=True, batch_bytes=8 << 20, pin_gbps=8.0)
    res = simulate(m, steps=20, warmup=10)
    np.testing.assert_allclose(res.step_us[0], 5 * MS, rtol=1e-9)
    assert res.loader_stats[0].max_outstanding == 8


def test_pin_thread_bound_step_is_the_pin_time():
    """Pinning 80 MB at 8 GB/s (10 ms) on one thread, behind four 10 ms workers: 10 ms."""
    m = _pipeline(4, 10 * MS, 1 * MS, pin_memory=True, batch_bytes=80_000_000, pin_gbps=8.0)
    res = simulate(m, steps=20, warmup=10)
    np.testing.assert_allclose(res.step_us[0], 10 * MS, rtol=1e-9)
    assert_same(m, steps=12, warmup=3)


def test_contended_cores_keep_the_processes():
    m = _pipeline(4, 10 * MS, 1 * MS).model_copy(deep=True)
    m.loader.host_cores = 2
    assert not _is_solved(m)
    m.loader.host_cores = 8
    m.host.interference = 0.1
    assert not _is_solved(m)


def test_real_trace_with_workers_matches_the_processes():
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.paths import set_value

    trace = shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0/worker0.pt.trace.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} not present")
    base = calibrate_gpu(trace)
    for nw, pin in ((4, False), (2, True)):
        m = set_value(set_value(base, "loader.num_workers", nw), "loader.pin_memory", pin)
        assert _is_solved(m)
        assert_same(m, steps=6, warmup=2, seed=3)


def test_repeated_steps_with_workers_are_replayed_with_the_same_output(monkeypatch):
    """Consumer-bound workers with sampled produce times: steps repeat (the loader's state cut
    to what can still matter, the step's draws in the key) and are replayed, same output."""
    from stepsim.models import memo

    hits = []
    get = memo.StepMemo.get
    monkeypatch.setattr(memo.StepMemo, "get", lambda self, key: hits.append(
        get(self, key) is not None) or get(self, key))
    for pin in (False, True):
        m = _pipeline(3, 10 * MS, 6 * MS, pin_memory=pin, batch_bytes=8 << 20, unpickle_us=200.0,
                      produce_by_worker=[DurationSpec(mean_us=10 * MS, samples_us=[8 * MS, 12 * MS])] * 3)
        hits.clear()
        assert_same(m, steps=40, warmup=3, seed=5)
        assert sum(hits) > 20
