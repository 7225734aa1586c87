"""The worker start-up step of a run (µs): the first ``next()`` of a multi-process
DataLoader's iterator, which spawns its workers and waits for their first batch, paid once per
iterator, not per step. :mod:`calibration.measure` leaves it out of a run's measured steps
and re-exports these; its module docstring states the rule (from the sidecar, else from the
trace by :data:`STARTUP_RATIO`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["STARTUP_RATIO", "StartupStep", "startup_step"]

STARTUP_RATIO = 2.0
"""Without a sidecar, a step number 0 whose ``next()`` took more than this many times the
longest ``next()`` of every later step is the worker start-up step (a stated rule, not a
fit: a start-up wait is seconds against ms, a stall in a steady run recurs)."""


@dataclass(frozen=True)
class StartupStep:
    """The worker start-up step of a run (µs), left out of its measured steps.

    Attributes:
        step_us: the whole step (the sidecar's loop iteration, or the trace's step).
        next_us: its ``next()`` (spawning the workers and waiting for their first batch).
        later_next_us: the median ``next()`` of the steps after it.
        source: ``sidecar`` or ``trace``.
        in_trace: the step was one of the trace's steps (so it was taken out of them).
        capture: what made the capture, as its sidecar says (``harness``, ``lightning``,
            ``transformers``; None without one, or an older sidecar).
    """

    step_us: float
    next_us: float
    later_next_us: float
    source: str
    in_trace: bool
    capture: str | None = None


def startup_step(side, step_us: np.ndarray, wait_us: np.ndarray, multi: bool
                 ) -> StartupStep | None:
    """The run's worker start-up step (see the module docstring), or None.

    Args:
        side: the run's capture sidecar, or None.
        step_us / wait_us: the trace's steps and each step's ``next()`` time (µs).
        multi: the trace's ``next()`` is a multi-process loader's and its first step is
            the loop's first (number 0).
    """
    if side is not None and side.steps:
        if side.loader.num_workers == 0:
            return None
        first, later = side.steps[0], side.steps[1:]
        rest = float(np.median([r.next_wall_us for r in later])) if later else 0.0
        in_trace = first.profiled and step_us.size > 1
        return StartupStep(first.wall_us, first.next_wall_us, rest, "sidecar", in_trace,
                           side.capture)
    if not multi or step_us.size < 2 or not wait_us[0] > STARTUP_RATIO * wait_us[1:].max():
        return None
    return StartupStep(float(step_us[0]), float(wait_us[0]), float(np.median(wait_us[1:])),
                       "trace", True)
