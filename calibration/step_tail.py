"""The run's steps that a short profiled window does not represent, measured from the sidecar.

The model's training step is its profiled window's (8 steps by default). The sidecar also
times the steps after the window with the profiler stopped (``Capture.steps(after=N)``), the
steps a validation scores (:func:`calibration.run_drift.settled_after`). Where the profiler's
cost on the step is measured (:func:`calibration.profiler_overhead.step_factor`, one thread)
the step is already scaled to the unprofiled steps; where it is not (torch's intra-op team,
whose main-thread CPU holds its spinning), the window alone set the step, and it can miss
the run's own distribution:

* a fresh user's MLP on 2 threads at 1 worker (2026-12-06, h-fresh10): the replay −13.5 %,
  1–8 of each run's last 37 steps at 2× its median or more, none in the 8 profiled ones;
* reproduced (2026-12-06 03:36, fault11, the same shape of MLP, 1 worker, 2 threads on 2
  cores, load 1.9–2.1): the 8 profiled steps 29.0 ms mean wall (22.3 median), the 40 after
  them 32.2 ms (31.2); validate on those −16.4 %. The mechanism is in the sidecar: in the
  window the main thread waited 10.0 ms a step in ``next()`` and 2.9 ms for a core, after it
  4.2 ms and 11.5 ms: with the profiler off the step overlaps the worker's batch (21.6 ms
  of CPU) and the team of 2 threads shares the 2 cores with it more often; the step's work
  without those waits was 16.1 against 16.4 ms.

Where there are at least as many after-steps as profiled ones (their mean at least as
precise as the window's: on the reproduction above the window's 8 steps spread 14.8–56.4 ms,
a standard error of 5.6 ms on their mean against 2.3 on the after-steps') and their mean wall
``a`` at the window's speed differs from the window's ``w`` by more than :data:`TAIL_WARN`,
the step's work (window µs) takes the difference: ``× (1 + (a × s − w) / work)``, ``s`` the window's
host speed against the run (:func:`calibration.host_noise.window_speed`, which
``host.cpu_scale`` takes back out), so the model's step mean is the run's where the step's
work holds the difference (a host-bound step: exactly; a loader-bound one holds part of it
in its wait). Steps with a system-CPU spike (:mod:`calibration.sys_spikes`) are left out
on both sides, as the model's step leaves them out. Measured, with a warning naming both
means.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.run_drift import MIN_AFTER_STEPS, settled_after
from stepsim.calibration.sidecar import Sidecar
from stepsim.models.warning_record import said

__all__ = ["StepTail", "step_tail", "MAX_TAIL_FACTOR", "TAIL_WARN"]

TAIL_WARN = 0.02
"""Relative difference of the after-steps' mean (at the window's speed) from the window's
below which the model keeps the window (the 2 % threshold of calibrate's other step notes)."""

MAX_TAIL_FACTOR = 4.0
"""Bound on the factor (assumed, as ``profiler_overhead.MAX_STEP_FACTOR``): a window more than
4× off its run's steps is a run that changed its work; the model then keeps the window."""


@dataclass(frozen=True)
class StepTail:
    """The factor on the training step's work (window µs) that gives the model the run's mean
    step, and what it comes from (µs, mean wall per step)."""

    factor: float
    window_us: float
    run_us: float
    n_window: int
    n_run: int
    window_speed: float

    def describe(self) -> str:
        """The warning, sized by :attr:`shift_us`; part of the window's host speed where that
        one is said too (one cause: the profiled window is not its run)."""
        return said(self._text(), "step_tail", effect_us=self.shift_us, part_of="window_speed",
                    summary=f"profiled window {self.window_us / 1e3:.2f} ms a step, the run "
                            f"after it {self.run_us / 1e3:.2f} ms: step work scaled "
                            f"×{self.factor:.3f}")

    def _text(self) -> str:
        return (f"the profiled window is not the run's steps (measured): its {self.n_window} "
                f"steps took {self.window_us / 1e3:.2f} ms on average, the {self.n_run} "
                f"unprofiled steps after it {self.run_us / 1e3:.2f} ms (a profiled window's own "
                f"sampling, the profiler's cost or the run's changing between them); the "
                f"training step's work (not the whole step) is scaled × {self.factor:.3f}, "
                f"adding {self.shift_us / 1e3:+.2f} ms to the step, so that the model's "
                f"step is the run's mean at the window's host speed {self.window_speed:.3f} "
                f"({self.run_us / 1e3:.2f} × {self.window_speed:.3f} = "
                f"{self.run_us * self.window_speed / 1e3:.2f} ms, which host.cpu_scale takes "
                "back to the runs' speed), and a re-measured run is scored on such steps")

    @property
    def shift_us(self) -> float:
        """µs the factor adds to the window's mean step: the run's mean at the window's speed
        less the window's (``a·s − w``)."""
        return self.run_us * self.window_speed - self.window_us


def step_tail(side: Sidecar | None, work_us: float) -> StepTail | None:
    """The :class:`StepTail` of ``side`` for a step whose work is ``work_us`` (the model's
    mean, window µs), at the window's host speed against the run
    (:func:`calibration.host_noise.window_speed`, 1 where it has none); None where
    there are fewer than 2 profiled steps, fewer settled after-steps than profiled ones (or
    than :data:`calibration.run_drift.MIN_AFTER_STEPS`), the means agree within
    :data:`TAIL_WARN`, or the factor leaves
    1/:data:`MAX_TAIL_FACTOR`–:data:`MAX_TAIL_FACTOR`."""
    if side is None or work_us <= 0:
        return None
    from stepsim.calibration.sys_spikes import spikes

    # the steps without a system-CPU spike on both sides, as the model's step is
    # (calibration.sys_spikes: the calm window's)
    spiked = {id(s) for s, f in zip(side.steps, spikes(side) or []) if f}
    run = np.array([s.wall_us for s in settled_after(side).steps if id(s) not in spiked],
                   dtype=float)
    win = np.array([s.wall_us for s in side.steps if s.profiled and id(s) not in spiked],
                   dtype=float)
    if run.size < max(MIN_AFTER_STEPS, win.size) or win.size < 2:
        return None
    from stepsim.calibration.host_noise import window_speed

    a, w, s = float(run.mean()), float(win.mean()), window_speed(side) or 1.0
    if abs(a * s / w - 1) <= TAIL_WARN:
        return None
    factor = 1 + (a * s - w) / work_us
    if not 1 / MAX_TAIL_FACTOR <= factor <= MAX_TAIL_FACTOR:
        return None
    return StepTail(factor, w, a, int(win.size), int(run.size), s)
