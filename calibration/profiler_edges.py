"""The profiler-overhead factor measured at the profiled window's edges, where the host's load
has had the least time to change.

:func:`calibration.profiler_overhead.overhead_factor` compares the median CPU per step of all
a capture's unprofiled steps with that of all its profiled ones. The DDP job times its
unprofiled steps in two blocks, 8 right before the profiled window and 8 right after
(:data:`demo.ddp_job.UNPROFILED_STEPS`), so the two medians are some seconds apart, and on a
shared host the load moves in seconds: in the DDP demo of 2026-12-06 07:22 rank 0's main
thread took 10.8-13.8 ms a step before its window, 12.0-20.8 ms in it (rising) and
17.5-23.5 ms after, so the medians read 15.56 ÷ 13.03 ms, a factor of 1.32, a profiler that
made the step *faster*: every host duration of the model came out 1.32× the profiled one and
the demo's rows +27 to +31 % slow. The profiler's cost is the same at both edges of the
window while the host's load drifts, so each edge compares the :data:`EDGE_STEPS` steps on
either side of it (the profiler's warm-up step, on but not recorded, left out):

    f = sqrt(f_before · f_after),  f_before = median(last unprofiled before) ÷ median(first
    profiled),  f_after = median(first unprofiled after) ÷ median(last profiled)

(one edge alone where the capture has unprofiled steps on one side only). There: 0.964 and
1.000 on rank 0, 0.98 in all, against the re-measured runs' 12.8 ms of CPU a step over the
window's 13.0 profiled. Its 80 % interval is as the medians' (:mod:`calibration.profiler_overhead`),
from the steps at the edges: the log-factor's standard error ``1.2533 × sqrt(Σ (s_u²/n_u +
s_p²/n_p)) / edges``, ``± t(0.9, n − 1) × se``, stated as a uniform range.
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.calibration.page_faults import step_work_us
from stepsim.calibration.profiler_overhead import (MEDIAN_SE, MIN_STEPS, OverheadFactor,
                                                   median_step_wall_us, half_log, log_ratio_var)

__all__ = ["edge_factor", "EDGE_STEPS"]

EDGE_STEPS = 4
"""Steps on each side of an edge of the profiled window (assumed: half the DDP job's block of
8 unprofiled steps; fewer than :data:`calibration.profiler_overhead.MIN_STEPS` on a side and
that edge is not measured)."""


def _edges(steps) -> list[tuple[list, list]]:
    """``(unprofiled, profiled)`` step rows at each edge of the one profiled window."""
    prof = [i for i, s in enumerate(steps) if s.profiled]
    if not prof or prof != list(range(prof[0], prof[-1] + 1)):
        return []
    ok = lambda s: s is not steps[0] and not s.profiler_on and not s.profiled \
        and step_work_us(s) > 0
    before = [s for s in steps[:prof[0]] if ok(s)][-EDGE_STEPS:]
    after = [s for s in steps[prof[-1] + 1:] if ok(s)][:EDGE_STEPS]
    first = [s for s in steps[prof[0]:prof[-1] + 1] if step_work_us(s) > 0]
    out = []
    if len(before) >= MIN_STEPS:
        out.append((before, first[:EDGE_STEPS]))
    if len(after) >= MIN_STEPS:
        out.append((after, first[-EDGE_STEPS:]))
    return [(u, p) for u, p in out if len(p) >= MIN_STEPS]


def edge_factor(side) -> OverheadFactor | None:
    """The profiler-overhead factor of one capture from its window's edges (see the module
    docstring), or None where its sidecar does not say which steps ran unprofiled, its
    profiled steps are not one run of steps, or no edge has :data:`MIN_STEPS` steps on both
    sides."""
    steps = list(side.steps) if side is not None else []
    if not steps or any(s.profiler_on is None for s in steps):
        return None
    edges = _edges(steps)
    if not edges:
        return None
    logs, var, n_min = [], 0.0, None
    for u, p in edges:
        cu, cp = (np.array([step_work_us(s) for s in rows]) for rows in (u, p))
        logs.append(math.log(float(np.median(cu)) / float(np.median(cp))))
        var += log_ratio_var(cu, cp)
        n_min = min(n_min or cu.size, cu.size, cp.size)
    se = MEDIAN_SE * math.sqrt(var) / len(edges)
    half = half_log(se, n_min)
    rows_u = [s for u, _ in edges for s in u]
    rows_p = [s for _, p in edges for s in p]
    mu = float(np.median([step_work_us(s) for s in rows_u]))
    mp = float(np.median([step_work_us(s) for s in rows_p]))
    return OverheadFactor(math.exp(float(np.mean(logs))), half, mu, mp, len(rows_u),
                          len(rows_p), median_step_wall_us(rows_u), median_step_wall_us(rows_p))
