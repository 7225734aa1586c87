"""Ranks that interact: closed forms for a CPU DDP step (host-side phases, a gloo collective)
with a straggler, with and without a free core on the shared host."""
from __future__ import annotations

import pytest

from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier
from stepsim.scenarios.transforms import parse_fix
from stepsim.simcore.errors import ModelError

F, B, C, O, S = 10_000.0, 20_000.0, 5_000.0, 1_000.0, 40_000.0
"""forward, backward, collective transfer, optimizer, straggler (µs)."""


def cpu_ddp(cores: int, host: str = "h") -> StepModel:
    return StepModel.model_validate({
        "loader": {"num_workers": 0, "host_cores": cores},
        "host": {"ops": [
            {"kind": "cpu", "name": "forward", "dur_us": F, "phase": "forward"},
            {"kind": "cpu", "name": "backward", "dur_us": B, "phase": "backward"},
            {"kind": "launch", "task": "ar", "phase": "backward"},
            {"kind": "sync", "task": "ar", "phase": "backward"},
            {"kind": "cpu", "name": "optimizer", "dur_us": O, "phase": "optimizer"}]},
        "device": {"streams": {"gloo": [
            {"id": "ar", "stream": "gloo", "kind": "collective", "phase": "backward",
             "category": "communication", "dur_us": C, "bytes": 4_000_000}]}},
        "comm": {"world_size": 2, "comm_stream": "gloo"},
        "ranks": [{"rank": 0, "host": host}, {"rank": 1, "host": host}]})


def step_us(model: StepModel) -> float:
    return simulate(model, steps=8, warmup=3).mean_step_us


def test_straggler_with_a_free_core_adds_its_time():
    m = cpu_ddp(cores=2)
    assert step_us(m) == pytest.approx(F + B + C + O)
    assert step_us(add_straggler(m, 1, "forward", S / 1e3)) == pytest.approx(F + B + C + O + S)


def test_straggler_on_a_shared_core_adds_its_time_once():
    """Two ranks on one core each run at half speed, so the step is 2(F+B+O) + C; with the
    straggler, rank 0 blocks in the collective and frees the core, so rank 1's extra work
    runs at full speed: + S, not + 2S."""
    m = cpu_ddp(cores=1)
    base = 2 * (F + B + O) + C
    assert step_us(m) == pytest.approx(base)
    assert step_us(add_straggler(m, 1, "forward", S / 1e3)) == pytest.approx(base + S)
    # ranks on separate one-core hosts do not share: the step is one rank's
    apart = m.model_copy(update={"ranks": [r.model_copy(update={"host": ""}) for r in m.ranks]})
    assert step_us(apart) == pytest.approx(F + B + C + O)


def test_barrier_splits_arrival_skew_from_transfer():
    m = parse_fix("barrier").apply(parse_fix("straggler:rank=1,phase=forward,ms=40").apply(
        cpu_ddp(cores=2)))
    res = simulate(m, steps=4, warmup=2)
    skew = {r.rank: r.start_us - r.ready_us - r.gap_us for r in res.runs
            if r.task == "ddp.barrier" and r.step == 3}
    assert skew[0] == pytest.approx(S) and skew[1] == pytest.approx(0.0)
    ar = [r for r in res.runs if r.task == "ar" and r.step == 3]
    assert all(r.start_us - r.ready_us == pytest.approx(0.0) for r in ar)   # only transfer
    assert res.mean_step_us == pytest.approx(F + B + C + O + S)


def test_ddp_whatifs_that_cannot_apply_say_why():
    m = cpu_ddp(cores=2)
    with pytest.raises(ModelError, match="no rank 7"):
        add_straggler(m, 7, "forward", 1)
    with pytest.raises(ModelError, match="no work in phase 'data'"):
        add_straggler(m, 1, "data", 1)
    one = m.model_copy(update={"ranks": m.ranks[:1]})
    for op in ("straggler:rank=0,ms=1", "barrier"):
        with pytest.raises(ModelError, match="one rank"):
            parse_fix(op).apply(one)
    with pytest.raises(ModelError, match="already has one"):
        insert_barrier(insert_barrier(m))
    with pytest.raises(ModelError, match="lists no DDP gradients"):
        parse_fix("bucket_cap_mb:mb=5").apply(m)


def test_a_rank_delayed_by_s_shows_s_of_arrival_skew_on_the_other():
    """Closed form: rank 1 starts every step S late, so rank 0 enters the collective S before
    the last rank and waits S in it (arrival skew); the transfer is C on both ranks."""
    from stepsim.models.metrics import summarize
    from stepsim.models.skew import rank_comm

    m = cpu_ddp(cores=2)
    m = m.model_copy(update={"ranks": [m.ranks[0], m.ranks[1].model_copy(
        update={"delay_us": S})]})
    res = simulate(m, steps=6, warmup=2)
    split = {(c.rank, c.group): c for c in rank_comm(res)}
    assert split[(0, "collective")].skew_us == pytest.approx(S)
    assert split[(1, "collective")].skew_us == pytest.approx(0.0)
    for r in (0, 1):
        c = split[(r, "collective")]
        assert c.count == 1 and c.transfer_us == pytest.approx(C)
        assert c.in_us == pytest.approx(c.skew_us + c.transfer_us)
    assert summarize(res).rank_comm == rank_comm(res)
    # with a barrier before backward, the wait moves into the barrier: all skew, no transfer
    split = {(c.rank, c.group): c for c in rank_comm(simulate(insert_barrier(m), 6, 2))}
    assert split[(0, "barrier")].skew_us == pytest.approx(S)
    assert split[(0, "barrier")].transfer_us == pytest.approx(0.0)
    assert split[(0, "collective")].skew_us == pytest.approx(0.0)
    # one rank: nothing to split
    assert rank_comm(simulate(m.model_copy(update={"ranks": m.ranks[:1]}), 2, 1)) == []
