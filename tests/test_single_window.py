"""The single-process window check (calibration.single_window): gloo_window's
d = C_u / (f · C_p) on one capture, in closed form from sidecars written by hand."""
from __future__ import annotations

import math

import pytest

from stepsim.calibration.gloo_window import drift_between
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.single_window import single_drift, single_drift_warning


def _side(before_ms=(20.0,) * 4, prof_ms=(25.0,) * 8, after_ms=(20.0,) * 20,
          threads=1) -> Sidecar:
    """num_workers=0 (nothing drained): a start-up step, unprofiled steps, the profiled
    window, unprofiled steps after it (main-thread CPU outside next() in ms; 1 ms in next())."""
    def row(i, ms, profiled):
        return {"t_start_us": i * 1e5, "wall_us": ms * 1e3 + 5e3, "cpu_us": (ms + 1) * 1e3,
                "next_wall_us": 1e3, "next_cpu_us": 1e3, "profiled": profiled,
                "profiler_on": profiled}
    kinds = ([(500.0, False)] + [(v, False) for v in before_ms] + [(v, True) for v in prof_ms]
             + [(v, False) for v in after_ms])
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                   "torch_num_threads": threads,
                                   "steps": [row(i, *k) for i, k in enumerate(kinds)]})


def test_a_window_that_is_the_run_plus_the_profilers_cost_reads_one():
    """Edges 20 ms unprofiled on both sides of a 25 ms window: f = 0.8, C_u = 20 ms, d = 1,
    nothing said."""
    w = single_drift(_side())
    assert (w.factor, w.profiled_us, w.unprofiled_us) == (
        pytest.approx(0.8), pytest.approx(25e3), pytest.approx(20e3))
    assert w.d == pytest.approx(1.0) and not w.beyond_noise
    assert single_drift_warning(w) is None


def test_a_run_that_slowed_after_its_window_is_the_edges_geometric_mean():
    """Before 20 ms, after 18 ms, window 25 ms: f = √((20/25)(18/25)), and
    d = 18 / (f · 25) = √(18/20) = 0.9487; steps without scatter, so beyond the noise (0)."""
    w = single_drift(_side(after_ms=(18.0,) * 20))
    assert w.factor == pytest.approx(math.sqrt(0.8 * 0.72))
    assert w.d == pytest.approx(math.sqrt(0.9))
    assert w.noise == 0.0 and w.beyond_noise
    said = single_drift_warning(w)
    for part in ("25.0 ms over its 8 profiled steps", "18.0 ms over the 20 unprofiled",
                 "×0.949", "beyond their scatter", "Kept as priced"):
        assert part in said


def test_against_the_factor_the_step_is_priced_at():
    """Given the factor the step is priced at (step_factor's, drift included, so above 1 as
    read, not clamped as a profiler's cost is): d = 20 / (1.25 · 25) = 0.64; a step priced at
    the later steps' own mean reads 1 and says nothing."""
    assert single_drift(_side(), 1.25).d == pytest.approx(0.64)
    w = single_drift(_side(after_ms=(18.0, 22.0) * 10), 0.8)
    assert w.d == pytest.approx(1.0) and single_drift_warning(w) is None


def test_it_is_gloo_windows_check_on_one_process():
    """The same numbers as the gloo path's shared core on the same rows."""
    side = _side(after_ms=(18.0, 19.0) * 10)
    w = single_drift(side)
    prof = [s for s in side.steps if s.profiled]
    after = side.steps[1 + 4 + 8:]
    assert w == drift_between(0, prof, after, w.factor)


def test_no_check_without_what_measures_it():
    assert single_drift(_side(threads=2)) is None           # a team: the main thread's CPU
    assert single_drift(_side(after_ms=(20.0,))) is None     # one step after the window
    assert single_drift(None) is None
    # a step of 0.1 ms after 25 ms ones: beyond a host's speed, records that cannot be right
    assert single_drift(_side(after_ms=(0.1,) * 20)) is None
