"""Bad input on session 8's new readings (break18): the team stall's re-inverted work
(``host.team_stall_share``, :mod:`models.team_inversion`), a worker's process CPU against its
thread's (:func:`calibration.sidecar_fit.fit_produce`, threads per worker) and the time bound
of a given step count (:func:`models.sim_work.step_cost_us`) where a DDP model's collectives
wake up many times. A record that cannot be right is dropped and counted; a model is refused
(one line, exit 2, the file named and unchanged) only where it cannot be simulated."""
import hashlib
import json
from pathlib import Path

import pytest

from stepsim.calibration.sidecar import ProduceRecord, load_sidecar
from stepsim.calibration.sidecar_fit import fit_produce
from stepsim.models.engine import MAX_WAKE_PIECES
from stepsim.models.params import MAX_THREADS, StepModel, load_model
from stepsim.models.sim_work import (MAX_RUN_WORK, PIECE_US, PROCESS_PIECE_US, WAKE_PIECE_US,
                                     collective_wakes, step_cost_us, time_problem)
from stepsim.models.team_inversion import reinverted
from stepsim.simcore.errors import ModelError
from tests.test_quirks import cli, one_line_error

DDP = Path(__file__).parent / "data" / "ddp_demo_model.json"


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _team(share, gamma, rng, threads=2) -> dict:
    return {"loader": {"num_workers": 1, "produce": {"mean_us": 10_000.0}, "host_cores": 2},
            "host": {"team_stall": gamma, "team_stall_range": rng, "team_stall_share": share,
                     "ops": [{"kind": "next_batch"},
                             {"kind": "cpu", "dur_us": 30_000.0, "threads": threads,
                              "capture_threads": threads, "parallel_fraction": 1.0}]}}


@pytest.mark.parametrize("share,gamma,rng,threads", [(1e-300, 20.0, [0.0, 20.0], 2),
                                                     (1e-6, 20.0, [0.3, 3.6], 64),
                                                     (0.01, 3.6, [0.3, 3.6], 64)])
@pytest.mark.parametrize("verb", [["simulate"], ["whatif", "--set", "loader.num_workers=2"]])
def test_a_share_whose_reinverted_work_passes_any_duration_is_one_line(tmp_path, share, gamma,
                                                                       rng, threads, verb):
    """``share^((γ' − γ)(T − 1))`` overflowed a double in ``whatif``'s first draw (an
    OverflowError traceback, after 5 s of baseline on 64 threads), or left a draw past any
    duration after the baseline; ``simulate`` ran it. Now the file is refused as it loads."""
    p = tmp_path / "m.json"
    p.write_text(json.dumps(_team(share, gamma, rng, threads)))
    before = _md5(p)
    rc, err, _ = cli(*verb[:1], p, *verb[1:], "--steps", "5", "--warmup", "2", "--draws", "4",
                     "--jobs", "1") if verb[0] == "whatif" else cli("simulate", p, "--steps", "5")
    one_line_error(rc, err, "m.json", "team_stall_share", "cannot be right", "ops[1]")
    assert _md5(p) == before


def test_a_share_that_the_range_keeps_bounded_loads():
    m = StepModel.model_validate(_team(0.5, 1.0, [0.3, 3.6], 8))
    assert reinverted(m, 3.6).host.ops[1].dur_us == pytest.approx(30_000.0 * 0.5 ** (2.6 * 7))


def test_reinverting_past_any_duration_is_a_model_error():
    """A model without the range (nothing drawn) loads; re-inverting it where the power
    passes a double raises the one-line ModelError, not an OverflowError."""
    m = StepModel.model_validate(_team(1e-300, 20.0, None))
    with pytest.raises(ModelError, match=r"team_stall_share 1e-300\) .* past any duration"):
        reinverted(m, 0.0)
    assert reinverted(m, 20.0).host.ops[1].dur_us == 30_000.0


def _recs(wall_us, cpu_us, proc_us, n=6):
    return [ProduceRecord(worker=0, pid=7, seq=i + 1, wall_us=wall_us * (1 + 0.01 * i),
                          cpu_us=cpu_us, proc_cpu_us=proc_us) for i in range(n)]


