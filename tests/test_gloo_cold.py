"""A DDP rank's cold resume (calibration.gloo_cold, models.param_comm.cold_share) and how the
straggler and barrier what-ifs price it: closed forms on a 2-rank CPU model."""
from __future__ import annotations

import pytest

from stepsim.calibration.gloo_cold import cold_opt_params, cold_params
from stepsim.calibration.sidecar_ddp import ColdProbe
from stepsim.models.param_comm import cold_extra_opt_us, cold_share
from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp, step_us

PTS = [(10_000.0, 0.06), (20_000.0, 0.12), (40_000.0, 0.14)]
OPT = [(10_000.0, 100.0), (40_000.0, 300.0)]     # µs: 0.1 and 0.3 of O


def _side(*probes):
    from types import SimpleNamespace

    return SimpleNamespace(ddp=SimpleNamespace(cold_probe=[ColdProbe(**p) for p in probes]))


def _cold(model, pts=PTS, opt=()):
    return model.model_copy(update={"comm": model.comm.model_copy(
        update={"cold_resume": pts, "cold_resume_opt": list(opt)})})


def test_the_share_pools_every_ranks_steps_per_pause():
    """Σ cold / Σ hot − 1 over the records of one pause (weighted by their steps), pauses in
    increasing order; a share below 0 is taken as 0 and said; sidecars without a probe add
    nothing."""
    a = _side({"pause_us": 4e4, "hot_cpu_us": 6000, "cold_cpu_us": 7000, "steps": 4},
              {"pause_us": 1e4, "hot_cpu_us": 6000, "cold_cpu_us": 5900, "steps": 4})
    b = _side({"pause_us": 4e4, "hot_cpu_us": 5000, "cold_cpu_us": 5500, "steps": 2})
    said: list[str] = []
    got = cold_params([a, None, b, _side()], said)
    assert got == [(1e4, 0.0), (4e4, pytest.approx((4 * 7000 + 2 * 5500) / (4 * 6000 + 2 * 5000)
                                                   - 1))]
    assert len(said) == 1 and "10 ms" in said[0]
    assert cold_params([_side(), None]) == []
    zero = _side({"pause_us": 4e4, "hot_cpu_us": 0.0, "cold_cpu_us": 10.0, "steps": 1})
    assert cold_params([zero]) == []          # a clock that read no CPU: no share


def test_the_share_is_linear_between_the_pauses_and_saturates_past_the_last():
    comm = _cold(cpu_ddp(2)).comm
    assert cold_share(comm, 0.0) == 0.0 and cold_share(comm, 5_000.0) == pytest.approx(0.03)
    assert cold_share(comm, 15_000.0) == pytest.approx(0.09)
    assert cold_share(comm, 40_000.0) == pytest.approx(0.14)
    assert cold_share(comm, 1e6) == pytest.approx(0.14)
    assert cold_share(cpu_ddp(2).comm, 40_000.0) == 0.0      # no probe: none


def test_the_straggler_resumes_cold_with_a_free_core():
    """2 cores, 2 ranks: the straggler spins S, then its backward costs B(1 + share(S)); the
    other rank waits in the collective and is off the critical path. Step F + S + B(1 +
    share) + C + O."""
    m = _cold(cpu_ddp(cores=2))
    got = add_straggler(m, 1, "forward", S / 1e3)
    assert got.ranks[1].phase_extra_us == {"backward": pytest.approx(0.14 * B)}
    assert got.ranks[0].phase_extra_us == {}
    assert step_us(got) == pytest.approx(F + S + B * 1.14 + C + O)
    # without a probe the what-if is what it was: no extra CPU
    plain = add_straggler(cpu_ddp(cores=2), 1, "forward", S / 1e3)
    assert plain.ranks[1].phase_extra_us == {}
    assert step_us(plain) == pytest.approx(F + S + B + C + O)


def test_behind_a_barrier_the_waiting_rank_resumes_cold_too():
    """The barrier before backward holds rank 0 for the straggler's S: both backwards then
    cost B(1 + share(S)), on a core each. Either order of the two what-ifs gives the same
    model."""
    m = _cold(cpu_ddp(cores=2))
    one = insert_barrier(add_straggler(m, 1, "forward", S / 1e3))
    two = add_straggler(insert_barrier(m), 1, "forward", S / 1e3)
    for got in (one, two):
        assert [r.phase_extra_us for r in got.ranks] == [{"backward": pytest.approx(0.14 * B)}] * 2
    assert step_us(one) == pytest.approx(step_us(two))
    assert step_us(one) == pytest.approx(F + S + B * 1.14 + C + O)
    assert insert_barrier(m).ranks == m.ranks        # no straggler: nobody waits


