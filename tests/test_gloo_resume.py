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



def test_the_resume_is_searched_from_the_last_all_reduces_start():
    """The main thread waits for the last all-reduce after that all-reduce started; a longer
    gap before (its wait for an earlier bucket, whose worker kept the last one from
    starting) is not that wait. Closed form (µs): backward 1000-5000, bucket 0 reduced
    2100-8000 and copied 8050-8100, the last bucket reduced from 8100 (its end stamped late,
    9000), copied 8400-8450, optimizer 8450-9500, step end 10000: resume 8400 and the lag-free
    optimizer 1600 µs, where the old window (from backward's end) took the gap 5000-8050 and
    resumed at 8050, before the last all-reduce started (2 of 25 test-job captures of 2026-12-05
    so, in most steps: their late end stamps then reached the transfer)."""
    from types import SimpleNamespace

    from stepsim.calibration.gloo_steps import GlooCollective, fit_gloo_step

    us = 1000
    colls = [GlooCollective("all_reduce", 65536, "float", (2000 * us, 2010 * us),
                            (2100 * us, 8000 * us)),
             GlooCollective("all_reduce", 65536, "float", (4990 * us, 5000 * us),
                            (8100 * us, 9000 * us))]
    spans = [(0, 1000), (1000, 5000), (2000, 2010), (4990, 5000), (8050, 8100), (8400, 8450),
             (8450, 9500)]
    main_ev = (np.array([a * us for a, _ in spans]), np.array([b * us for _, b in spans]))
    step = SimpleNamespace(number=1, start_ns=0, end_ns=10_000 * us)
    rec = fit_gloo_step(step, colls, np.array([1000 * us]), np.array([5000 * us]), (), main_ev)
    assert rec.resume_ns == 8400 * us
    assert rec.opt_work_us == pytest.approx(1600.0)


def test_the_wait_for_the_bucket_before_the_last_is_not_the_resume():
    """When the bucket before the last is still being reduced at backward's end, the main
    thread waits for it, copies it, then waits for the last: the first wait can be the longer
    gap. Closed form (µs), from the DDP demo of 11:59:51 (replicate r0, rank 1, step 18):
    backward 0-1000, bucket 0 enqueued at 500 and reduced 600-6700 (copied 6726-6852), the
    last bucket enqueued 1000-1033 and reduced 1053-12398 (copied 12425-12600), optimizer
    12600-13600, step end 14000: gaps 1033-6726 (5693) and 6852-12425 (5573); the resume is
    12425 and the lag-free optimizer 1575 µs (the old window, from the last all-reduce's
    start, resumed at 6726, 5.7 ms before the last all-reduce ended)."""
    from types import SimpleNamespace

    from stepsim.calibration.gloo_resume import last_resume
    from stepsim.calibration.gloo_steps import GlooCollective, fit_gloo_step

    us = 1000
    colls = [GlooCollective("all_reduce", 65536, "float", (500 * us, 510 * us),
                            (600 * us, 6700 * us)),
             GlooCollective("all_reduce", 65536, "float", (1000 * us, 1033 * us),
                            (1053 * us, 12398 * us))]
    spans = [(0, 500), (500, 510), (510, 1000), (1000, 1033), (6726, 6852), (12425, 12600),
             (12600, 13600)]
    main_ev = (np.array([a * us for a, _ in spans]), np.array([b * us for _, b in spans]))
    step = SimpleNamespace(number=1, start_ns=0, end_ns=14_000 * us)
    rec = fit_gloo_step(step, colls, np.array([0]), np.array([1000 * us]), (), main_ev)
    assert rec.resume_ns == 12425 * us
    assert rec.opt_work_us == pytest.approx(1575.0)
    assert resume_after_wait(*main_ev, 1053 * us, 14_000 * us) == 6726 * us   # the old window
    # the bucket before the last stamped its end after the resume found (late): unchanged
    late = [(600 * us, 6800 * us), (1053 * us, 12398 * us)]
    assert last_resume(*main_ev, 1033 * us, late, 14_000 * us) == 6726 * us
    assert last_resume(*main_ev, 1033 * us, late[1:], 14_000 * us) == 6726 * us