@pytest.mark.parametrize("cpu,proc", [(5e-324, 1000.0), (1.0, 1000.0), (0.5, 1900.0)])
def test_a_thread_cpu_inside_the_clocks_slack_counts_no_threads(cpu, proc):
    """Process CPU over a thread CPU of 5e-324 µs was inf (``int(round(inf))``, an
    OverflowError traceback in calibrate); over 1 µs it made a worker of 1,000 threads
    (more than a loader holds, the model refused). A thread CPU within the clocks' slack
    (1 ms) gives no ratio: the wall's ratio counts, as before stall18."""
    spec, tpw, _ = fit_produce(_recs(1000.0, cpu, proc), 1, 2, 2)
    assert tpw == int(round(proc / 1000.0)) if proc > 1300 else tpw == 1
    assert 1 <= tpw <= MAX_THREADS


def _sidecar(tmp_path, produce) -> Path:
    steps = [{"wall_us": 100_000.0, "cpu_us": 50_000.0, "next_wall_us": 1_000.0,
              "next_cpu_us": 500.0} for _ in range(8)]
    p = tmp_path / "side.json"
    p.write_text(json.dumps({"stepsim_sidecar": 1, "host_cores": 2,
                             "loader": {"num_workers": 1}, "produce": produce, "steps": steps}))
    return p


@pytest.mark.parametrize("proc", [0.0, 1_000.0, 40_000.0])
def test_a_worker_process_cpu_below_its_threads_is_dropped_and_counted(tmp_path, proc):
    """A worker's process CPU (all its threads) below its producing thread's cannot be right:
    the batch's work read as the process's (0 µs for proc 0, a batch that cost nothing). Now
    dropped and counted in one warning; the good records kept; the file unchanged."""
    good = {"worker": 0, "pid": 7, "seq": 1, "wall_us": 60_000.0, "cpu_us": 50_000.0,
            "proc_cpu_us": 52_000.0}
    bad = {**good, "seq": 2, "proc_cpu_us": proc}
    p = _sidecar(tmp_path, [good, bad, {**good, "seq": 3}])
    before = _md5(p)
    side = load_sidecar(p)
    assert [r.seq for r in side.produce] == [1, 3]
    said = [w for w in side.dropped if "below its producing thread's" in w]
    assert len(said) == 1 and "dropped 1 of 3" in said[0] and "produce.1" in said[0], side.dropped
    assert _md5(p) == before


def test_a_process_cpu_a_clock_read_below_its_threads_is_kept(tmp_path):
    good = {"worker": 0, "pid": 7, "seq": 1, "wall_us": 60_000.0, "cpu_us": 50_000.0,
            "proc_cpu_us": 49_800.0}    # the thread's clock read after the process's
    assert len(load_sidecar(_sidecar(tmp_path, [good])).produce) == 1


def _wakes(**comm) -> StepModel:
    d = json.loads(DDP.read_text())
    d["comm"].update(comm)
    return StepModel.model_validate(d)


def test_many_wake_ups_count_in_the_time_bound():
    """``comm.wakeups`` 1e6: each of the DDP demo's 4 collectives a step runs 256 wake-up
    pieces, 7.4-8.7 ms a step to simulate against the 0.96 ms the bound took (it did not
    count them), so ``--steps 14000`` was let run about 2 minutes, not 13.5 s."""
    m = _wakes(wakeups=1e6, wakeups_per_mb=0.0)
    assert collective_wakes(m) == 2 * (MAX_WAKE_PIECES - 1)
    per = step_cost_us(m)
    assert per == pytest.approx(2 * (12 * PROCESS_PIECE_US + 510 * WAKE_PIECE_US))
    assert time_problem(m, 14_000, 20) is not None
    most = 10_060     # the chosen count's reach and its warm-up: never refused
    assert MAX_RUN_WORK * PIECE_US / per < most and time_problem(m, most - 20, 20) is None
    one = _wakes(wakeups=1.0, wakeups_per_mb=0.0)
    assert collective_wakes(one) == 0 and step_cost_us(one) == 24 * PROCESS_PIECE_US


def test_a_ddp_model_past_its_bound_is_refused_at_once(tmp_path):
    d = json.loads(DDP.read_text())
    d["comm"].update(wakeups=1e6, wakeups_per_mb=0.0)
    p = tmp_path / "w.json"
    p.write_text(json.dumps(d))
    rc, err, _ = cli("simulate", p, "--steps", "10041", "--warmup", "20")
    one_line_error(rc, err, "w.json", "10,060 steps of this model", "--steps")
    assert load_model(p).comm.wakeups == 1e6
