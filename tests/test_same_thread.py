"""The main thread's own cost of making its batches (``host.same_thread``, issue 10: the demo's
0-worker rows predicted low): closed forms of the simulator's factor, of the probe's fit, and
the prior's path through calibration and the interval."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from stepsim.calibration.corun import Activity, corun_loads
from stepsim.calibration.same_thread import (SAME_THREAD_POINT, SAME_THREAD_PRIOR,
                                             fit_same_thread, same_thread_from_sidecar)
from stepsim.calibration.sidecar import Probe, ProduceRecord, Sidecar, StepRecord
from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel
from stepsim.models.same_thread import on_main_thread, same_thread_factor
from stepsim.models.simulate import simulate
from stepsim.scenarios.draws import uncertain_params
from stepsim.scenarios.op_text import parse_set


def _model(nw: int, produce_us: float, step_us: float, s: float, ref: float = 0.0,
           cores: int = 4) -> StepModel:
    return StepModel(
        loader=LoaderParams(num_workers=nw, host_cores=cores,
                            produce=DurationSpec(mean_us=produce_us)),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=step_us)],
                        same_thread=s, same_thread_range=(0.0, 2 * s) if s else None,
                        same_thread_ref=ref))


@settings(max_examples=20, deadline=None)
@given(p_ms=st.integers(5, 80), c_ms=st.integers(5, 80), s=st.floats(0.0, 0.5))
def test_zero_workers_pay_it_on_batch_and_step(p_ms, c_ms, s):
    """Captured with workers, run at 0: the main thread makes the batch, then trains, each
    ``1 + s`` times dearer: a step of ``(p + c)(1 + s)`` µs exactly."""
    m = _model(0, p_ms * 1e3, c_ms * 1e3, s)
    res = simulate(m, steps=10, warmup=2)
    assert res.mean_step_us == pytest.approx((p_ms + c_ms) * 1e3 * (1 + s), rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(p_ms=st.integers(5, 80), c_ms=st.integers(5, 80), s=st.floats(0.0, 0.5))
def test_capture_at_zero_takes_it_off_with_workers(p_ms, c_ms, s):
    """Captured at 0 workers (``same_thread_ref`` 1), run with 2 workers on 4 cores: the
    worker's batch and the step shed the factor: the step is ``max(c, p / 2) / (1 + s)``."""
    m = _model(2, p_ms * 1e3, c_ms * 1e3, s, ref=1.0)
    res = simulate(m, steps=40, warmup=8)
    want = max(c_ms, p_ms / 2) * 1e3 / (1 + s)
    assert res.mean_step_us == pytest.approx(want, rel=0.02)


def test_the_capture_setting_is_unchanged():
    """At the capture's own side of num_workers=0 the factor is 1: the model itself."""
    for nw, ref in ((1, 0.0), (0, 1.0)):
        m = _model(nw, 30e3, 20e3, 0.3, ref)
        assert on_main_thread(m) is m
    assert same_thread_factor(0.3, True, 1.0) == 1.0
    assert same_thread_factor(0.3, False, 1.0) == pytest.approx(1 / 1.3)


def test_interval_draws_it_only_where_read():
    """The range widens a what-if to 0 workers, not one that stays with workers."""
    m = _model(1, 30e3, 20e3, 0.1)
    to_zero, _ = uncertain_params(m, [parse_set("loader.num_workers=0")])
    assert to_zero["host.same_thread"] == (0.0, 0.2)
    more, skipped = uncertain_params(m, [parse_set("loader.num_workers=4")])
    assert "host.same_thread" not in more and "host.same_thread" in skipped


def _acts(batch_cpu, step_cpu, n, workers, t0=0.0):
    """``n`` steps of 100 ms: a batch of 40 ms (beside the step when ``workers``, before it
    otherwise) and a step of 50 ms of CPU (one thread each)."""
    out = []
    for i in range(n):
        t = t0 + i * 100_000.0
        b0 = t if workers else t
        out.append(Activity(b0, b0 + 40_000, 1.0, batch_cpu * (1 + 0.01 * (i % 3)), "batch"))
        s0 = t if workers else t + 40_000
        out.append(Activity(s0, s0 + 50_000, 1.0, step_cpu * (1 + 0.01 * (i % 2)), "step"))
    return out