def test_a_preemption_after_the_last_buckets_copy_is_not_the_resume():
    """``finalize_backward`` copies the last bucket into the gradients after its wait, so the
    resume lies at or before that copy; a longer gap after it (the training thread preempted
    in the optimizer: in 39 of 120 rank-steps of 20 test-job captures beside a CPU hog) is
    not the wait. Closed form (µs): backward 0-1000, the last bucket enqueued 1000-1033 and
    reduced 1053-5000, copied 5030-5080 and 5080-5100, optimizer 5100-5600, preempted to
    11600, then 11600-12000, step end 12500: resume 5030, its copies 70 µs, the lag-free
    optimizer 7470 µs; the old window (to the step's end) resumed at 11600, no copy after."""
    from types import SimpleNamespace

    from stepsim.calibration.gloo_steps import GlooCollective, fit_gloo_step

    us = 1000
    colls = [GlooCollective("all_reduce", 65536, "float", (1000 * us, 1033 * us),
                            (1053 * us, 5000 * us))]
    spans = [(0, 1000), (1000, 1033), (5030, 5080), (5080, 5100), (5100, 5600), (11600, 12000)]
    main_ev = (np.array([a * us for a, _ in spans]), np.array([b * us for _, b in spans]))
    copies = (main_ev[0][2:4], main_ev[1][2:4])
    step = SimpleNamespace(number=1, start_ns=0, end_ns=12_500 * us)
    rec = fit_gloo_step(step, colls, np.array([0]), np.array([1000 * us]), (), main_ev, copies)
    assert rec.resume_ns == 5030 * us
    assert rec.copy_us == pytest.approx(70.0)
    assert rec.opt_work_us == pytest.approx(7470.0)
    assert resume_after_wait(*main_ev, 1053 * us, 12_500 * us) == 11600 * us  # the old window
    # without copy events (gradient_as_bucket_view) the window runs to the step's end
    assert fit_gloo_step(step, colls, np.array([0]), np.array([1000 * us]), (), main_ev,
                     (np.array([], int), np.array([], int))).resume_ns == 11600 * us


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


def test_a_lag_of_zero_is_no_wait_and_ranks_that_enter_together_toss_for_it():
    """Ranks that enter together: one pays, drawn at random each step (below 3 ms of waiting
    the late rank was the last to enter in 49 of 90 measured steps: a coin), never both; a
    drawn 0 is no wait. The collective completes every F + B + C + L + O (the late rank enters
    the next one last by L); the job statistic (per step the slower rank's start-to-start)
    is that where the same rank pays twice running and L more where the payer changes (the
    new payer's step ends L late, its start was not): with a fair coin about half the steps,
    so about F + B + C + 1.5 L + O. Before, the higher rank paid every step: F + B + C + L + O."""
    res = simulate(lagged([L]), steps=203, warmup=3)
    payer = {sp.step: sp.rank for sp in res.every_span() if sp.name == "late resume"}
    n = len(res.step_starts_us[0]) - 1
    ranks = [payer[k] for k in sorted(payer)]
    assert len(ranks) >= n and 0.35 < np.mean(ranks) < 0.65
    switches = np.mean(np.diff(ranks) != 0)
    assert 0.35 < switches < 0.65
    assert res.mean_step_us == pytest.approx(F + B + C + L + O + L * switches, rel=0.01)
    counts, step, _ = late_resumes(lagged([0.0]))
    assert counts == {0: 0, 1: 0}
    assert step == pytest.approx(F + B + C + O)


@pytest.mark.parametrize("skew_ms", [1.0, 4.0])
def test_the_last_to_enter_pays_past_3_ms_of_waiting_else_a_coin(skew_ms):
    """Rank 0's forward is ``skew_ms`` longer, so it enters the all-reduce that much after
    rank 1, plus the lag L = 1.5 ms where it paid the step before: past 3 ms (4 ms) rank 1
    slept in it and rank 0 pays every late resume, as before; at 1 ms rank 0 enters 1 ms or
    2.5 ms after rank 1, or 0.5 ms before it where rank 1 paid, always under 3 ms: a coin each
    step, and each rank pays some (over 200 steps, under 20 % on one rank would take a fair
    coin's 1e-17 tail). Before, rank 0 paid every step either way."""
    counts, _, n = late_resumes(add_straggler(lagged([L]), 0, "forward", skew_ms), steps=203)
    if skew_ms > 3:
        assert counts == {0: n, 1: 0}
    else:
        assert counts[0] + counts[1] == n and 0.2 * n < counts[0] < 0.8 * n
