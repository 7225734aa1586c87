"""The outside load on a re-measured run, as a validation reads it: over the steps it scores
(its settled unprofiled steps, else its profiled window), read as calibration reads a
capture's (:mod:`calibration.outside_load`), and the slowdown a ledger keeps of it.
:mod:`calibration.measure` reads a run's steps and asks this module for its load; a job of
several ranks is read over every rank together (:mod:`calibration.job_load`).
"""
from __future__ import annotations

import math
from dataclasses import replace

from stepsim.calibration.job_load import threads_per_worker
from stepsim.calibration.outside_load import OutsideLoad, outside_load
from stepsim.calibration.run_drift import MIN_AFTER_STEPS, settled_after


def ledger_slowdown(load: OutsideLoad | None) -> float | None:
    """The run's outside load as a ledger keeps it: ``1 / held − 1``, at least 0 (held a hair
    over 1 is the measurement's noise); None unmeasured or impossible (held 0: no CPU at
    all)."""
    if load is None or not math.isfinite(load.slowdown):
        return None
    return max(0.0, load.slowdown)


def load_over(side, steps: list | None = None) -> OutsideLoad | None:
    """The outside load on capture ``side`` over its profiled window (as calibration reads
    it) or over ``steps``."""
    nw = side.loader.num_workers
    return outside_load(side, nw, threads_per_worker(side), side.torch_num_threads or 1,
                        steps=steps)


def remeasured_load(side) -> OutsideLoad | None:
    """The outside load on the re-measured capture ``side``, read as calibration reads a
    capture's (:mod:`calibration.outside_load`), over the steps a validation scores: the
    settled unprofiled steps (:func:`settled_after`) when there are at least
    :data:`MIN_AFTER_STEPS` of them, else its profiled window, its ``where`` saying which;
    None when the sidecar cannot tell (no cores, no instants, no busy interval, nothing held).

    Only the scored span counts: a fresh user's run loaded in its profiled window (held 86 %)
    and not over its 36 scored steps (93 %, 2026-12-05) was set apart from the ledger's score,
    its −19.7 % error excused by load its scored steps did not have (when the more loaded of
    the two spans was taken); a run quiet in its window and loaded over its scored
    steps stays flagged (``tests/test_scored_load.py``)."""
    after = settled_after(side).steps
    if len(after) >= MIN_AFTER_STEPS:
        load = load_over(side, steps=after)
        where = f"the {len(after)} unprofiled steps it is scored on"
    else:
        load, where = load_over(side), "its profiled window"
    if load is None or load.held <= 0:
        return None
    return replace(load, where=where)
