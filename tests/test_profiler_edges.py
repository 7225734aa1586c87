"""The profiler-overhead factor at the profiled window's edges, in closed form."""
from __future__ import annotations

import math

import pytest

from stepsim.calibration.profiler_edges import EDGE_STEPS, edge_factor
from stepsim.calibration.profiler_overhead import MEDIAN_SE, overhead_factor, rank_factors
from stepsim.calibration.sidecar import Sidecar


def _side(before_ms, prof_ms, after_ms=(), warmup_ms=(50.0,)) -> Sidecar:
    """A DDP capture's steps: a start-up step, unprofiled steps, the profiler's warm-up, the
    profiled window, unprofiled steps after it (main-thread CPU, ms; none in next())."""
    def row(ms, profiled, on):
        return {"wall_us": ms * 1e3, "cpu_us": ms * 1e3, "next_wall_us": 0.0,
                "next_cpu_us": 0.0, "profiled": profiled, "profiler_on": on}
    steps = ([row(500.0, False, False)] + [row(v, False, False) for v in before_ms]
             + [row(v, False, True) for v in warmup_ms] + [row(v, True, True) for v in prof_ms]
             + [row(v, False, False) for v in after_ms])
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                   "steps": steps})


def _drift(n, start, k):
    """``n`` steps at ``start`` ms, the host slowing by ``k`` a step (compounded)."""
    return [start * (1 + k) ** i for i in range(n)]


def test_a_drifting_host_gives_the_profilers_factor_at_the_edges():
    """A host slowing 3 % a step through 8 unprofiled, 20 profiled and 8 unprofiled steps,
    the profiler costing 25 % (factor 0.8): the medians of all the steps compare the middle of
    two blocks 21 steps apart with the window's middle, which the compounding drift puts off
    (0.839); each edge is 0.8 times the drift between the steps it compares (their medians sit
    4 steps apart: 1.03^−4 before, 1.03^4 after), which cancels in the geometric mean."""
    k = 0.03
    steps = _drift(36, 10.0, k)
    side = _side(steps[:8], [v / 0.8 for v in steps[8:28]], steps[28:], warmup_ms=())
    medians = 0.8 * (1.03 ** 7 + 1.03 ** 28) / (1.03 ** 17 + 1.03 ** 18)   # 0.839
    assert overhead_factor(side).factor == pytest.approx(medians, rel=1e-9)
    got = edge_factor(side)
    assert got.factor == pytest.approx(0.8, rel=1e-9)
    assert (got.n_unprofiled, got.n_profiled) == (2 * EDGE_STEPS, 2 * EDGE_STEPS)


def test_constant_steps_give_the_exact_ratio_and_the_stated_interval():
    """Unprofiled steps a·{1, e^d, e^−d, 1} before, constant after; constant profiled: the
    ratio 20/25 at both edges, the log-factor's standard error 1.2533·sqrt(s²/4)/2 (s² the
    before-edge's log sample variance, 2d²/3), ± t(0.9, 3)·se over 0.8."""
    from scipy.stats import t

    a, d = 20.0, 0.1
    side = _side([a, a * math.exp(d), a * math.exp(-d), a], [25.0] * 20, [a] * 8)
    got = edge_factor(side)
    assert got.factor == pytest.approx(0.8, rel=1e-12)
    se = MEDIAN_SE * math.sqrt((2 * d * d / 3) / 4) / 2
    assert got.half_log == pytest.approx(t.ppf(0.9, 3) * se / 0.8, rel=1e-9)


def test_one_edge_where_the_capture_has_unprofiled_steps_on_one_side():
    side = _side([20.0] * 8, [25.0] * 3 + [40.0] * 17)
    assert edge_factor(side).factor == pytest.approx(0.8)      # the first steps' edge only
    assert overhead_factor(side).factor == pytest.approx(0.5)


def test_none_where_the_edges_cannot_measure_it():
    assert edge_factor(_side([20.0], [25.0] * 4, [20.0])) is None       # one step a side
    two = _side([20.0] * 4, [25.0] * 4, [20.0] * 4).model_dump()
    two["steps"][2]["profiled"] = True    # a profiled step among the unprofiled: not one window
    assert edge_factor(Sidecar.model_validate(two)) is None


def test_rank_factors_take_the_edges():
    side = _side(_drift(8, 10.0, 0.03), [10.0 * 1.03 ** (8 + i) / 0.8 for i in range(20)],
                 [10.0 * 1.03 ** (28 + i) for i in range(8)], warmup_ms=())
    fac, notes, half = rank_factors([0], {0: side}, [])
    assert fac[0] == pytest.approx(0.8) and "edges" in notes["profiler_factor_source"]


def test_a_reading_above_one_is_drift_and_corrects_nothing():
    # the profiled steps 0.6x the unprofiled ones beside them (a job whose steps have two
    # modes, as a user's 2-rank job at 2 intra-op threads a rank on 2 cores read 1.72): the
    # profiler cannot make a step faster, so that rank keeps its profiled durations, said once
    side = _side([30.0] * 8, [18.0] * 8, [30.0] * 8, warmup_ms=())
    ok = _side([20.0] * 8, [25.0] * 8, [20.0] * 8, warmup_ms=())
    warnings: list[str] = []
    fac, notes, half = rank_factors([0, 1], {0: side, 1: ok}, warnings)
    assert edge_factor(side).factor == pytest.approx(30.0 / 18.0)
    assert fac == {0: 1.0, 1: pytest.approx(0.8)}
    said = [w for w in warnings if "cannot make a step faster" in w]
    assert len(said) == 1 and "rank(s) 0 " in said[0] and "rank 0: 1.667" in said[0]
    scaled = [w for w in warnings if w.startswith("profiler overhead (measured)")]
    assert len(scaled) == 1 and "rank 1: 0.800" in scaled[0] and "rank 0" not in scaled[0]


def test_a_reading_above_one_within_the_steps_scatter_is_not_measurable():
    # a 2-rank Lightning job's shape (tests/test_capture_frameworks): 2 unprofiled steps beside
    # 4 profiled, their scatter far wider than the profiler's cost; the reading above 1 is
    # said as not measurable with its numbers, not as drift, and corrects nothing
    side = _side([2.7, 2.0], [2.0, 2.1, 2.2, 2.3], warmup_ms=())
    f = edge_factor(side)
    assert f.factor == pytest.approx(2.35 / 2.15) and f.lo() <= 1.0
    warnings: list[str] = []
    fac, notes, half = rank_factors([0], {0: side}, warnings)
    assert fac == {0: 1.0} and notes["profiler_factor"] == f"0:{f.factor:.4f}" and half > 0
    said = [w for w in warnings if "profiler overhead" in w]
    assert len(said) == 1 and said[0].startswith("profiler overhead not measurable on rank(s) 0:")
    assert f"rank 0: {f.factor:.3f} (P10–P90 {f.lo():.3f}–" in said[0]
    assert "within the steps' own scatter" in said[0] and "cannot make" not in said[0]
