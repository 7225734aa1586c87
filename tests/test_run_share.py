"""The pooled mean of a validation's runs of the step's page-fault share, drawn from the
Student-t predictive over the runs it was measured from (models/run_share.py), in closed form
and in the interval's draws (scenarios/draws.py), and kept by calibration
(calibration/refault_runs.py) on real runs of the plain demo (tests/data/probe0_runs)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

from stepsim.calibration.page_faults import refault_fit
from stepsim.calibration.refault_runs import run_share
from stepsim.calibration.sidecar import load_sidecar
from stepsim.fit import calibrate
from stepsim.models.run_share import draw_share, share_p10_p90, share_predictive
from stepsim.scenarios.draws import draw_plan

PROBE_DEMO = [0.48, 0.42, 0.29, 0.49, 0.03, 0.44, 0.42, 0.03]
"""The 8 calibration runs' shares of 2026-12-07's probe demo (main20-probe-103954)."""


def test_p10_p90_is_the_t_interval_of_a_new_k_run_mean():
    x = np.array(PROBE_DEMO)
    n, k = x.size, 4
    half = stats.t.ppf(0.9, n - 1) * x.std(ddof=1) * math.sqrt(1 / k + 1 / n)
    assert share_p10_p90(x, k) == pytest.approx((x.mean() - half, x.mean() + half))
    # the re-measured settings' pooled means (2, 4, 8 workers: 0.48, 0.46, 0.40) lie inside;
    # the new runs' scatter alone (x̄ ± t s/√k) left 0.48 out
    lo, hi = share_p10_p90(x, k)
    assert lo < 0.40 < 0.46 < 0.48 < hi
    assert x.mean() + stats.t.ppf(0.9, n - 1) * x.std(ddof=1) / math.sqrt(k) < 0.48


def test_width_is_0_without_spread_and_grows_in_proportion_to_it():
    assert share_p10_p90([0.4] * 5, 3) == pytest.approx((0.4, 0.4))
    base = np.array([0.40, 0.42, 0.38, 0.41, 0.39])
    w = [np.subtract(*share_p10_p90(0.4 + f * (base - 0.4), 3)[::-1]) for f in (1, 2, 3)]
    assert w[1] == pytest.approx(2 * w[0]) and w[2] == pytest.approx(3 * w[0])


def test_the_measured_means_error_stays_however_many_runs_are_pooled():
    x = np.array(PROBE_DEMO)
    floor = 2 * stats.t.ppf(0.9, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    widths = [np.subtract(*share_p10_p90(x, k)[::-1]) for k in (1, 4, 100, 10_000)]
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] == pytest.approx(floor, rel=1e-3)


def test_draws_hold_the_closed_form_quantiles():
    x = np.array([0.45, 0.5, 0.41, 0.55, 0.47, 0.52])
    rng = np.random.default_rng(3)
    d = np.array([draw_share(x, 4, rng) for _ in range(40_000)])
    lo, hi = share_p10_p90(x, 4)
    assert np.percentile(d, [10, 90]) == pytest.approx([lo, hi], abs=0.004)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=12), st.integers(1, 20),
       st.integers(0, 2**31 - 1))
def test_a_draw_is_a_share(shares, runs, seed):
    v = draw_share(shares, runs, np.random.default_rng(seed))
    assert 0.0 <= v <= 1.0
    c, scale, dof = share_predictive(shares, runs)
    assert dof == len(shares) - 1 and scale >= 0


def test_too_few_runs_are_refused():
    with pytest.raises(ValueError, match="at least 2"):
        share_predictive([0.3])
    with pytest.raises(ValueError, match="runs must be"):
        share_predictive([0.3, 0.4], 0)


@pytest.fixture(scope="module")
def measured(probe0_runs):
    cap = probe0_runs / "nw1-r0"
    reps = [probe0_runs / r for r in ("nw1-r1", "nw1-r2", "nw1-r3", "nw1-r5")]
    return calibrate(cap / "trace.json.gz", sidecar=cap / "sidecar.json", replicates=reps)


def test_calibration_keeps_the_quiet_runs_shares(measured, probe0_runs):
    most = refault_fit(load_sidecar(probe0_runs / "nw1-r0" / "sidecar.json")).max_faults
    shares = [run_share(load_sidecar(probe0_runs / r / "sidecar.json"), most)
              for r in ("nw1-r0", "nw1-r1", "nw1-r2", "nw1-r3")]        # r5 loaded: left out
    assert measured.host.refault_share_runs == pytest.approx(shares)
    assert measured.host.refault_share == pytest.approx(np.mean(shares))
    assert "Student t" in next(w for w in measured.meta.warnings if "page faults over" in w)


def test_the_interval_draws_the_predictive_and_every_other_path_as_before(measured):
    without = measured.model_copy(update={"host": measured.host.model_copy(
        update={"refault_share_runs": []})})
    runs = 4
    new, old = draw_plan(measured, 400, 5, runs), draw_plan(without, 400, 5, runs)
    key = "host.refault_share"
    for (a, sa), (b, sb) in zip(new, old):
        assert sa == sb
        assert {p: v for p, v in a.items() if p != key} == {p: v for p, v in b.items() if p != key}
    drawn = np.array([f[key] for f, _ in new])
    lo, hi = share_p10_p90(measured.host.refault_share_runs, runs)
    assert np.percentile(drawn, [10, 90]) == pytest.approx([lo, hi], abs=0.03)
    # the old draws (the mean of 4 uniform values over the range) are narrower: they leave
    # out the measured mean's own error
    olds = np.array([f[key] for f, _ in old])
    assert np.ptp(np.percentile(olds, [10, 90])) < np.ptp(np.percentile(drawn, [10, 90]))


def test_a_model_without_runs_writes_no_field(measured):
    from stepsim.models.params import StepModel

    assert "refault_share_runs" in measured.host.model_dump()
    without = measured.host.model_copy(update={"refault_share_runs": []})
    assert "refault_share_runs" not in without.model_dump()
    again = StepModel.model_validate_json(measured.model_dump_json())
    assert again.host.refault_share_runs == measured.host.refault_share_runs


def test_the_interval_listing_says_the_share_is_drawn_from_its_runs(measured, tmp_path):
    """``whatif``'s interval line names the range the draws take: the runs' Student-t
    predictive (P10-P90 of one run's share, in closed form), not the factor range beside the
    runs that the draws no longer read (break21: it listed ``host.refault_share x[lo, hi]``)."""
    from tests.test_quirks import cli

    path = tmp_path / "m.json"
    path.write_text(measured.model_dump_json())
    rc, err, out = cli("whatif", path, "--set", "loader.num_workers=2", "--draws", "4",
                       "--steps", "20")
    assert rc == 0, err
    flat = " ".join((out + err).split())
    lo, hi = share_p10_p90(measured.host.refault_share_runs, 1)
    assert (f"host.refault_share [{lo:.3g}, {hi:.3g}] (P10-P90 of 1 run(s)' mean, the "
            f"Student-t predictive of {len(measured.host.refault_share_runs)} measured runs)"
            ) in flat
    assert "host.refault_share x[" not in flat
