"""A DDP rank's cold resume (calibration.gloo_cold, models.param_comm.cold_share) and how the
straggler and barrier what-ifs price it: closed forms on a 2-rank CPU model."""
from __future__ import annotations

import pytest

from stepsim.calibration.gloo_cold import cold_params
from stepsim.calibration.sidecar_ddp import ColdProbe
from stepsim.models.param_comm import cold_share
from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp, step_us

PTS = [(10_000.0, 0.06), (20_000.0, 0.12), (40_000.0, 0.14)]


def _side(*probes):
    from types import SimpleNamespace

    return SimpleNamespace(ddp=SimpleNamespace(cold_probe=[ColdProbe(**p) for p in probes]))


def _cold(model, pts=PTS):
    return model.model_copy(update={"comm": model.comm.model_copy(update={"cold_resume": pts})})


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
