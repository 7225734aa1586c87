"""The step counts an interval needs (scenarios.interval_steps): never a target below the
usual one, quick draws only where their own noise is small beside the interval."""
from __future__ import annotations

import pytest

from stepsim.scenarios.interval_steps import (DRAW_SE_SHARE, POINT_FIRST_CAP, POINT_SE_SHARE,
                                              QUICK_DRAW_STEPS, point_target)
from stepsim.scenarios.predict import predict
from stepsim.scenarios.stepcount import SE_TARGET, simulate_counted, step_bound
from stepsim.scenarios.validate import validate
from tests.test_stepcount import stalled


def test_point_target_closed_form():
    assert point_target(1000.0, 100.0) == (SE_TARGET, "")   # 5 µs < 10 µs: the usual 1 %
    t, why = point_target(1000.0, 1000.0)                    # 5 % of 1000 µs = 50 µs
    assert t == pytest.approx(POINT_SE_SHARE) and "half-width" in why
    assert point_target(0.0, 5.0) == (SE_TARGET, "")


def test_counts_follow_the_interval_and_never_narrow_the_target():
    p = predict(stalled(), [], seed=0, intervals=8)
    half = (p.p90_step_us - p.p10_step_us) / 2
    assert p.count.target >= SE_TARGET
    assert p.count.met or p.steps == step_bound(p.model)
    assert p.count.std_error_us <= max(SE_TARGET * p.mean_step_us, POINT_SE_SHARE * half) \
        or p.steps == step_bound(p.model)
    if p.draw_steps == QUICK_DRAW_STEPS:
        assert p.draw_std_error_us <= DRAW_SE_SHARE * half
    if p.count.target == SE_TARGET:   # the usual target: the point the usual rule gives
        _, c = simulate_counted(p.model, None, 20, 0)
        assert (c.steps, c.mean_us) == (p.steps, pytest.approx(p.mean_step_us))


def _wide():
    """:func:`tests.test_stepcount.stalled` with its training op assumed over ×0.8–1.2: an
    interval wide enough that the point's target is relaxed, and a point that needs more than
    :data:`POINT_FIRST_CAP` steps."""
    m = stalled()
    return m.model_copy(update={"meta": m.meta.model_copy(
        update={"ranges": {"host.ops[1].dur_us": (0.8, 1.2)}})})


def test_one_point_whatever_interval_is_asked_for():
    """fresh11 (2026-12-07): one model and setting gave three point means (whatif, validate of
    one run, validate of two pooled), because the point's target followed each interval's
    half-width. The point now follows one run's interval (the pilot) alone."""
    m = _wide()
    one = predict(m, [], seed=0, intervals=16)
    assert one.count.target > SE_TARGET and one.steps > POINT_FIRST_CAP   # the relaxed case
    for runs, measured in ((1, 50), (2, 100), (3, 30)):
        p = predict(m, [], seed=0, intervals=16, runs=runs, measured_steps=measured)
        assert (p.mean_step_us, p.steps, p.count.target) == \
            (one.mean_step_us, one.steps, one.count.target)
        assert (p.p10_step_us, p.p90_step_us) != (one.p10_step_us, one.p90_step_us)
        rec = validate(p, [one.mean_step_us] * measured, "host_compute", label="x")
        assert rec.predicted_mean_us == one.mean_step_us
        assert rec.error_pct == pytest.approx(0.0, abs=1e-9)
