"""The profiler's own cost shared between a step's phases by the events each one records.

The Kineto profiler costs the profiled thread CPU time per event it records (the op's record,
its ``Input Dims`` with ``record_shapes``), so the cost a step pays is not spread in
proportion to time: a phase of many short ops pays more of it than a phase of few long ones.
:mod:`calibration.profiler_overhead` measures one factor per rank, ``f`` = unprofiled ÷
profiled main-thread CPU per step; scaling every phase by ``f`` leaves a phase denser in
events than the step too long and the others too short.

On the DDP demo's MLP (2 gloo ranks, 2 vCPUs, 2026-12-06) one profiled step records 117
main-thread events in forward (3.2-4.6 ms), 396 in backward (autograd's nodes, their ops,
the gradient accumulation and DDP's hooks; 5.7-10.7 ms) and 67 after it (the optimizer;
2.1-4.0 ms). The profiled and unprofiled steps of the same run (the job's ``phases``: each
step's training-thread CPU at forward's end, backward's start and the last gradient's hook)
give each phase's own factor: backward's is 0.86-0.98× the step's, forward's 1.00-1.10×,
the rest's 0.93-1.15×, in 8 runs of 2 demos. With a cost ``c`` per event,

    f_p = 1 − N_p · c / D_p,  c = (1 − f) · Σ D_p / Σ N_p,

(``D_p``: the phase's profiled duration per step, ``N_p``: its events per step) keeps the
step's total at ``f`` × its profiled time, as the single factor did, and predicts each phase's
factor: in a replicate of 2026-12-06 07:22 (rank 0, 4.5 ms of profiler cost a step: 7.8 µs an
event) forward 0.80, backward 0.67, the rest 0.85 against 0.79, 0.67 and 0.85 measured; in
one of 07:19 (rank 1, 1.4 µs an event) 0.95, 0.91, 0.96 against 0.98, 0.87, 1.01.

Where ``f`` ≥ 1 (the unprofiled steps no cheaper: the host's load changed between them, not
the profiler's cost, which only adds) or a phase's factor would fall below
:data:`MIN_PHASE_FACTOR`, every phase keeps ``f``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["phase_events", "phase_factors", "MIN_PHASE_FACTOR"]

MIN_PHASE_FACTOR = 0.25
"""The lowest phase factor taken (assumed; :data:`calibration.profiler_overhead.MAX_STEP_FACTOR`'s
bound): below it a phase's events do not account for its cost."""


def phase_events(main_ev: tuple[np.ndarray, np.ndarray] | None, start_ns: int, bwd0_ns: int,
                 bwd1_ns: int, end_ns: int) -> dict[str, int]:
    """The main thread's events (``main_ev``: start and end instants, ns, sorted by start;
    nested ones each count) that start in a step's forward (``start_ns`` to ``bwd0_ns``), its
    backward (to ``bwd1_ns``) and after it (to ``end_ns``: ``"optimizer"``); empty without
    events."""
    if main_ev is None:
        return {}
    i0, i1, i2, i3 = (int(np.searchsorted(main_ev[0], t, side="left"))
                      for t in (start_ns, bwd0_ns, bwd1_ns, end_ns))
    return {"forward": i1 - i0, "backward": i2 - i1, "optimizer": i3 - i2}


def phase_factors(f: float, dur_us: dict[str, float], events: dict[str, float]
                  ) -> dict[str, float]:
    """Each phase's profiler factor from the step's ``f`` (see the module docstring).

    Args:
        f: the rank's unprofiled ÷ profiled CPU per step.
        dur_us: per phase, its profiled duration per step (µs, mean over the steps).
        events: per phase, its recorded events per step (mean over the same steps).

    Returns:
        ``{phase: factor}`` for the phases of ``dur_us``; each ``f`` where the events cannot
        share the cost (``f`` ≥ 1, no events or no time, or a factor under
        :data:`MIN_PHASE_FACTOR`).
    """
    same = {p: f for p in dur_us}
    timed = [p for p, d in dur_us.items() if d > 0]
    total_d = sum(dur_us[p] for p in timed)
    total_n = sum(max(events.get(p, 0.0), 0.0) for p in timed)
    if f >= 1.0 or total_d <= 0 or total_n <= 0:
        return same
    c = (1.0 - f) * total_d / total_n       # µs of profiler cost per event
    out = {}
    for p, d in dur_us.items():
        n = max(events.get(p, 0.0), 0.0)
        if d <= 0:
            out[p] = f
            continue
        out[p] = 1.0 - n * c / d
        if out[p] < MIN_PHASE_FACTOR:
            return same
    return out
