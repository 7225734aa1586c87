"""The run's steps that the profiled window does not represent (calibration.step_tail): the
model's step work takes the after-steps' mean minus the window's, in closed form."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.step_tail import step_tail

WINDOW = [20e3, 22e3, 18e3, 21e3, 19e3, 20e3, 23e3, 17e3]      # µs, mean 20 ms, no heavy step


def _side(after: list[float], window: list[float] = WINDOW) -> Sidecar:
    """0 workers: a start-up step, ``window`` profiled, then ``after`` unprofiled walls (µs),
    each step 1 ms in next(); no produce records, so the window's speed is 1."""
    walls = [50e3] + list(window) + list(after)
    rows, t = [], 1e6
    for k, w in enumerate(walls):
        prof = 1 <= k <= len(window)
        rows.append({"t_start_us": t, "wall_us": w, "cpu_us": w - 500.0, "next_wall_us": 1e3,
                     "next_cpu_us": 500.0, "profiled": prof, "profiler_on": prof})
        t += w + 100.0
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                   "host_cores": 2, "steps": rows})


def test_heavy_steps_after_the_window_move_the_step_by_the_difference_of_means():
    """32 after-steps, 1 in 4 a heavy one at 3× (60 ms), the rest as the window: their mean is
    20 + 40/4 = 30 ms, so a step of 19 ms of work becomes 19 + 10 ms: factor 1 + 10/19."""
    after = [60e3 if k % 4 == 3 else WINDOW[k % 8] for k in range(32)]
    assert np.mean(after) == pytest.approx(30e3 - 0.0, rel=0.02)
    tail = step_tail(_side(after), 19e3)
    a = float(np.mean(after))
    assert tail.factor == pytest.approx(1 + (a - 20e3) / 19e3, rel=1e-12)
    assert (tail.window_us, tail.run_us, tail.n_window, tail.n_run) == pytest.approx(
        (20e3, a, 8, 32))
    assert "20.00 ms" in tail.describe() and f"{a / 1e3:.2f} ms" in tail.describe()
    # the factor is on the work, an added a·s − w on the step (newuser3 read it on the step;
    # newuser4 read "× 1.162 (its step +37.42 ms, not × 1.162)" as contradicting itself)
    assert tail.shift_us == pytest.approx(a - 20e3)
    text = tail.describe()
    assert (f"work (not the whole step) is scaled × {tail.factor:.3f}, adding "
            f"{(a - 20e3) / 1e3:+.2f} ms to the step" in text)
    assert text.count(f"× {tail.factor:.3f}") == 1


def test_a_representative_window_or_too_few_after_steps_keep_the_window():
    """After-steps whose mean is within 2 % of the window's leave the model (None), as do fewer
    after-steps than profiled ones (their mean no better than the window's) and a factor past
    4× (a run that changed its work); faster after-steps scale the step down."""
    assert step_tail(_side([20.3e3] * 16), 19e3) is None
    assert step_tail(_side([30e3] * 7), 19e3) is None
    assert step_tail(_side([400e3] * 16), 19e3) is None
    fast = step_tail(_side([15e3] * 16), 19e3)
    assert fast.factor == pytest.approx(1 - 5e3 / 19e3, rel=1e-12)


def test_a_system_cpu_spike_is_left_out_on_both_sides():
    """A step holding 150 ms of system CPU (calibration.sys_spikes), in the window or after
    it, is not the step's work (the model's step leaves it out): the factor is the one
    without it."""
    after = [30e3] * 16
    want = step_tail(_side(after), 19e3).factor
    for k in (3, 8 + 5):                     # a profiled step, then an after-step
        side = _side(after)
        for s in side.steps:
            s.sys_cpu_us, s.minflt = 100.0, 5
        side.steps[1 + k].wall_us += 150e3
        side.steps[1 + k].cpu_us += 150e3
        side.steps[1 + k].sys_cpu_us = 150e3
        for s in side.steps[2 + k:]:             # the later steps start later
            s.t_start_us += 150e3
        got = step_tail(side, 19e3)
        base = [w for i, w in enumerate(WINDOW) if i != k] if k < 8 else WINDOW
        rest = [30e3] * (15 if k >= 8 else 16)
        assert got.factor == pytest.approx(1 + (np.mean(rest) - np.mean(base)) / 19e3, rel=1e-12)
    assert want == pytest.approx(1 + 10e3 / 19e3, rel=1e-12)
