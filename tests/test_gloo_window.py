"""Whether a gloo job's profiled window represents its run (calibration.gloo_window): each
rank's training-thread CPU a step in the window, its profiler's cost taken out, against the
unprofiled steps after it; closed forms, and the checked-in 2-rank job whose window ran at
a slow phase of the host (ddpload12's capture A, 2026-12-06 14:07)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.calibration.gloo_window import (drift_warning, host_drift, rank_drifts,
                                             scaled_comm, window_drift)
from stepsim.calibration.sidecar import StepRecord
from stepsim.models.param_comm import CommParams

PROF = [19_600.0, 20_400.0] * 4
"""8 profiled steps' CPU outside next() (µs): mean 20,000, sample variance 182,857."""
AFTER = [13_700.0, 14_300.0] * 10
"""20 unprofiled steps after the window: mean 14,000, sample variance 94,737."""


def _side(prof=PROF, after=AFTER, threads=1):
    """A rank's sidecar at num_workers=0 (nothing drained): 2 unprofiled steps, the window,
    then ``after``; each step 1 ms in next() (500 µs of CPU there)."""
    def row(i, cpu, profiled, on):
        return StepRecord(t_start_us=i * 1e5, wall_us=40_000, cpu_us=cpu + 500,
                          next_wall_us=1_000, next_cpu_us=500, profiled=profiled,
                          profiler_on=on)
    kinds = [(15_000.0, False, False)] * 2 + [(c, True, True) for c in prof] \
        + [(c, False, False) for c in after]
    return SimpleNamespace(steps=[row(i, *k) for i, k in enumerate(kinds)],
                           torch_num_threads=threads, loader=SimpleNamespace(num_workers=0))


def test_the_drift_is_the_runs_cpu_over_the_windows_without_the_profiler():
    """d = 14,000 / (0.9 × 20,000) = 0.7778; noise = 2 √(s²_u/n_u + 0.9² s²_p/n_p) / 14,000."""
    w = window_drift(0, _side(), 0.9)
    assert (w.profiled_us, w.unprofiled_us, w.n_profiled, w.n_unprofiled) == (
        pytest.approx(20_000.0), pytest.approx(14_000.0), 8, 20)
    assert w.d == pytest.approx(14_000 / 18_000)
    var_u, var_p = np.var(AFTER, ddof=1), np.var(PROF, ddof=1)
    assert w.noise == pytest.approx(2 * math.sqrt(var_u / 20 + 0.81 * var_p / 8) / 14_000)
    assert w.beyond_noise
    said = drift_warning([w], corrected=True)
    for part in ("rank 0: 20.0 ms over its 8 profiled steps", "18.0 ms without the profiler",
                 "(×0.900)", "14.0 ms over the 20 unprofiled steps", "×0.778",
                 "priced at the unprofiled steps' CPU"):
        assert part in said
    assert "walls are the price" in drift_warning([w], corrected=False)


def test_a_window_that_is_the_run_plus_the_profilers_cost_says_nothing():
    """Unprofiled steps at the factor × the window (0.9 × 20,000 = 18,000): d = 1, no
    warning; a 3 % drift inside the steps' scatter (±800 µs a step) is none either."""
    w = window_drift(1, _side(after=[17_600.0, 18_400.0] * 10), 0.9)
    assert w.d == pytest.approx(1.0) and not w.beyond_noise
    assert drift_warning([w], corrected=True) is None
    noisy = window_drift(1, _side(prof=[19_000.0, 21_000.0] * 4,
                                  after=[17_300.0, 19_700.0] * 10), 0.9)
    assert noisy.d == pytest.approx(18_500 / 18_000) and not noisy.beyond_noise


def test_a_profiler_factor_above_one_is_drift_not_the_profilers_cost():
    """A factor over 1 (the profiler cannot make a step cheaper) counts as 1."""
    assert window_drift(0, _side(), 1.2).d == pytest.approx(0.7)
    assert window_drift(0, _side(), 0.0).d == pytest.approx(0.7)


