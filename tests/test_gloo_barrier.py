"""A gloo barrier's release after a wait (calibration.gloo_barrier, models.param_comm
.barrier_release_us) and how the barrier what-if prices it: closed forms on a 2-rank CPU
model."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from stepsim.calibration.gloo_barrier import barrier_params, pool_barrier
from stepsim.calibration.sidecar_ddp import BarrierProbe
from stepsim.models.param_comm import barrier_release_us
from stepsim.scenarios.ddp_whatifs import BARRIER_TASK, add_straggler, insert_barrier
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp, step_us

PTS = [(0.0, 400.0), (40_000.0, 1_600.0)]


def _side(*probes):
    return SimpleNamespace(ddp=SimpleNamespace(barrier_probe=[BarrierProbe(**p) for p in probes]))


def _with(model, pts=PTS):
    return model.model_copy(update={"comm": model.comm.model_copy(
        update={"barrier_exit": pts})})


def test_the_release_is_the_last_ranks_time_in_the_barrier_pooled_over_runs():
    """Per wait, the smallest of a run's ranks' medians (the last to arrive waits only for the
    release), averaged over the runs weighted by their steps; a run with one rank's record
    says nothing; no probe: empty."""
    run1 = [_side({"wait_us": 4e4, "barrier_us": 41_500, "steps": 6},
                  {"wait_us": 0, "barrier_us": 900, "steps": 6}),
            _side({"wait_us": 4e4, "barrier_us": 1_500, "steps": 6},
                  {"wait_us": 0, "barrier_us": 450, "steps": 6})]
    run2 = [_side({"wait_us": 4e4, "barrier_us": 2_100, "steps": 2}),
            _side({"wait_us": 4e4, "barrier_us": 41_900, "steps": 2}), None]
    got = barrier_params([run1, run2, [_side({"wait_us": 0, "barrier_us": 5, "steps": 9})]])
    assert got == [(0.0, 450.0), (4e4, pytest.approx((6 * 1_500 + 2 * 2_100) / 8))]
    assert barrier_params([[_side(), None]]) == []


def test_the_release_is_linear_between_the_waits_and_flat_outside():
    comm = _with(cpu_ddp(2)).comm
    assert barrier_release_us(comm, 0.0) == 400.0
    assert barrier_release_us(comm, 10_000.0) == pytest.approx(700.0)
    assert barrier_release_us(comm, 1e6) == 1_600.0
    plain = cpu_ddp(2).comm.model_copy(update={"latency_us": 123.0})
    assert barrier_release_us(plain, 40_000.0) == 123.0     # no probe: one message exchange
    with pytest.raises(ValidationError):
        type(comm).model_validate({**comm.model_dump(), "barrier_exit": [(4e4, 1.0), (0, 1.0)]})


def test_the_last_rank_leaves_a_barrier_behind_a_straggler_after_the_probes_time():
    """Rank 1 spins S, rank 0 waits S in the barrier and leaves it ``latency_us`` after rank
    1's arrival; rank 1 (the last to enter) R(S) after it, the excess a late resume before its
    backward: step F + S + R(S) + B + C + O (2 cores, no cold probe); without a straggler
    R(0), paid by one rank (a coin); without a probe the barrier is what it was."""
    lat = 300.0
    m = _with(cpu_ddp(cores=2)).model_copy(update={"comm": _with(cpu_ddp(2)).comm.model_copy(
        update={"latency_us": lat})})
    got = insert_barrier(add_straggler(m, 1, "forward", S / 1e3))
    assert S == 40_000.0 and got.task_map()[BARRIER_TASK].dur_us == lat
    ops = got.host.ops
    j = next(k for k, op in enumerate(ops) if op.task == BARRIER_TASK and op.kind == "sync")
    assert ops[j + 1].phase == "backward" and ops[j + 1].resume_lag_us == [1_600.0 - lat]
    assert step_us(got) == pytest.approx(F + S + 1_600.0 + B + C + O)
    assert step_us(insert_barrier(m)) == pytest.approx(F + 400.0 + B + C + O)
    plain = cpu_ddp(cores=2).model_copy(update={"comm": cpu_ddp(2).comm.model_copy(
        update={"latency_us": lat})})
    bare = insert_barrier(add_straggler(plain, 1, "forward", S / 1e3))
    assert all(op.resume_lag_us is None for op in bare.host.ops)
    assert step_us(bare) == pytest.approx(F + S + lat + B + C + O)


def test_calibration_keeps_the_probe_as_measured_and_a_model_without_writes_no_field():
    m = cpu_ddp(2)
    run = [_side({"wait_us": 0, "barrier_us": 500, "steps": 6}),
           _side({"wait_us": 0, "barrier_us": 800, "steps": 6})]
    got = pool_barrier(m, [run])
    assert got.comm.barrier_exit == [(0.0, 500.0)]
    assert got.meta.sources["comm.barrier_exit"] == "measured"
    assert pool_barrier(m, [[None]]) is m
    assert "barrier_exit" not in m.model_dump_json()
    assert "barrier_exit" in got.model_dump_json()


def test_a_straggler_without_a_barrier_is_released_late_by_the_probes_excess():
    """No barrier: rank 0 waits S in the all-reduce, and rank 1 (the straggler, the last to
    enter it) is released R(S) − R(0) = 1200 µs late before its optimizer, the probe's excess
    after S over its release after none: step F + S + B + C + O + 1200 on 2 free cores.
    Without a probe nothing is added; with a barrier after it, the barrier takes the wait and
    the release (F + S + R(S) + B + C + O, as above), and the optimizer has no lag again."""
    m = _with(cpu_ddp(cores=2))
    got = add_straggler(m, 1, "forward", S / 1e3)
    opt = next(op for op in got.host.ops if op.phase == "optimizer")
    assert opt.resume_lag_us == [1_200.0]
    assert step_us(got) == pytest.approx(F + S + B + C + O + 1_200.0)
    assert step_us(add_straggler(cpu_ddp(cores=2), 1, "forward", S / 1e3)) == \
        pytest.approx(F + S + B + C + O)
    both = insert_barrier(got)
    assert next(op for op in both.host.ops if op.phase == "optimizer").resume_lag_us is None
    assert "straggler_release_us" not in both.meta.notes
    lat = m.comm.latency_us
    assert step_us(both) == pytest.approx(F + S + 1_600.0 - lat + lat + B + C + O)
