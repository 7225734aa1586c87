"""Each rank's late resume after a gloo job's last all-reduce (calibration.gloo_resume)."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.calibration.gloo_resume import lagged_optimizer, resume_after_wait, resume_lags


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


def test_every_rank_lends_its_lags_to_the_optimizer_samples():
    """Each step's lag-free optimizer time plus each rank's lag in that step: the samples'
    mean is the mean work plus the mean lag over ranks and steps (closed form)."""
    work = [800.0, 900.0, 1000.0]
    lags = np.array([[0.0, 1600.0, 0.0], [0.0, 0.0, 2000.0]])
    got = lagged_optimizer(work, lags)
    assert got == [800.0, 2500.0, 1000.0, 800.0, 900.0, 3000.0]
    assert np.mean(got) == pytest.approx(np.mean(work) + lags.mean())
