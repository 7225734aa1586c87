"""The DDP demo's two levels (demo.ddp_level, issue 12, h-ddp23): the host's CPU level from the
timed runs' training-thread CPU, the transfer level (``comm.transfer_scale``) from what is left
of their step. Closed forms of the transfer factor on a collective's duration, and a model
whose two levels are known: the solve recovers both from what the demo measures."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepsim.models.params import load_model

DEMO_MODEL = Path(__file__).parent / "data" / "ddp_demo_model.json"


def _model():
    return load_model(DEMO_MODEL)


def _set(model, cpu_scale=None, transfer_scale=None):
    host, comm = model.host, model.comm
    if cpu_scale is not None:
        host = host.model_copy(update={"cpu_scale": cpu_scale})
    if transfer_scale is not None:
        comm = comm.model_copy(update={"transfer_scale": transfer_scale})
    return model.model_copy(update={"host": host, "comm": comm})


def _cpu_us(comm, nbytes):
    return comm.host_cpu_us + comm.host_cpu_us_per_mb * nbytes / 2 ** 20


def test_the_transfer_factor_scales_the_per_byte_time_that_is_not_cpu_work():
    """Closed form: each gloo all-reduce of ``b`` bytes lasts ``d + (k − 1) × (s − pm) × b``,
    ``d`` its calibrated duration (the line's, ``comm_time_us``), ``s`` the line's µs per
    byte (``2(n−1)/n`` over ``bus_gbps``: for 2 ranks 1/bus) and ``pm`` the CPU work per
    byte (``host_cpu_us_per_mb`` / 2^20); its latency and CPU work stay. Other tasks keep
    theirs; at k = 1 the durations are the model's own, bit for bit."""
    from stepsim.models.ddp import comm_time_us
    from stepsim.models.plans import task_durations, transfer_per_byte_us

    m = _model()
    c = m.comm
    assert c.world_size == 2 and c.bus_gbps is not None
    per = 1 / (c.bus_gbps * 1e3) - c.host_cpu_us_per_mb / 2 ** 20     # µs per byte
    assert transfer_per_byte_us(c) == pytest.approx(per, rel=1e-12) and per > 0
    base = task_durations(m, 0)
    assert task_durations(_set(m, transfer_scale=1.0), 0) == base
    got = task_durations(_set(m, transfer_scale=1.7), 0)
    colls = [t for t in m.device.streams[c.comm_stream] if t.kind == "collective"]
    assert colls
    for t in colls:
        nbytes = min(t.bytes, c.line_bytes) if c.line_bytes else t.bytes
        assert base[t.id] == pytest.approx(comm_time_us(c, t.bytes), rel=1e-12)
        assert got[t.id] == pytest.approx(base[t.id] + 0.7 * per * nbytes, rel=1e-12)
    ids = {t.id for t in colls}
    assert {k: v for k, v in got.items() if k not in ids} == {
        k: v for k, v in base.items() if k not in ids}


def test_rebuilt_buckets_get_the_same_transfer_factor():
    """A ``bucket_cap_mb`` what-if rebuilds the all-reduces from the line: each new one gets
    the same factor on its per-byte part, so the 8 buckets of 1 MiB together get what the
    defaults' 1 + 7 MiB got (the same bytes), whatever is hidden behind backward."""
    from stepsim.models.plans import task_durations, transfer_per_byte_us
    from stepsim.scenarios.op_text import parse_set
    from stepsim.scenarios.predict import predict

    def colls_us(model, k):
        p = predict(_set(model, transfer_scale=k), [parse_set("comm.bucket_cap_mb=1")], steps=4,
                    warmup=1, seed=0, intervals=False)
        new = p.model
        ts = [t for t in new.device.streams[new.comm.comm_stream] if t.kind == "collective"]
        d = task_durations(new, 0)
        return new, ts, sum(d[t.id] for t in ts)

    new, ts, at1 = colls_us(_model(), 1.0)
    _, _, at06 = colls_us(_model(), 0.6)
    assert len(ts) > 2
    c = new.comm
    moved = sum(min(t.bytes, c.line_bytes) if c.line_bytes else t.bytes for t in ts)
    assert at06 - at1 == pytest.approx(-0.4 * transfer_per_byte_us(c) * moved, rel=1e-9)


def test_a_model_at_its_default_writes_no_transfer_factor():
    m = _model()
    assert "transfer_scale" not in m.model_dump()["comm"]
    assert _set(m, transfer_scale=1.3).model_dump()["comm"]["transfer_scale"] == 1.3


def test_the_timed_runs_cpu_a_rank_step():
    """Closed form: per rank the mean difference of the thread CPU at consecutive steps'
    starts (``phases[i][5]``), then the mean over ranks and runs; a rank of one step, or a
    CPU that does not advance, gives none."""
    from stepsim.demo.ddp_level import thread_cpu_step_us

    def rank(cpu):
        return {"phases": [[0.0] * 5 + [c] + [0.0] * 5 for c in cpu]}

    runs = [[rank([0, 10, 20]), rank([5, 25, 45])], [rank([0, 30, 60]), rank([0, 40])]]
    assert thread_cpu_step_us(runs) == pytest.approx((10 + 20 + 30 + 40) / 4)
    assert thread_cpu_step_us([[rank([0])]]) is None
    assert thread_cpu_step_us([[rank([3, 3])]]) is None


@pytest.mark.parametrize("cpu_true,k_true", [(1.15, 1.6), (0.9, 0.7)])
def test_the_solve_recovers_a_known_cpu_level_and_transfer_level(cpu_true, k_true):
    """A model whose two levels are known (``cpu_scale`` ×1.15 or ×0.9, ``transfer_scale``
    1.6 or 0.7): the CPU its training threads do a rank-step and its point are what the demo
    measures (the timed runs' thread CPU and their mean step). Solved from the model at its
    own levels, the CPU level comes back exactly (a closed form) and the transfer level within
    5 %, with the point on the runs' mean to the solver's tolerance; the point alone, solved
    over ``cpu_scale`` (h-offset19), would have put the transfer's share on the CPU."""
    from stepsim.demo.ddp_level import (TOLERANCE, _point_us, model_cpu_step_us,
                                        on_timed_level)

    m = _model()
    c0 = m.host.cpu_scale
    truth = _set(m, cpu_scale=c0 * cpu_true, transfer_scale=k_true)
    cpu_step = truth.host.cpu_scale * model_cpu_step_us(truth)
    step = _point_us(truth, 0)
    runs = [np.full(20, step * f) for f in (0.99, 1.0, 1.01)]
    out, got = on_timed_level(m, runs, 0, cpu_step)
    assert got is not None and out.host.centre_runs == 3
    assert out.host.cpu_scale / c0 == pytest.approx(cpu_true, rel=1e-9)
    assert out.comm.transfer_scale == pytest.approx(k_true, rel=0.05)
    assert got["point_us"] == pytest.approx(step, rel=TOLERANCE)
    assert out.meta.sources["host.cpu_scale"] == "measured"
    assert out.meta.sources["comm.transfer_scale"] == "inferred"
    assert "CPU and transfer apart" in out.meta.warnings[-1]


def test_the_models_cpu_is_what_its_simulated_training_threads_are_busy():
    """The CPU level's denominator against the simulator: the host threads' busy spans a
    rank-step are ``cpu_scale`` × :func:`model_cpu_step_us` within 3 % at three levels (the
    spans also hold what a gloo thread's preemption adds to an op's wall: 1.7 % measured on
    the demo's model), and they move with ``cpu_scale``, never with ``transfer_scale``."""
    from stepsim.demo.ddp_level import host_busy_step_us, model_cpu_step_us

    m = _model()
    per = model_cpu_step_us(m)
    for f in (0.9, 1.0, 1.2):
        c = m.host.cpu_scale * f
        busy = host_busy_step_us(_set(m, cpu_scale=c), 0)
        assert busy == pytest.approx(c * per, rel=0.03)
    assert host_busy_step_us(_set(m, transfer_scale=2.0), 0) == pytest.approx(
        host_busy_step_us(m, 0), rel=1e-9)


def test_without_the_runs_cpu_the_cpu_level_is_kept_and_the_transfer_takes_the_rest():
    """Timed runs that recorded no CPU: ``cpu_scale`` stays the profiled runs' and the point
    reaches the runs' mean through the transfer level alone."""
    from stepsim.demo.ddp_level import TOLERANCE, _point_us, on_timed_level

    m = _model()
    p0 = _point_us(m, 0)
    out, got = on_timed_level(m, [np.full(20, 1.04 * p0), np.full(20, 1.06 * p0)], 0)
    assert got is not None and out.host.cpu_scale == m.host.cpu_scale
    assert out.comm.transfer_scale > 1
    assert got["point_us"] == pytest.approx(1.05 * p0, rel=TOLERANCE)
    assert "timed runs recorded no CPU" in out.meta.warnings[-1]
