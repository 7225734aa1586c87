"""validate reads the outside load over the unprofiled steps it scores too (fresh user,
2026-12-05): a 2-worker run quiet in its profiled window (held 101 %) whose 15 scored steps
were loaded (78 ms vs 50 ms profiled, one step 319 ms) was not flagged; the check read only
the window. Now the more loaded of the two spans is said, named."""
import pytest

from stepsim.calibration.outside_load import load_note
from stepsim.calibration.run_load import remeasured_load
from stepsim.calibration.sidecar import Sidecar

MS = 1000.0


def _side(after_share: float, window_share: float = 1.0) -> Sidecar:
    # one core, no workers: each 100 ms step makes its batch (20 ms) then computes (80 ms);
    # the profiled window's steps hold the core; the after steps hold ``after_share`` of it,
    # runnable the rest (waiting on the run queue: other load)
    steps, produce = [], []
    for k in range(20):
        sh = after_share if k >= 10 else window_share
        t = k * 100 * MS
        steps.append({"t_start_us": t, "wall_us": 100 * MS, "cpu_us": 100 * MS * sh,
                      "next_wall_us": 20 * MS, "next_cpu_us": 20 * MS * sh,
                      "next_run_wait_us": 20 * MS * (1 - sh), "run_wait_us": 80 * MS * (1 - sh),
                      "profiled": 2 <= k < 10, "profiler_on": k < 10})
        produce.append({"worker": -1, "pid": 1, "seq": k, "wall_us": 20 * MS,
                        "cpu_us": 20 * MS * sh, "proc_cpu_us": 20 * MS * sh,
                        "t_end_us": t + 20 * MS, "run_wait_us": 20 * MS * (1 - sh)})
    return Sidecar.model_validate({"stepsim_sidecar": 1, "host_cores": 1, "produce": produce,
                                   "steps": steps, "loader": {"num_workers": 0},
                                   "torch_num_threads": 1,
                                   "schedule": {"skip_first": 0, "wait": 1, "warmup": 1,
                                                "active": 8, "after": 10}})


def test_loaded_scored_steps_are_flagged_though_the_window_was_quiet():
    load = remeasured_load(_side(0.5))
    assert load.held == pytest.approx(0.5, abs=0.02)
    assert "over the 10 unprofiled steps it is scored on" in load_note(load)


def test_a_quiet_run_reads_the_steps_it_is_scored_on():
    load = remeasured_load(_side(1.0))
    assert load.held == pytest.approx(1.0, abs=0.02)
    assert load.where == "the 10 unprofiled steps it is scored on"


def test_a_loaded_window_does_not_flag_quiet_scored_steps():
    """A fresh user's w2t1 (2026-12-05): window held 86 %, its 36 scored steps 93 %; the
    window's load set its −19.7 % error apart from the ledger's score. Only what is scored
    counts."""
    load = remeasured_load(_side(1.0, window_share=0.5))
    assert load.held == pytest.approx(1.0, abs=0.02)
