"""The run against itself: the profiled steps of a capture against its unprofiled steps after
the profiled window (``Capture.steps(..., after=N)``), both in the sidecar.

A validation scores a re-measured run on its unprofiled steps (:mod:`calibration.measure`),
while calibration fits the trace's profiled ones. When the two differ by more than
:data:`DRIFT_WARN` the model is of steps the run did not keep taking: the machine changed
within the run (other load came or went, its speed moved), or the profiler cost that much.
Seen by a new user on a quiet 2-core machine: profiled steps of 292 ms against 170 ms
unprofiled ones ten seconds later, and every prediction of that model 32–73 % too slow, with
no warning until validation.
"""
from __future__ import annotations

import numpy as np

__all__ = ["unprofiled_after", "profiled_drift", "DRIFT_WARN", "MIN_AFTER_STEPS"]

DRIFT_WARN = 0.10
"""Relative difference of the mean profiled step from the mean unprofiled step after it above
which calibration warns (the tolerance of its replay check, ``REPLAY_WARN``)."""
MIN_AFTER_STEPS = 2
"""Fewest unprofiled steps after the profiled window that a validation scores instead of the
trace's profiled steps (and that calibration compares them with)."""


def unprofiled_after(side) -> list:
    """The sidecar's steps after its profiled window, timed with the profiler stopped
    (``Capture.steps(..., after=N)``); [] without a sidecar or such steps."""
    if side is None or not side.steps:
        return []
    last = max((i for i, s in enumerate(side.steps) if s.profiled), default=None)
    if last is None:
        return []
    return [s for s in side.steps[last + 1:] if s.profiler_on is False]


def profiled_drift(side, path: str = "") -> str | None:
    """A warning when the capture's profiled steps' mean wall time differs from its unprofiled
    steps' after the window by more than :data:`DRIFT_WARN` (None otherwise, or without both)."""
    after = unprofiled_after(side)
    prof = [s.wall_us for s in side.steps if s.profiled] if side is not None else []
    if len(after) < MIN_AFTER_STEPS or not prof:
        return None
    p, a = float(np.mean(prof)), float(np.mean([s.wall_us for s in after]))
    if a <= 0 or abs(p / a - 1) <= DRIFT_WARN:
        return None
    return (f"{path + ': ' if path else ''}the {len(prof)} profiled steps took "
            f"{p / 1e3:.1f} ms on average, the {len(after)} unprofiled steps right after them "
            f"{a / 1e3:.1f} ms ({100 * (p / a - 1):+.0f} %): the machine changed within the run "
            "(other load, its speed) or the profiler cost that much; the model is of the "
            "profiled steps, and a validation of this run scores the unprofiled ones; "
            "re-capture on a quiet machine")