def test_a_model_without_a_probe_writes_no_field():
    """Every model calibrated before the probe (and every NCCL one) writes the bytes it
    wrote."""
    m = cpu_ddp(2)
    assert "cold_resume" not in m.model_dump_json()
    assert "cold_resume" in _cold(m).model_dump_json()
    assert "cold_resume_opt" not in _cold(m).model_dump_json()
    assert "cold_resume_opt" in _cold(m, opt=OPT).model_dump_json()


def test_the_what_ifs_say_the_cpu_they_added_for_cold_resumes():
    """Straggler then barrier: rank 1's backward +0.14 B after its S of spin, rank 0's +0.14 B
    after S held in the barrier (scenarios.ddp_whatifs.cold_resume_added, kept in meta.notes);
    the JSON of a saved what-if keeps them; no probe: nothing said."""
    from stepsim.scenarios.ddp_whatifs import ColdResume, cold_resume_added

    m = _cold(cpu_ddp(cores=2))
    assert cold_resume_added(m) == [] and cold_resume_added(None) == []
    got = insert_barrier(add_straggler(m, 1, "forward", S / 1e3))
    want = [ColdResume(r, "backward", pytest.approx(0.14 * B), S, pytest.approx(0.14))
            for r in (0, 1)]
    assert cold_resume_added(got) == want
    assert cold_resume_added(type(got).model_validate_json(got.model_dump_json())) == want
    assert cold_resume_added(add_straggler(m, 1, "forward", S / 1e3)) == want[1:]
    assert cold_resume_added(insert_barrier(add_straggler(cpu_ddp(cores=2), 1, "forward",
                                                          S / 1e3))) == []


def test_whatif_prints_the_cold_resume_cpu(tmp_path):
    """``stepsim whatif`` prints each rank's added CPU (0.14 × 20 ms = 2.80 ms after 40 ms)."""
    import re

    from stepsim.models.params import save_model
    from tests.test_quirks import cli

    save_model(_cold(cpu_ddp(cores=2)), tmp_path / "m.json")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--fix",
                       f"straggler:rank=1,phase=forward,ms={S / 1e3:g}", "--draws", "0",
                       "--steps", "10")
    assert rc == 0, err
    flat = re.sub(r"\s+", " ", out)
    assert ("cold resume (comm.cold_resume, the capture's probe): rank 1's backward +2.80 ms "
            "CPU a step (14.0% of its CPU there, after 40.0 ms off its data)") in flat
    assert "rank 0's backward" not in flat
    save_model(cpu_ddp(cores=2), tmp_path / "plain.json")
    rc, err, out = cli("whatif", tmp_path / "plain.json", "--fix",
                       f"straggler:rank=1,phase=forward,ms={S / 1e3:g}", "--draws", "0",
                       "--steps", "10")
    assert rc == 0, err
    assert "cold resume" not in out


def test_the_optimizer_share_pools_the_same_probe_steps():
    """(Σ cold − Σ hot) / Σ steps of the optimizer's CPU per pause (µs); a record written
    before the probe recorded the optimizer adds to the backward's share only."""
    a = _side({"pause_us": 4e4, "hot_cpu_us": 6000, "cold_cpu_us": 7000, "steps": 4,
               "hot_opt_cpu_us": 1500, "cold_opt_cpu_us": 1950},
              {"pause_us": 1e4, "hot_cpu_us": 6000, "cold_cpu_us": 6000, "steps": 4})
    b = _side({"pause_us": 4e4, "hot_cpu_us": 5000, "cold_cpu_us": 5500, "steps": 2,
               "hot_opt_cpu_us": 1000, "cold_opt_cpu_us": 1100})
    assert cold_opt_params([a, None, b]) == [(4e4, pytest.approx(
        (4 * 1950 + 2 * 1100 - 4 * 1500 - 2 * 1000) / 6))]
    assert [p for p, _ in cold_params([a, b])] == [1e4, 4e4]
    comm = _cold(cpu_ddp(2), opt=OPT).comm
    assert cold_extra_opt_us(comm, 25_000.0) == pytest.approx(200.0)
    assert cold_share(comm, 25_000.0) == pytest.approx(0.125)


