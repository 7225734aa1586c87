"""The host-speed gauge: a run's CPU µs of identical work, its page faults priced at one cost.

A run's speed relative to the calibration capture (:mod:`calibration.host_noise`) is the
ratio of its CPU time per unit of identical work,

    w = mean(produce CPU per batch) + mean(training-step CPU per step outside ``next()``)  (µs)

A training step's CPU includes its page faults (:mod:`calibration.page_faults`), whose number
is set by each process's heap, not the host's speed: they are priced at one cost per fault
and taken out. That cost is fitted once, pooled over the capture and its replicates
(:func:`pooled_per_fault`: each run's fitted slope scaled by its own speed), so one run's noisy
fit does not set every run's price.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from stepsim.calibration.calm import calm_produce, calm_steps
from stepsim.calibration.page_faults import (MIN_FAULTS, MIN_STEPS, refault_fit,
                                             slope_per_fault_us)
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import after_startup

__all__ = ["CENTRE", "identical_work_us", "per_fault_us", "pooled_per_fault", "calm_steps",
           "at_one_fault_cost", "MAX_SPEED_RATIO"]

MAX_SPEED_RATIO = 10.0
"""A replicate whose identical work took more than this many times (or less than its
inverse) the capture's CPU time is not a run of the same work on the same kind of host: its
records cannot be right (the most seen here was 3.5×; at 30× the draws' host speed left the
model's bounds)."""


CENTRE = np.mean
"""The centre of a run's CPU µs per identical work (:func:`window_speed`, :func:`_work_parts`):
the mean, since a run's mean step is its work times the mean of its speed over its batches
(the model's produce is the window's mean too). The median had read a demo replicate
(2026-12-05 23:00, ``/tmp/fin/m-plain-1`` nw1-r3) at 1.18× the capture's produce where its
mean was 1.31× and its scored steps 1.45× the capture's; over the three plain demos of that
evening the capture was the fastest of its 5 runs each time and 13 of 15 rows predicted low
(docs/measurements.md "Host noise")."""


def identical_work_us(side: Sidecar, per_fault_us: float | None = None) -> float | None:
    """CPU µs of one batch's produce plus one training step's work outside ``next()``
    (means, :data:`CENTRE`; a worker process's first batch (:func:`calibration.sidecar_fit.after_startup`)
    and the run's first step left out: they carry start-up); None when the sidecar holds
    neither. ``per_fault_us``: see :func:`_work_parts`."""
    parts = _work_parts(side, per_fault_us)
    return sum(parts.values()) if parts else None


def per_fault_us(side: Sidecar) -> float | None:
    """The CPU µs per page fault :func:`_work_parts` takes out of ``side``'s steps
    (:func:`calibration.page_faults.refault_fit`), or None where it cannot be measured.

    Measured even where ``side``'s steps that did not re-fault measure its work: a replicate
    without such steps is then compared at one cost (:func:`pooled_per_fault`, which starts
    from this one), not at its own fit's. A demo's capture
    (2026-12-05 23:00, 4 fault-free steps at 55.8 ms) against a replicate whose steps all
    re-faulted (6,100 a step) and whose own fit took 42.5 ms of fault-free work read as a host
    1.02× the capture's, where its batches took 1.18× and its raw steps 1.15×; at the
    capture's 1.58 µs a fault it reads 1.17×."""
    rf = refault_fit(side)
    return rf.per_fault_us if rf is not None else None


def _work_parts(side: Sidecar, per_fault: float | None = None) -> dict[str, float]:
    """The parts of :func:`identical_work_us` the sidecar holds: ``produce`` (a batch) and
    ``train`` (a step's work outside ``next()``: of the steps that did not re-fault their
    memory where the sidecar counts faults and has at least 3 such, else less each step's
    faults × their CPU per fault, ``per_fault`` where given (one for every run,
    :func:`pooled_per_fault`, so that two runs are compared at one cost per fault), else its own where
    :func:`calibration.page_faults.refault_fit` measures it), mean CPU µs each (:data:`CENTRE`).

    Each run's own fit is noisy: a user's two runs of one setting (2-thread CNN, 1 worker,
    2026-12-05) fitted 4.64 and 2.50 µs a fault over about 6,000 faults a step, which made
    the replicate's identical work 1.371× the capture's, where one cost per fault (any of 0,
    2.5, 3.5 or 4.64 µs) gives 1.07–1.09× (its produce 1.01×, raw step CPU 1.10×)."""
    return _priced(side, _records(side), per_fault)


@dataclass(frozen=True)
class _Records:
    """What :func:`_work_parts` reads of a sidecar whatever the cost per fault, read once
    (:func:`_records`): the mean produce CPU µs of its calm batches (None: none) and the steps
    it prices, the fault-free ones (``quiet``) or every calm step."""

    produce_us: float | None
    steps: list
    quiet: bool


def _records(side: Sidecar) -> _Records:
    """``side``'s :class:`_Records`: one pass over its produce records and its steps."""
    produce = [r.work_us for r in calm_produce(side, after_startup(side.produce))]
    # the steps that did not re-fault their memory where the sidecar counts faults: whether a
    # run re-faults is its heap's (calibration.page_faults), not the host's speed
    rows = calm_steps(side)
    quiet = [s for s in rows if s.minflt is not None and s.minflt < MIN_FAULTS]
    return _Records(float(CENTRE(produce)) if produce else None,
                    quiet if len(quiet) >= MIN_STEPS else rows, len(quiet) >= MIN_STEPS)


def _priced(side: Sidecar, recs: _Records, per_fault: float | None) -> dict[str, float]:
    """:func:`_work_parts` from ``side``'s records ``recs`` at the cost per fault
    ``per_fault``."""
    if recs.quiet:      # they measure the work: their few faults priced only
        per = per_fault or 0.0     # at a cost given (one for every run)
    else:   # else each step's faults at the capture's cost where given, else at its own fit's
        per = per_fault if per_fault is not None else (per_fault_us(side) or 0.0)
    train = [max(s.cpu_us - s.next_cpu_us - per * (s.minflt or 0), 0.0) for s in recs.steps]
    out = {"produce": recs.produce_us} if recs.produce_us is not None else {}
    if train:
        out["train"] = float(CENTRE(train))
    return out


def at_one_fault_cost(side: Sidecar, rep: Sidecar, per: float | None
                       ) -> tuple[list[str], float, float, dict[str, float]]:
    """``(parts both hold, replicate's work, capture's work, replicate's parts)`` (CPU µs),
    the replicate's faults priced at the capture's cost per fault ``per`` times the
    replicate's own speed ``k = w / w0``: a host ``k``× slower takes ``k``× the CPU per fault
    too, so a run that is the capture at ``k``× measures ``k`` exactly (at the capture's cost
    it read ``k + (k − 1) × faults' share``: 1.118 for 1.1). ``w(k)`` falls as ``k`` rises,
    so ``k = w(k) / w0`` has one root (Brent's method); None ``per``: each run's own."""
    return _at_cost(side, _records(side), rep, _records(rep), per)


def _at_cost(side: Sidecar, recs0: _Records, rep: Sidecar, recs: _Records, per: float | None
             ) -> tuple[list[str], float, float, dict[str, float]]:
    """:func:`at_one_fault_cost` from the runs' records (:func:`_records`), read once for
    every ``k`` Brent's method tries and every round of :func:`pooled_per_fault`."""
    parts0 = _priced(side, recs0, per)

    def at(k: float) -> tuple[list[str], float, float, dict[str, float]]:
        parts = _priced(rep, recs, None if per is None else per * k)
        common = [p for p in parts0 if p in parts]   # the same work on both sides
        return (common, sum(parts[p] for p in common), sum(parts0[p] for p in common), parts)

    got = at(1.0)
    if per is None or not got[0] or got[1] <= 0 or got[2] <= 0:
        return got
    lo, hi = 1 / (2 * MAX_SPEED_RATIO), 2 * MAX_SPEED_RATIO

    def gap(k: float) -> float:   # rises with k: the replicate's work at k falls
        return k - at(k)[1] / got[2]

    if gap(lo) >= 0 or gap(hi) <= 0:            # out of range: the check after says so
        return got
    return at(brentq(gap, lo, hi, xtol=1e-12, rtol=4 * np.finfo(float).eps))


POOL_ROUNDS = 50
"""Most rounds of :func:`pooled_per_fault`'s fixed point (each run's speed at the pooled
cost, then the cost over the speed-scaled slopes); it settles in a few on the runs seen."""


def pooled_per_fault(side: Sidecar, replicates: list[Sidecar]) -> float | None:
    """One CPU µs per page fault for the capture ``side`` and its ``replicates``, at the
    capture's speed: each run ``j`` takes ``k_j × (F + c × faults)`` of CPU a step (``k_j`` its
    host speed, :func:`at_one_fault_cost`, 1 for the capture; ``F`` the step's fault-free work;
    ``c`` this cost), so its fitted slope
    (:func:`calibration.page_faults.slope_per_fault_us`) ÷ ``k_j`` measures ``c``. ``c`` is the
    median of these, one per run that measures one, and each ``k_j`` is re-measured at it
    until both settle (:data:`POOL_ROUNDS`).

    Why pooled: one run's fit is noisy (a demo's capture fitted 2.78 µs a fault where six
    earlier captures fitted 1.1–1.9, 2026-12-06, and pricing every replicate at it read one
    at 0.94× where its batches took 1.01×). One vote per run, so a run with more steps (many
    more pairs of steps) does not outvote the others, and the cost stays among the runs'
    own. A copy of a run at ``k``× fits ``k``× its slope, which ÷ ``k`` is its own: it reads
    ``k`` exactly.

    The capture's own fit (:func:`per_fault_us`) where no run's slope measures the cost (its
    fit is then its system CPU per fault, or none)."""
    own = per_fault_us(side)
    fits = [slope_per_fault_us(run) for run in [side, *replicates]]
    if all(f is None for f in fits):
        return own
    c = own if own is not None else float(np.median([f for f in fits if f is not None]))
    recs0, recs = _records(side), [_records(rep) for rep in replicates]
    for _ in range(POOL_ROUNDS):
        ks = [1.0] + [_speed(side, recs0, rep, r, c) for rep, r in zip(replicates, recs)]
        votes = [f / k for f, k in zip(fits, ks) if f is not None and k is not None]
        if not votes:
            return own
        got = float(np.median(votes))
        if abs(got - c) <= 1e-12 * c:
            return got
        c = got
    return c


def _speed(side: Sidecar, recs0: _Records, rep: Sidecar, recs: _Records, per: float
           ) -> float | None:
    """``rep``'s host speed against ``side`` (their records ``recs`` and ``recs0``) at the
    cost per fault ``per`` (:func:`at_one_fault_cost`), or None where it cannot be measured or
    is out of bounds (:data:`MAX_SPEED_RATIO`)."""
    common, w, w0, _ = _at_cost(side, recs0, rep, recs, per)
    if not common or w <= 0 or w0 <= 0 or not 1 / MAX_SPEED_RATIO <= w / w0 <= MAX_SPEED_RATIO:
        return None
    return w / w0