@pytest.mark.parametrize("k", [0.0, 0.08])
@pytest.mark.parametrize("s", [0.0, 0.09, 0.2])
def test_fit_recovers_the_cost_after_interference(k, s):
    """A probe at 0 workers whose batch and step cost ``(1 + s)`` times the capture's, less the
    interference the model prices between the loads: the fit returns ``s`` (closed form: the
    CPU-weighted ratio of medians over each kind's interference factor)."""
    cal = _acts(40_000.0, 50_000.0, 12, workers=True)
    l0 = corun_loads(cal, 2)
    ob, os_ = (np.mean([x for a, x in zip(cal, l0) if a.kind == kind]) for kind in ("batch", "step"))
    # the probe: alone on the main thread (load 0), each kind (1 + s) × its relief
    probe = _acts(40_000.0 * (1 + s) / (1 + k * ob), 50_000.0 * (1 + s) / (1 + k * os_), 12,
                  workers=False, t0=5e6)
    point, (lo, hi) = fit_same_thread(cal, probe, 2, k, inline_probe=True)
    assert point == pytest.approx(s, abs=1e-9)
    assert lo <= point + 0.01 and hi >= point - 0.01


def test_fit_from_the_other_side():
    """A capture at 0 workers and a probe with workers: the probe's cost is ``1 / (1 + s)``."""
    s = 0.12
    cal = _acts(40_000.0 * (1 + s), 50_000.0 * (1 + s), 12, workers=False)
    probe = _acts(40_000.0, 50_000.0, 12, workers=True, t0=5e6)
    point, _ = fit_same_thread(cal, probe, 2, 0.0, inline_probe=False)
    assert point == pytest.approx(s, abs=1e-9)


def _sidecar(probe_workers):
    steps = [StepRecord(t_start_us=i * 1e5, wall_us=9e4, cpu_us=9e4, next_wall_us=4e4,
                        next_cpu_us=1e3) for i in range(6)]
    produce = [ProduceRecord(worker=0, pid=2, seq=i, wall_us=4e4, cpu_us=4e4,
                             t_end_us=i * 1e5 + 4e4) for i in range(6)]
    probe = None if probe_workers is None else Probe(num_workers=probe_workers, steps=[],
                                                     produce=[])
    return Sidecar(stepsim_sidecar=1, loader={"num_workers": 1}, host_cores=2, steps=steps,
                   produce=produce,
                   probe=probe)


@pytest.mark.parametrize("probe_workers", [None, 2])
def test_without_a_probe_across_zero_the_prior(probe_workers):
    """No probe, or one that stays with workers: the stated prior, assumed, and said."""
    host, src, warn = same_thread_from_sidecar(_sidecar(probe_workers), 0.08)
    lo, hi = SAME_THREAD_PRIOR
    assert host == {"same_thread_ref": 0.0, "same_thread": SAME_THREAD_POINT,
                    "same_thread_range": (lo, hi)}
    assert src == {"host.same_thread": "assumed"}
    assert "num_workers=0" in warn[0] and "widens the interval" in warn[0]
    assert f"point {SAME_THREAD_POINT:g}" in warn[0]


def test_the_prior_point_adds_nothing_its_range_only_more():
    """The prior's point is the cost measured in isolation (none: docs/measurements.md "The
    main thread's own batches: no heap, cache or same-thread cost"), inside its range: a
    capture with workers priced at 0 workers at the point is the model without the cost
    (factor 1, the step ``p + c`` exactly), and the range's ends cost ``(p + c)(1 + end)``."""
    lo, hi = SAME_THREAD_PRIOR
    assert lo <= SAME_THREAD_POINT <= hi
    host, _, _ = same_thread_from_sidecar(_sidecar(None), 0.08)
    m = _model(0, 30e3, 20e3, 0.0).model_copy(update={"host": HostParams(
        ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=20e3)], **host)})
    assert on_main_thread(m).host.ops[1].dur_us == pytest.approx(20e3 * (1 + SAME_THREAD_POINT))
    point = simulate(m, steps=10, warmup=2).mean_step_us
    assert point == pytest.approx(50e3 * (1 + SAME_THREAD_POINT), rel=1e-9)
    for s in (lo, hi):
        drawn = m.model_copy(update={"host": m.host.model_copy(update={"same_thread": s})})
        assert simulate(drawn, steps=10, warmup=2).mean_step_us == \
            pytest.approx(50e3 * (1 + s), rel=1e-9)


