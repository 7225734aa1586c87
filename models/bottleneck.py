"""The bottleneck in the field's words: :func:`name_bottleneck` (saturated cores, then a
producer that sets the pace, then the largest critical-path share), :func:`label`, and
:func:`amdahl_ceiling`, the most removing one component can speed the step up.
"""
from __future__ import annotations

import math

from stepsim.simcore.errors import ModelError

BOTTLENECK_LABELS = {
    "input": "input pipeline (DataLoader)",
    "cpu_cores": "CPU cores (more runnable threads than cores)",
    "host_compute": "host compute (CPU work on the host thread)",
    "launch": "host launch overhead",
    "h2d": "host-to-device copy",
    "d2h": "device-to-host copy",
    "d2d": "device-to-device copy",
    "comm": "exposed communication",
    "arrival_skew": "arrival skew (waiting for a straggler)",
    "sync": "host synchronisation",
    "device_idle": "device idle the trace does not explain (launch latency, hidden dependencies)",
    "other": "unexplained idle time",
}


def amdahl_ceiling(fraction: float) -> float:
    """The most any change to a component that takes ``fraction`` of the step (0..1) can speed
    the step up (Amdahl's law): ``1 / (1 − fraction)``; ``inf`` for 1.

    Raises:
        ModelError: ``fraction`` outside [0, 1] or not finite.
    """
    if not (math.isfinite(fraction) and 0.0 <= fraction <= 1.0):
        raise ModelError(f"fraction must be in [0, 1], got {fraction!r}")
    return math.inf if fraction == 1.0 else 1.0 / (1.0 - fraction)


INPUT_WAIT_SHARE = 0.10
"""The host waiting on ``next()`` for this share of the step means the producer sets the pace."""
POOL_SATURATED = 0.90
"""The CPU pool counts as saturated above this busy fraction of its cores."""
CORE_WAIT_SHARE = 0.05
"""Runnable-without-a-core time of the host thread (share of the step) that counts."""
WORKERS_STARVED = 0.25
"""Share of the workers' producing time spent waiting for a core that makes them core-bound."""


def name_bottleneck(shares: dict[str, float], input_wait: float, host_core_wait: float,
                    workers_starved: float, pool_busy: float) -> str:
    """The resource whose relief would shorten the step, in three rules, first match wins:

    1. **Cores**: the CPU pool is saturated (busy ≥ ``POOL_SATURATED`` of its cores) and
       threads wait for cores (the host ≥ ``CORE_WAIT_SHARE`` of the step, or the workers
       ≥ ``WORKERS_STARVED`` of their producing time): more cores (or fewer threads) help,
       speeding up any one thread's code mostly hands its core to another → ``cpu_cores``.
    2. **Producer sets the pace**: the host spends ≥ ``INPUT_WAIT_SHARE`` of the step in
       ``next()``, waiting for the workers or making the batch itself (``num_workers=0``),
       as a measured trace's ``next()`` spans hold both (:mod:`calibration.measure`). In a
       producer/consumer pipeline at steady state that wait means the loader is the slower
       stage: shortening the consumer's work only lengthens the wait; at 0 workers the
       batch's own work is on the step's path → ``input`` (``cpu_cores`` when the workers
       are core-starved).
    3. Otherwise the largest critical-path share (see the module docstring).

    Args:
        shares: critical-path shares (fractions of the step).
        input_wait / host_core_wait: the host thread's time in ``next()`` (waiting, or its
            own work on the batch) / its waits for a core, as fractions of the step.
        workers_starved: fraction of the workers' producing time spent waiting for a core.
        pool_busy: busy fraction of the CPU pool (0..1).
    """
    if pool_busy >= POOL_SATURATED and (host_core_wait >= CORE_WAIT_SHARE
                                         or workers_starved >= WORKERS_STARVED):
        return "cpu_cores"
    if input_wait >= INPUT_WAIT_SHARE:
        return "cpu_cores" if workers_starved >= WORKERS_STARVED else "input"
    return max(shares, key=lambda k: shares[k]) if shares else "host_compute"


def label(key: str) -> str:
    """The bottleneck key in words (``compute:gemm`` → ``device compute: gemm``)."""
    if key.startswith("compute:"):
        return f"device compute: {key.split(':', 1)[1]}"
    return BOTTLENECK_LABELS.get(key, key)
