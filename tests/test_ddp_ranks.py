"""Ranks that interact: closed forms for a CPU DDP step (host-side phases, a gloo collective)
with a straggler, with and without a free core on the shared host."""
from __future__ import annotations

import pytest

from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier
from stepsim.scenarios.op_text import parse_fix
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


def test_straggler_on_a_shared_core_costs_the_time_the_other_rank_cannot_use():
    """Two ranks on one core each run at half speed, so the step is 2(F+B+O) + C. The
    straggler spins S of wall-clock time at the end of rank 1's forward, taking its turn for
    the core; rank 0's backward gets the other half meanwhile (S/2 of it), then blocks in
    the collective and frees the core, so rank 1's backward runs at full speed. The step is
    base + S − min(B, S/2): + S − B when rank 0's backward fits in the spin (S = 40 ms,
    B = 20 ms), + S/2 when it does not (S = 8 ms), never + 2S. (The simulator's round robin
    shares the core in 2 ms quanta: S is a whole number of quantum pairs, so it is exact.)"""
    m = cpu_ddp(cores=1)
    base = 2 * (F + B + O) + C
    assert step_us(m) == pytest.approx(base)
    for s_us in (S, S / 5):
        got = step_us(add_straggler(m, 1, "forward", s_us / 1e3))
        assert got == pytest.approx(base + s_us - min(B, s_us / 2))
    # ranks on separate one-core hosts do not share: the step is one rank's
    apart = m.model_copy(update={"ranks": [r.model_copy(update={"host": ""}) for r in m.ranks]})
    assert step_us(apart) == pytest.approx(F + B + C + O)


def test_a_barrier_takes_away_the_free_core_the_straggler_lent():
    """One core, the straggler spinning S at the end of rank 1's forward: without a barrier
    rank 0's backward runs in the spin's shadow (base + S − min(B, S/2), above); a barrier
    before backward holds rank 0 until rank 1 is done spinning, so both backwards then share
    the core: base + S. The barrier costs the job exactly min(B, S/2), the work rank 0 had
    done on the core the spin left it. With a core each it costs nothing (F + B + C + O + S
    both ways)."""
    for s_us in (S, S / 5):
        one = add_straggler(cpu_ddp(cores=1), 1, "forward", s_us / 1e3)
        base = 2 * (F + B + O) + C
        assert step_us(insert_barrier(one)) == pytest.approx(base + s_us)
        assert step_us(insert_barrier(one)) - step_us(one) == pytest.approx(min(B, s_us / 2))
    two = add_straggler(cpu_ddp(cores=2), 1, "forward", S / 1e3)
    assert step_us(insert_barrier(two)) == pytest.approx(step_us(two)) \
        == pytest.approx(F + B + C + O + S)


def test_straggler_is_wall_clock_time_the_hosts_speed_does_not_scale():
    """On a host twice as fast (cpu_scale 0.5) the measured work takes half its time and the
    collective's transfer and the straggler's S do not: F/2 + B/2 + C + O/2 + S."""
    m = cpu_ddp(cores=2)
    fast = m.model_copy(update={"host": m.host.model_copy(update={"cpu_scale": 0.5})})
    assert step_us(add_straggler(fast, 1, "forward", S / 1e3)) == pytest.approx(
        (F + B + O) / 2 + C + S)
    assert add_straggler(m, 1, "forward", 1).ranks[1].phase_wall_us == {"forward": 1000.0}


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