def test_no_sidecar_no_cost():
    assert same_thread_from_sidecar(None, 0.08) == ({}, {}, [])


def test_other_paths_draw_as_without_it():
    """The cost is drawn from a stream of its own: every other path's draws are those of the
    same model without it (a what-if that never reads it keeps main's interval)."""
    from stepsim.scenarios.draws import draw_plan

    m = _model(1, 30e3, 20e3, 0.1).model_copy(deep=True)
    m.host.interference, m.host.interference_range = 0.08, (0.0, 0.16)
    bare = m.model_copy(update={"host": m.host.model_copy(update={
        "same_thread": 0.0, "same_thread_range": None})})
    with_it = draw_plan(m, 16, 3, ops=[parse_set("loader.num_workers=0")])
    without = draw_plan(bare, 16, 3, ops=[parse_set("loader.num_workers=0")])
    assert [s for _, s in with_it] == [s for _, s in without]
    for (f1, _), (f0, _) in zip(with_it, without):
        assert {p: v for p, v in f1.items() if p != "host.same_thread"} == f0
        assert 0.0 <= f1["host.same_thread"] <= 0.2


def _team_sidecar():
    """fresh6's case (2026-12-06), hand-built: a capture at 1 worker on 2 cores with the step
    on torch's 2 intra-op threads, and a probe at 0 workers whose main thread made batches
    1.36x a worker's CPU (its records: 239.6 against 176.5 ms medians)."""
    steps = [StepRecord(t_start_us=i * 1e5, wall_us=9e4, cpu_us=6e4, next_wall_us=1e3,
                        next_cpu_us=5e2) for i in range(14)]
    produce = [ProduceRecord(worker=0, pid=2, seq=i, wall_us=8e4, cpu_us=4e4 * (1 + 0.01 * (i % 3)),
                             t_end_us=i * 1e5 + 9e4) for i in range(14)]
    t0 = 5e6
    pst = [StepRecord(t_start_us=t0 + i * 1.5e5, wall_us=1.4e5, cpu_us=1.4e5, next_wall_us=5.5e4,
                      next_cpu_us=5.4e4) for i in range(8)]
    ppr = [ProduceRecord(worker=-1, pid=1, seq=i, wall_us=5.4e4,
                         cpu_us=5.44e4 * (1 + 0.01 * (i % 3)), t_end_us=t0 + i * 1.5e5 + 5.4e4)
           for i in range(8)]
    return Sidecar(stepsim_sidecar=1, loader={"num_workers": 1}, host_cores=2, steps=steps,
                   produce=produce, torch_num_threads=2,
                   probe=Probe(num_workers=0, steps=pst, produce=ppr))


def test_a_probe_at_zero_with_a_team_step_says_why_not_that_none_is_there():
    """A probe at 0 workers is there, but its steps ran on 2 intra-op threads (not fitted:
    their CPU holds the spinning), so the cost is not fitted: the prior, with the reason, never
    "no probe at num_workers=0" nor a call to capture one; the interference fit, pinned at its
    grid's floor by every resample, says so and does not claim the cost was priced apart."""
    from stepsim.calibration.sidecar_fit import interference_from_sidecar

    side = _team_sidecar()
    host, src, warn = same_thread_from_sidecar(side, 0.08)
    assert src == {"host.same_thread": "assumed"}
    assert host["same_thread"] == SAME_THREAD_POINT
    assert "no probe at num_workers" not in warn[0]
    assert "probe_workers=0" not in warn[0]
    assert "no steps to fit" in warn[0] and "2 intra-op threads" in warn[0]
    assert "its batches took 1.360x" in warn[0]
    ws = interference_from_sidecar(side)[3]
    inter = next(w for w in ws if w.startswith("co-run interference"))
    assert "P10–P90 -0.200–-0.200: pinned at the lowest coefficient tried" in inter
    assert "priced apart" not in inter
