"""The profiler's cost shared between a step's phases by their events (closed forms)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.calibration.profiler_events import MIN_PHASE_FACTOR, phase_events, phase_factors


def test_cost_per_event_in_closed_form():
    """A step of 10 ms (forward 3, backward 5, optimizer 2 ms) recording 100, 400 and 50
    events, unprofiled at f = 0.89 (1.1 ms of profiler cost, 2 µs an event): forward loses
    0.2 ms, backward 0.8, the optimizer 0.1."""
    got = phase_factors(0.89, {"forward": 3000.0, "backward": 5000.0, "optimizer": 2000.0},
                        {"forward": 100, "backward": 400, "optimizer": 50})
    assert got == pytest.approx({"forward": 1 - 200 / 3000, "backward": 1 - 800 / 5000,
                                 "optimizer": 1 - 100 / 2000}, rel=1e-12)


def test_events_in_proportion_to_time_keep_the_step_factor():
    got = phase_factors(0.8, {"forward": 2000.0, "backward": 6000.0},
                        {"forward": 20, "backward": 60})
    assert got == pytest.approx({"forward": 0.8, "backward": 0.8}, rel=1e-12)


@pytest.mark.parametrize("f, dur, ev", [
    (1.0, {"forward": 1.0, "backward": 2.0}, {"forward": 1, "backward": 5}),   # no cost
    (1.2, {"forward": 1.0, "backward": 2.0}, {"forward": 1, "backward": 5}),   # load, not cost
    (0.9, {"forward": 1.0, "backward": 2.0}, {}),                                # no events
    (0.3, {"forward": 1000.0, "backward": 10.0}, {"forward": 1, "backward": 99}),  # < floor
])
def test_the_step_factor_where_events_cannot_share_the_cost(f, dur, ev):
    assert phase_factors(f, dur, ev) == {p: f for p in dur}


@settings(max_examples=200, deadline=None)
@given(f=st.floats(0.3, 0.999),
       dur=st.lists(st.floats(100.0, 1e5), min_size=3, max_size=3),
       ev=st.lists(st.integers(0, 1000), min_size=3, max_size=3))
def test_the_step_total_is_kept(f, dur, ev):
    """Whatever the events, the phases' unprofiled total is ``f`` × the profiled total (the
    single factor's), and no phase factor leaves ``[MIN_PHASE_FACTOR, 1]``."""
    names = ("forward", "backward", "optimizer")
    d, n = dict(zip(names, dur)), dict(zip(names, ev))
    got = phase_factors(f, d, n)
    assert sum(d[p] * got[p] for p in names) == pytest.approx(f * sum(dur), rel=1e-9)
    assert all(MIN_PHASE_FACTOR <= v <= 1.0 + 1e-12 for v in got.values())


def test_phase_events_count_nested_events_by_start():
    starts = np.array([0, 5, 10, 20, 21, 22, 30, 40, 55], dtype=np.int64)
    ends = starts + 3
    got = phase_events((starts, ends), start_ns=5, bwd0_ns=20, bwd1_ns=40, end_ns=55)
    assert got == {"forward": 2, "backward": 4, "optimizer": 1}
    assert phase_events(None, 0, 1, 2, 3) == {}
