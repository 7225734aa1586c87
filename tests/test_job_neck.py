"""A re-measured DDP job's bottleneck (calibration.job_neck): a rank's wall time blocked in
the collectives is not a wait for cores. newuser2's 40 ms straggler job (2026-12-06) measured
``cpu_cores`` on every run; its fast rank blocked 46 ms of a 68 ms step outside next()."""
import pytest

from stepsim.calibration.job_neck import RankWaits, job_bottleneck, rank_waits
from stepsim.calibration.sidecar import StepRecord
from stepsim.scenarios.validate import bottlenecks_agree


def _rows(wall, cpu, run_wait, n=4):
    """``n`` steps of ``wall`` µs outside a 1 ms next(), ``cpu`` µs of the training thread's
    CPU there and ``run_wait`` µs of run-queue wait (None: not recorded)."""
    return [StepRecord(t_start_us=i * 1e5, wall_us=1_000 + wall, cpu_us=500 + cpu,
                       next_wall_us=1_000, next_cpu_us=500, run_wait_us=run_wait)
            for i in range(n)]


def test_rank_waits_split_the_wall_in_closed_form():
    w = rank_waits(_rows(68_000.0, 20_000.0, 1_500.0))
    assert (w.wall_us, w.cpu_us, w.run_wait_us, w.next_us) == (68_000.0, 20_000.0, 1_500.0,
                                                               1_000.0)
    assert w.blocked_us == pytest.approx(68_000.0 - 20_000.0 - 1_500.0)
    assert not w.waited_for_cores()          # 21.5 / 20 ms: under the 1.15 ratio
    assert rank_waits(_rows(30_000.0, 20_000.0, 6_000.0)).waited_for_cores()   # 1.3
    # no run-queue wait recorded: the wall past the CPU could be the collectives'
    assert not rank_waits(_rows(68_000.0, 20_000.0, None)).waited_for_cores()
    assert rank_waits([]) is None


def test_a_straggler_job_names_the_arrival_skew():
    """Fast rank: 20 ms work + 46 ms blocked; straggler: 61 ms work + 5 ms blocked (it
    arrived last, waited for the transfer only): skew 41 ms > work 21.5 ms > comm 5 ms."""
    fast = RankWaits(68_000.0, 20_000.0, 1_500.0)
    slow = RankWaits(68_000.0, 59_000.0, 3_600.0)
    assert slow.blocked_us == pytest.approx(5_400.0)
    assert job_bottleneck([fast, slow]) == "arrival_skew"
    assert bottlenecks_agree("arrival_skew", "arrival_skew")


def test_exposed_communication_and_plain_work():
    """Both ranks blocked alike: the lesser is the transfer; named ``comm`` only where it is
    the largest part of the step, else the ranks' own bottleneck stands (None)."""
    a, b = RankWaits(30_000.0, 10_000.0, 0.0), RankWaits(30_000.0, 11_000.0, 0.0)
    assert job_bottleneck([a, b]) == "comm"              # 19 ms of transfer, 1 ms skew
    c, d = RankWaits(20_000.0, 15_000.0, 1_000.0), RankWaits(20_000.0, 15_500.0, 500.0)
    assert job_bottleneck([c, d]) is None                # 16 ms of work, 4 ms comm
    assert job_bottleneck([c, None]) is None and job_bottleneck([c]) is None
    # an input-bound job: 25 ms in next() beside 19 ms of transfer is the input's
    e, f = RankWaits(30_000.0, 10_000.0, 0.0, 25_000.0), RankWaits(30_000.0, 11_000.0, 0.0)
    assert job_bottleneck([e, f]) is None


def test_validate_finds_a_ddp_demo_ranks_sidecar(tmp_path):
    """The DDP demo's folder holds rank<N>.json beside rank<N>.sidecar.json (calibrate reads
    them so); the harness's folder sidecar.json comes first."""
    from stepsim.calibration.sidecar import sidecar_beside

    (tmp_path / "rank1.json").write_text("[]")
    assert sidecar_beside(tmp_path / "rank1.json") is None
    (tmp_path / "rank1.sidecar.json").write_text("{}")
    assert sidecar_beside(tmp_path / "rank1.json") == tmp_path / "rank1.sidecar.json"
    assert sidecar_beside(tmp_path / "rank0.json") is None
    (tmp_path / "sidecar.json").write_text("{}")
    assert sidecar_beside(tmp_path / "rank1.json") == tmp_path / "sidecar.json"