def test_no_check_without_what_measures_it():
    """A team of intra-op threads (the main thread's CPU is not the rank's work), fewer than
    two unprofiled steps after the window, no sidecar."""
    assert window_drift(0, _side(threads=2)) is None
    assert window_drift(0, _side(after=[14_000.0])) is None
    assert window_drift(0, None) is None


def test_rank_drifts_scale_only_where_the_ops_are_the_threads_cpu():
    """Priced from CPU: each rank's d, the host's speed in the window the inverse geometric
    mean; walls as the price: the warning alone, no scale, no notes."""
    sides = {0: _side(), 1: _side(after=[15_700.0, 16_300.0] * 10)}
    warnings: list[str] = []
    scale, notes = rank_drifts([0, 1], sides, {0: 0.9, 1: 1.0}, True, warnings)
    assert scale == pytest.approx({0: 14_000 / 18_000, 1: 16_000 / 20_000})
    assert notes["window_speed"] == pytest.approx(1 / math.sqrt(scale[0] * scale[1]))
    assert notes["window_drift"] == "0:0.7778,1:0.8000"
    assert len(warnings) == 1 and "rank 0:" in warnings[0] and "rank 1:" in warnings[0]
    walls: list[str] = []
    assert rank_drifts([0, 1], sides, {0: 0.9, 1: 1.0}, False, walls) == ({}, {})
    assert len(walls) == 1 and "walls are the price" in walls[0]


def test_the_backend_threads_cpu_takes_the_hosts_drift():
    """host_cpu_us 200 and 800 µs/MiB at drifts 0.64 and 0.81: ×0.72 (their geometric
    mean); no drift, unchanged."""
    comm = CommParams(world_size=2, host_cpu_us=200.0, host_cpu_us_per_mb=800.0)
    assert host_drift({0: 0.64, 1: 0.81}) == pytest.approx(0.72)
    got = scaled_comm(comm, {0: 0.64, 1: 0.81})
    assert (got.host_cpu_us, got.host_cpu_us_per_mb) == (pytest.approx(144.0),
                                                        pytest.approx(576.0))
    assert scaled_comm(comm, {}) is comm and host_drift({}) == 1.0


JOB = Path(__file__).parent / "data" / "gloo_loader_job"
"""ddpload12's capture A (see tests/test_gloo_cpu_price.py): 8 profiled steps of 23.1 and
24.2 ms of training-thread CPU (ranks 0, 1), 30 unprofiled ones after them of 16.3 and 16.7."""


def test_a_real_jobs_window_at_a_slow_phase_of_the_host_is_priced_at_its_run():
    """The window is said and its ops are priced at the run's unprofiled CPU: the reference
    rank's ops add up to its after-steps' CPU a step (within 5 %), not the window's × its
    profiler factor (22.3 ms); the replay of the capture at its own speed stays within 10 %
    of the window's measured step."""
    from stepsim.calibration.gloo_dispatch import gloo_dir
    from stepsim.calibration.run_drift import settled_after
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.models.host_speed import at_capture_speed
    from stepsim.models.simulate import simulate

    model = gloo_dir(JOB)
    notes = model.meta.notes
    drift = {int(k): float(v) for k, v in (x.split(":") for x in notes["window_drift"].split(","))}
    assert drift[0] == pytest.approx(0.729, abs=0.01) and drift[1] == pytest.approx(0.806, abs=0.01)
    # (the note's d are rounded to 4 decimals)
    assert notes["window_speed"] == pytest.approx(1 / math.sqrt(drift[0] * drift[1]), rel=1e-3)
    assert any("does not represent the run" in w for w in model.meta.warnings)
    ref = notes["reference_rank"]
    side = load_sidecar(JOB / f"rank{ref}" / "sidecar.json")
    after = np.mean([s.cpu_us - s.next_cpu_us for s in settled_after(side).steps])
    ops = sum(op.dur_us for op in model.host.ops if op.kind in ("cpu", "launch"))
    assert ops == pytest.approx(after, rel=0.05)
    got = simulate(at_capture_speed(model), steps=200, warmup=20, seed=0,
                   keep="brief").step_us.max(axis=0)
    assert got.mean() == pytest.approx(np.mean(model.meta.measured_step_us), rel=0.10)
