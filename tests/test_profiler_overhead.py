"""The profiler-overhead factor in closed form, from sidecars written by hand."""
from __future__ import annotations

import math

import pytest

from stepsim.calibration.profiler_overhead import MEDIAN_SE, overhead_factor, rank_factors
from stepsim.calibration.sidecar import Sidecar


def _side(unprof_ms, prof_ms, warmup_ms=(), first_ms=500.0, on=True) -> Sidecar:
    """A sidecar whose steps are: a start-up step, the unprofiled ones, the profiler's
    warm-up ones (profiler on, not recorded), the profiled ones (main-thread CPU in ms; 1 ms of
    each in next(), which does not count)."""
    def row(ms, profiled, profiler_on):
        r = {"wall_us": ms * 1e3 + 5e3, "cpu_us": (ms + 1) * 1e3, "next_wall_us": 1e3,
             "next_cpu_us": 1e3, "profiled": profiled}
        if on:
            r["profiler_on"] = profiler_on
        return r
    steps = ([row(first_ms, False, False)] + [row(v, False, False) for v in unprof_ms]
             + [row(v, False, True) for v in warmup_ms] + [row(v, True, True) for v in prof_ms])
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                   "steps": steps})


def test_constant_steps_give_the_exact_ratio_and_no_spread():
    f = overhead_factor(_side([20.0] * 3, [25.0] * 4, warmup_ms=[90.0]))
    assert f.factor == pytest.approx(0.8) and f.half_log == 0.0
    assert (f.n_unprofiled, f.n_profiled) == (3, 4)
    assert (f.unprofiled_cpu_us, f.profiled_cpu_us) == (20e3, 25e3)
    assert (f.unprofiled_wall_us, f.profiled_wall_us) == (24e3, 29e3)   # 4 ms off-core each


def test_spread_gives_the_stated_interval():
    """Unprofiled CPU a·{1, e^d, e^−d}: median a, log sample variance d²; constant profiled
    steps: the log-factor's standard error is 1.2533·d/√3, the 80 % interval ±t(0.9, 2)·se,
    the uniform range's half-width that over 0.8."""
    from scipy.stats import t

    a, d = 20.0, 0.1
    f = overhead_factor(_side([a, a * math.exp(d), a * math.exp(-d)], [25.0] * 3))
    assert f.factor == pytest.approx(0.8)
    se = MEDIAN_SE * d / math.sqrt(3)
    assert f.half_log == pytest.approx(t.ppf(0.9, 2) * se / 0.8)
    assert "P10–P90" in f.describe() and "3 unprofiled" in f.describe()


def test_start_up_and_warm_up_steps_do_not_count():
    """The run's first step (start-up) and the profiler's warm-up steps change nothing."""
    base = overhead_factor(_side([20.0] * 3, [25.0] * 3))
    assert overhead_factor(_side([20.0] * 3, [25.0] * 3, warmup_ms=[300.0], first_ms=1.0)) == base


def test_a_sidecar_that_cannot_measure_it_gives_none():
    assert overhead_factor(_side([20.0] * 3, [25.0] * 3, on=False)) is None   # older sidecar
    assert overhead_factor(_side([20.0], [25.0] * 3)) is None                 # one unprofiled
    assert overhead_factor(_side([20.0] * 3, [25.0])) is None                 # one profiled
    assert overhead_factor(None) is None


def test_rank_factors_name_the_measured_and_warn_about_the_rest():
    warnings: list[str] = []
    fac, notes, half = rank_factors([0, 1], {0: _side([20.0] * 3, [25.0] * 3)}, warnings)
    assert fac == {0: pytest.approx(0.8), 1: 1.0} and half == 0.0
    assert notes["profiler_factor"] == "0:0.8000"
    assert notes["profiler_factor_source"].startswith("measured")
    assert any(w.startswith("rank(s) 1:") for w in warnings)
    assert any(w.startswith("profiler overhead (measured)") and "rank 0: 0.800" in w
               for w in warnings)
    assert rank_factors([0], {}, []) == ({0: 1.0}, {}, 0.0)
