"""Each rank's late resume after a gloo job's last all-reduce (calibration.gloo_resume)."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.calibration.gloo_resume import late_lags, resume_after_wait, resume_lags
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.ddp_whatifs import add_straggler
from tests.test_ddp_ranks import B, C, F, O, S, cpu_ddp


def test_the_resume_is_the_end_of_the_longest_gap():
    """``finalize_backward`` copies the buckets already reduced (events right after backward),
    waits untraced for the last all-reduce, then copies it: the resume is the first event
    after the longest gap, not the first event after backward."""
    starts = np.array([0, 100, 120, 5000, 5010, 9000])
    ends = np.array([90, 110, 200, 5005, 6000, 9500])
    assert resume_after_wait(starts, ends, 95, 9800) == 5000      # gap 200 -> 5000
    assert resume_after_wait(starts, ends, 5006, 8000) == 5010    # one event: its own gap
    assert resume_after_wait(starts, ends, 9600, 9800) is None


def test_lags_count_from_the_first_rank_to_resume():
    r = np.array([[1000, 5000, 9000], [1000, 3400, 12000]])       # ns, (ranks, steps)
    assert resume_lags(r).tolist() == [[0.0, 1.6, 0.0], [0.0, 0.0, 3.0]]


def test_each_step_keeps_the_late_ranks_lag():
    """One rank is late at a time: the step's draw is the late rank's lag (0 where none)."""
    lags = np.array([[0.0, 1600.0, 0.0, 0.0], [0.0, 0.0, 2000.0, 0.0]])
    assert late_lags(lags) == [0.0, 1600.0, 2000.0, 0.0]


L = 1_500.0
"""The measured resume lag (µs) in the closed forms below."""


def lagged(lags_us: list[float]) -> StepModel:
    """``cpu_ddp`` (two ranks, two cores) whose optimizer, right after the sync on the
    all-reduce, carries a resume lag."""
    m = cpu_ddp(cores=2)
    ops = list(m.host.ops)
    ops[-1] = ops[-1].model_copy(update={"resume_lag_us": lags_us})
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


def late_resumes(m: StepModel, steps: int = 8, warmup: int = 3) -> dict[int, int]:
    res = simulate(m, steps=steps, warmup=warmup)
    got = {r: 0 for r in res.ranks}
    for sp in res.every_span():
        if sp.name == "late resume":
            got[sp.rank] += 1
    return got, res.mean_step_us, len(res.step_starts_us[0]) - 1    # steps it simulated


@pytest.mark.parametrize("late", [0, 1])
def test_the_straggler_pays_the_late_resume_and_the_rank_that_waited_does_not(late):
    """A straggler of S in rank ``late``'s forward enters the all-reduce last; the other
    rank sleeps S in it and resumes at once when it completes, the straggler L later (as
    measured: the straggler's thread wakes without a core). Every step: F + S + B + C + L + O,
    and only the straggler has a late resume, one a step. Before, each rank drew the
    lag apart, so the rank that had waited was late too."""
    counts, step, n = late_resumes(add_straggler(lagged([L]), late, "forward", S / 1e3))
    assert counts == {late: n, 1 - late: 0}
    assert step == pytest.approx(F + S + B + C + L + O)


def test_a_lag_of_zero_is_no_wait_and_a_tie_goes_to_the_higher_rank():
    """Ranks that enter together: one (the higher, as ``split_collective`` names the last)
    pays, so the job step is F + B + C + L + O with one late rank, never both; a drawn 0
    is no wait."""
    counts, step, n = late_resumes(lagged([L]))
    assert counts == {0: 0, 1: n}
    assert step == pytest.approx(F + B + C + L + O)
    counts, step, _ = late_resumes(lagged([0.0]))
    assert counts == {0: 0, 1: 0}
    assert step == pytest.approx(F + B + C + O)
