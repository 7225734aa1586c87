"""The event-free solver (models/solo.py) and its step replay (models/memo.py) against the SimPy
processes: same step times, spans, task runs and host waits on every model they both run."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stepsim.models.metrics import summarize
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                                   LoaderParams, RankParams, StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.record import ListRecorder, Span

MS = 1000.0


def _last(res) -> int:
    return res.warmup + res.step_us.shape[1] - 1


TIE_ULPS = 2.0 ** 20
"""Float steps (ulps of a span's end) within which a wait is a tie's zero-length one: two
engines sum the same instants in different orders, a few ulps apart per sum. A fixed cut such
as 1e-6 µs sits where a model's own durations may: Hypothesis draws the literal constants of
the loaded modules (1e-6 among them), drew a 1e-6 µs launch, and its waits came out 1e-6 µs
one ulp over or under the cut, kept in one run and dropped in the other."""


def real_span(s) -> bool:
    """Whether span ``s`` is compared: busy, or a wait longer than a tie's float noise
    (:data:`TIE_ULPS`), about 2.3e-10 µs below 1 µs and 2.3e-5 µs at 10^5 µs."""
    return s.kind == "busy" or s.dur_us > TIE_ULPS * math.ulp(max(abs(s.start_us + s.dur_us),
                                                                    1.0))


def _spans(res) -> list[tuple]:
    """The spans up to the last measured step, less zero-length waits (on a tie the processes
    may record one; and what of the step after finishes at the run's stop is a tie too)."""
    return sorted((s.lane, s.name, s.kind, round(s.start_us, 6), round(s.dur_us, 6), s.step,
                   s.cause, s.category) for s in res.spans
                  if real_span(s) and s.step <= _last(res))


def _runs(res) -> list[tuple]:
    return sorted((r.step, r.task, r.stream, r.launch_us and round(r.launch_us, 6),
                   round(r.ready_us, 6), round(r.start_us, 6), round(r.end_us, 6))
                  for r in res.runs if r.step <= _last(res))


def assert_rows(got: list[tuple], want: list[tuple]) -> None:
    """Sorted rows equal field by field, times to 1e-5 µs: the rows are sorted on times
    rounded to 6 decimals, and two engines' sums may land either side of a rounding edge
    (2.6203125 is 2.620312 one way and 2.620313 the other)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for x, y in zip(g, w):
            if isinstance(y, float):
                assert x == pytest.approx(y, abs=1e-5)
            else:
                assert x == y


def _waits(res) -> list[tuple]:
    return sorted((w.step, round(w.start_us, 6), round(w.end_us, 6), w.cause, w.tasks)
                  for w in res.host_waits)


def assert_same_records(b, a, spans=_spans) -> None:
    """Two simulations of one model agree: step times and starts, ``spans`` (the rows a test
    compares), task runs and host waits."""
    np.testing.assert_allclose(b.step_us, a.step_us, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(b.step_starts_us, a.step_starts_us, rtol=1e-12, atol=1e-6)
    assert_rows(spans(b), spans(a))
    assert_rows(_runs(b), _runs(a))
    assert_rows(_waits(b), _waits(a))


def assert_same(m: StepModel, steps: int = 6, warmup: int = 2, seed: int = 0) -> None:
    a = simulate(m, steps=steps, warmup=warmup, seed=seed, engine="events")
    b = simulate(m, steps=steps, warmup=warmup, seed=seed)
    assert_same_records(b, a)
    assert summarize(b).critical_path_us == pytest.approx(summarize(a).critical_path_us, abs=1e-3)


def _us(hi: float):
    """A duration in µs to the nanosecond, as a trace holds it: a 2e-60 µs op vanishes when the
    processes add it to a clock past 0 but not when the solver replays a step from 0, a
    difference below any clock's resolution."""
    return st.floats(0, hi).map(lambda x: round(x, 3))


@st.composite
def models(draw) -> StepModel:
    """One rank: 1-3 streams, launches in a random order, random waits on earlier-launched
    tasks (this step or the last), syncs, a pageable copy, a small launch queue, draws."""
    n = draw(st.integers(1, 7))
    n_streams = draw(st.integers(1, 3))
    order = draw(st.permutations(range(n)))
    streams: dict[str, list[DeviceTask]] = {}
    launched_before: list[str] = []
    copy_stream = None
    ops = []
    for pos, i in enumerate(order):
        s = f"s{draw(st.integers(0, n_streams - 1))}"
        tid = f"t{i}"
        waits = [w for w in launched_before if draw(st.booleans()) and draw(st.booleans())]
        prev = [w for w in [f"t{j}" for j in range(n)] if draw(st.integers(0, 5)) == 0]
        copy = draw(st.integers(0, 4)) == 0 and copy_stream in (None, s)
        if copy:
            copy_stream = s
        streams.setdefault(s, []).append(DeviceTask(
            id=tid, stream=s, dur_us=draw(_us(3 * MS)), waits=waits, prev_waits=prev,
            gap_us=draw(st.sampled_from([0.0, 0.0, 150.0])),
            kind="memcpy" if copy else "kernel", copy_kind="h2d" if copy else "",
            pinned=False if copy and draw(st.booleans()) else None,
            phase=draw(st.sampled_from(["forward", "backward", "optimizer"]))))
        samples = draw(st.sampled_from([None, [100.0, 900.0]]))
        ops.append(HostOp(kind="cpu", dur_us=draw(_us(2 * MS)), samples_us=samples,
                          block_fraction=draw(st.sampled_from([0.0, 0.0, 0.5]))))
        ops.append(HostOp(kind="launch", task=tid, dur_us=draw(_us(0.5 * MS))))
        launched_before.append(tid)
        if draw(st.integers(0, 3)) == 0:
            ops.append(HostOp(kind="sync", task=draw(st.sampled_from(launched_before + [None]))))
    if draw(st.booleans()):
        ops.insert(0, HostOp(kind="next_batch"))
    # a prev_waits on a task must name one that exists; a same-step wait one launched earlier
    m = StepModel(
        loader=LoaderParams(produce=DurationSpec(mean_us=500.0, samples_us=[200.0, 800.0])),
        host=HostParams(ops=ops, uses_core=draw(st.booleans()),
                        cpu_scale=draw(st.sampled_from([1.0, 1.3]))),
        device=DeviceParams(streams=streams, launch_queue_depth=draw(st.integers(1, 4))),
        ranks=[RankParams(rank=0, delay_us=draw(st.sampled_from([0.0, 700.0])))])
    return m.model_copy(update={"comm": m.comm.model_copy(
        update={"grad_accum_steps": draw(st.integers(1, 2))})})


def assert_same_where_simulable(m: StepModel, **kw) -> None:
    """:func:`assert_same`, unless the processes refuse the model (e.g. it deadlocks): then
    there is nothing to compare."""
    try:
        simulate(m, steps=2, warmup=0, engine="events")
    except Exception:
        return
    assert_same(m, **kw)


@settings(max_examples=60, deadline=None)
@given(models())
def test_solver_matches_the_processes(m):
    assert_same_where_simulable(m, steps=8, warmup=2)


def _repeating() -> StepModel:
    ops = [HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=300.0, samples_us=[100.0, 500.0])]
    ops += [HostOp(kind="launch", task=f"k{i}", dur_us=10.0) for i in range(4)]
    ops += [HostOp(kind="sync")]
    streams = {"7": [DeviceTask(id=f"k{i}", stream="7", dur_us=400.0 * (i + 1), gap_us=5.0)
                     for i in range(4)]}
    return StepModel(loader=LoaderParams(produce=DurationSpec(mean_us=50.0)),
                     host=HostParams(ops=ops), device=DeviceParams(streams=streams))


def test_repeated_steps_are_replayed_with_the_same_output():
    m = _repeating()
    assert_same(m, steps=40, warmup=3, seed=4)


def test_keep_steps_gives_the_step_times_and_keeps_no_records():
    m = _repeating()
    full = simulate(m, steps=30, warmup=3, seed=2)
    rec = ListRecorder()
    lean = simulate(m, steps=30, warmup=3, seed=2, keep="steps", recorder=rec)
    np.testing.assert_allclose(lean.step_us, full.step_us, rtol=1e-12)
    assert lean.spans == [] and lean.runs == [] and lean.host_waits == []
    # the passed-in recorder was still streamed every span, repeated steps included
    assert sorted(rec.spans) == sorted(full.spans)
    assert all(isinstance(s, Span) for s in rec.spans)


def test_bad_keep_or_engine_is_refused():
    from stepsim.simcore.errors import SimulationError

    with pytest.raises(SimulationError, match="keep"):
        simulate(_repeating(), keep="some")
    with pytest.raises(SimulationError, match="engine"):
        simulate(_repeating(), engine="fast")


@settings(max_examples=40, deadline=None)
@given(models())
def test_walk_without_spans_gives_the_same_instants(m):
    """Where the recorder keeps no span (``keep="steps"``), the host walk adds CPU work and
    launches inline (models/solo_host.py) instead of through ``HostThread.cpu``: the same
    operations in the same order, so the same step times and starts to the bit."""
    try:
        full = simulate(m, steps=8, warmup=2, seed=3)
    except Exception:
        return
    lean = simulate(m, steps=8, warmup=2, seed=3, keep="steps")
    assert np.array_equal(lean.step_us, full.step_us)
    assert np.array_equal(lean.step_starts_us, full.step_starts_us)