def test_the_probe_records_the_optimizer_in_the_same_steps():
    """demo.ddp_job.cold_probe: per pause, the medians of the backward's (row[8] − row[7])
    and the optimizer's (row[10] − row[9]) thread CPU with and without the pause."""
    from stepsim.demo.ddp_job import cold_probe

    seen = []

    def step(pause_ms):
        seen.append(pause_ms)
        k = len(seen)
        return [0.0] * 7 + [0.0, 1000.0 + 10 * pause_ms + k % 2, 0.0, 500.0 + pause_ms]

    got = cold_probe(step, pauses_ms=(10.0, 40.0), rounds=3)
    assert seen == [0.0, 10.0] * 3 + [0.0, 40.0] * 3
    assert [(g["hot_cpu_us"], g["cold_cpu_us"], g["hot_opt_cpu_us"], g["cold_opt_cpu_us"])
            for g in got] == [(1001.0, 1100.0, 500.0, 510.0), (1001.0, 1400.0, 500.0, 540.0)]
    assert [ColdProbe(**g).steps for g in got] == [3, 3]


def test_every_rank_s_optimizer_resumes_cold_and_the_waiter_s_is_off_the_critical_path():
    """2 cores: the straggler's backward costs B(1 + 0.14) and its optimizer O + 0.3 O (the
    probe's 300 µs) after its spin of S; rank 0 waits S in the collective, then its optimizer
    costs O + 0.3 O too.
    Step F + S + B·1.14 + C + O·1.3: exactly S plus the cold extras over the plain step; the
    waiter's extra alone adds nothing (its optimizer ends before the straggler's next
    collective)."""
    m = _cold(cpu_ddp(cores=2), opt=OPT)
    got = add_straggler(m, 1, "forward", S / 1e3)
    assert got.ranks[0].phase_extra_us == {"optimizer": pytest.approx(0.3 * O)}
    assert got.ranks[1].phase_extra_us == {"backward": pytest.approx(0.14 * B),
                                           "optimizer": pytest.approx(0.3 * O)}
    assert step_us(got) == pytest.approx(F + S + B * 1.14 + C + O * 1.3)
    assert step_us(got) - step_us(m) == pytest.approx(S + 0.14 * B + 0.3 * O)
    waiter_warm = got.model_copy(update={"ranks": [got.ranks[0].model_copy(
        update={"phase_extra_us": {}}), got.ranks[1]]})
    assert step_us(waiter_warm) == pytest.approx(step_us(got))
    # 10 ms: both shares read off the probe's first pause
    ten = add_straggler(m, 1, "forward", 10.0)
    assert ten.ranks[1].phase_extra_us == {"backward": pytest.approx(0.06 * B),
                                           "optimizer": pytest.approx(0.1 * O)}


def test_behind_a_barrier_each_rank_s_optimizer_is_priced_once_in_either_order():
    from stepsim.scenarios.ddp_whatifs import cold_resume_added

    m = _cold(cpu_ddp(cores=2), opt=OPT)
    one = insert_barrier(add_straggler(m, 1, "forward", S / 1e3))
    two = add_straggler(insert_barrier(m), 1, "forward", S / 1e3)
    want = {"backward": pytest.approx(0.14 * B), "optimizer": pytest.approx(0.3 * O)}
    for got in (one, two):
        assert [r.phase_extra_us for r in got.ranks] == [want, want]
        assert sorted((c.rank, c.phase) for c in cold_resume_added(got)) == [
            (0, "backward"), (0, "optimizer"), (1, "backward"), (1, "optimizer")]
    assert step_us(one) == pytest.approx(F + S + B * 1.14 + C + O * 1.3)


def test_a_straggler_in_backward_prices_the_optimizer_after_it_with_its_own_share():
    """The phase after backward's spin is the optimizer: the optimizer's extra (300 µs), once a
    rank; a straggler in the optimizer leaves its own optimizer warm (the spin follows it)."""
    m = _cold(cpu_ddp(cores=2), opt=OPT)
    got = add_straggler(m, 1, "backward", S / 1e3)
    assert [r.phase_extra_us for r in got.ranks] == [{"optimizer": pytest.approx(0.3 * O)}] * 2
    late = add_straggler(m, 1, "optimizer", S / 1e3)
    assert late.ranks[1].phase_extra_us == {"forward": pytest.approx(0.14 * F)}
    assert late.ranks[0].phase_extra_us == {"optimizer": pytest.approx(0.3 * O)}
    # a probe without the optimizer (every sidecar before it): the backward's extra only
    assert add_straggler(_cold(cpu_ddp(cores=2)), 1, "forward", S / 1e3).ranks[0] \
        .phase_extra_us == {}
