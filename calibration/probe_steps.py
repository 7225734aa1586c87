"""Which records of a capture a probe at a second setting is compared with, and the range a
fitted coefficient is drawn from (shared by every probe fit: interference, the slowdown past
the cores, team stall, batch size)."""
from __future__ import annotations

PROBE_FIRST_STEPS = 2
"""Steps at the start of a run left out of the interference fit (they carry the workers'
start-up)."""


def probe_base_steps(side) -> list[int]:
    """Indices in ``side.steps`` of the calibration setting's steps a probe at a second setting
    is compared with (interference, team stall, batch size): those outside the profiled window
    (``profiled`` false: the profiler's warm-up steps too), less the first
    :data:`PROBE_FIRST_STEPS` (the workers' start-up)."""
    return [i for i, s in enumerate(side.steps) if not s.profiled][PROBE_FIRST_STEPS:]


def after_startup(recs):
    """The records without any worker process's first batch (``seq`` 0 of a worker ≥ 0: it
    carries the worker's start-up). The main thread's batches at ``num_workers=0`` and a
    worker's later batches carry none, so they are kept."""
    return [r for r in recs if not (r.worker >= 0 and r.seq == 0)]


def uniform_with_p10_p90(p10: float, p90: float) -> tuple[float, float]:
    """The uniform range (cut at 0) whose P10–P90 is ``[p10, p90]``: a fitted coefficient's
    bootstrap P10–P90 is 80 % of the support intervals draw it from, not all of it (drawn
    over ``[p10, p90]`` itself, its P10–P90 would be 80 % as wide as the fit's)."""
    mid, half = (p10 + p90) / 2, (p90 - p10) / 2 / 0.8
    return max(mid - half, 0.0), mid + half
