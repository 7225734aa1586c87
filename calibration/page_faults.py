"""The training step's page faults: memory the allocator gives back to the kernel each step.

A CPU training step allocates its activations and gradients (the demo's CNN: about 40–60 MB
a step, tensors of up to 8 MiB) and frees them at its end. glibc's malloc hands large freed
blocks back to the kernel (``munmap``, or trimming the heap's top past
``M_TRIM_THRESHOLD``), and the next step faults the same memory in again, page by page: a
minor fault each 4 KiB, its zeroing, and cold caches after it. Whether it does depends on
the process's heap layout (what else was allocated between the step's blocks), which
differs from process to process, and between settings in ways no capture predicts: measured
(2026-12-05, docs/measurements.md "Page faults of the training step") 0 to 16,300 faults a
step in fresh processes of one script, 1.3–3.3 µs of CPU each, so the step took 32–76 ms of
CPU for the same work; with glibc's trim and dynamic mmap threshold turned off
(``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=…:glibc.malloc.trim_threshold=…``) it took
32–36 ms at every setting and faulted 0–27 times.

The harness records the main thread's minor faults and system CPU per step
(``steps[].minflt``, :func:`calibration.window.clocks`). From them:

* ``per_fault_us``: CPU µs per fault, the median slope of a step's CPU time outside
  ``next()`` on its faults over pairs of unprofiled steps whose faults differ by
  :data:`MIN_FAULTS` or more (Theil–Sen), where most such slopes are positive; else the
  system CPU per fault (the kernel's part only) over the unprofiled steps that faulted;
  measured either way. Only where the unprofiled steps did not re-fault are the profiled
  steps used, the same way, pairs of profiled steps (their profiler cost per step is in both
  steps of a pair): that cost does not always cancel. Measured 2026-12-05 13:41 (the demo's
  capture at 1 worker): 4 of its 8 profiled steps held 54–147 ms of system CPU at 8–12k
  faults (5–12 µs a fault, not a fault's cost), their pairs' slopes had a median of 5.9 µs,
  the fit took 2.99 µs where the unprofiled steps give 1.8 and the capture's four
  replicates 1.40–1.72, and the model's step re-faulted 51.9 ms, more than its 33.1 ms of
  fault-free work. On the demo's earlier captures the unprofiled steps at 1 worker did not
  re-fault while the profiled ones did (27 against 2,000–12,000 faults): there the profiled
  pairs measure it;
* ``max_faults``: the most faults of a step after the first (which faults in everything
  once), the capture's last profiled step (the profiler writes its trace in it) and the step
  after it (the profiler stops in it: 7.6 ms of system CPU for 2,045 faults) left out;
* ``fault_free_us``: the median of CPU − ``per_fault_us`` × faults over the unprofiled steps.

Steps whose system CPU lies far beyond their faults' (:mod:`calibration.sys_spikes`) are left
out of all three: their kernel time is not a fault's cost.

The model's step is its fault-free work plus ``HostParams.refault_share`` × ``max_faults`` ×
``per_fault_us`` (``HostOp.refault_us``): the share is assumed, uniform over 0–1 and drawn per
run, with its middle as the point estimate, since whether a run re-faults is a property of
its process's heap that another setting's capture cannot measure. Replicates (other processes
of the same setting) measure it: :mod:`calibration.refault_runs`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.sidecar import Sidecar
from stepsim.models.warning_record import said

__all__ = ["FAULT_GROWTH_EXPONENT", "FAULT_GROWTH_POINT", "Refault", "refault_fit",
           "slope_per_fault_us", "step_work_us", "MIN_STEPS", "MIN_FAULTS", "PER_FAULT_US", "MIN_PAIRS", "POSITIVE_SHARE", "slope_fit"]

MIN_STEPS = 3
"""Fewest unprofiled steps with fault counts to measure from."""
MIN_FAULTS = 1000
"""Faults (4 MB) a step must re-fault for the re-faulting to be modelled, the spread of the
steps' faults the slope needs, and the faults a step needs for its system CPU to count
towards the fallback (assumed: the system time is the scheduler's tick-sampled split, 4 ms
ticks here; a step without re-faulting has 25–30 here)."""
PER_FAULT_US = (0.2, 20.0)
"""CPU µs per fault outside which a measurement is not a fault's cost (assumed; measured
1.3–3.3 µs here)."""
MIN_PAIRS, POSITIVE_SHARE = 3, 0.8
"""Fewest pairs of steps (of one kind, faults at least :data:`MIN_FAULTS` apart) the slope is
taken from, and the share of their slopes that must be positive (assumed)."""

FAULT_GROWTH_EXPONENT = (0.0, 2.5)
"""Prior range of ``q`` (``HostParams.refault_growth``) in the step's most re-faulted pages at
``r`` times the samples, ``max_faults × r^q``, without a batch-size probe (assumed, drawn
uniformly by the interval; :mod:`scenarios.batch_size`), spanning every exponent measured:

* in sample, bench/fault_growth.py (a 3-conv CNN, fresh processes under glibc's dynamic
  thresholds; docs/measurements.md "Page faults against the batch size"): its main thread's
  most faults a step 1,120-1,984 at 32, 3,458-9,152 at 64, 23,586-36,800 at 128, so from one
  process's most at 32 to another's median at 64 q 1.5-2.3 (or none: some processes re-faulted
  nothing), to 128 1.6-2.4;
* the demo workload and users' CNNs, ×3.3 (×2.9-3.4) from 32 to 64: q ≈ 1.7 (1.5-1.8);
* out of sample, the only check made the way a prediction is (the same CNN captured at 32
  through the harness, run at 64 and 128, one loaded run each): ×1.0 and ×3.0 against the
  capture's most, q ≈ 0 and 0.8.

What a step re-faults is what glibc's malloc gave back to the kernel (``munmap`` of a chunk
over the mmap threshold, which rises with each one freed up to 32 MiB; the heap's free top
trimmed past twice the threshold): with both held (``GLIBC_TUNABLES``) the CNN re-faulted
nothing at batch 16-128, with the threshold held at 32 MiB nothing at 16-64 and 9,217-35,682
pages at 128. Which chunks are given back needs the step's allocation sizes and the heap's
history, which the capture does not record; the point is :data:`FAULT_GROWTH_POINT`."""

FAULT_GROWTH_POINT = 1.0
"""The prior's point for ``q`` (assumed): linear in the samples, what a batch-size what-if
predicted before the prior. The measurements disagree by source, not by noise: out of sample
below 1 (q ≈ 0-0.8), in sample and on the demo above (1.5-2.4), and no capture at one batch
size tells which a user's run is, so the point stays where it was on no evidence either way,
inside the range (its middle, 1.25, is as near), and the disagreement is the interval's."""


@dataclass(frozen=True)
class Refault:
    """One capture's page faults of its training step (µs of main-thread CPU, medians).

    Attributes:
        per_fault_us: CPU per minor fault; ``per_fault_source`` says how it was measured.
        max_faults: the most faults of one step after the first.
        unprofiled_us: CPU per step outside ``next()`` of the unprofiled steps.
        fault_free_us: the same less ``per_fault_us`` × each step's faults.
        n: the unprofiled steps measured.
        touched_faults: the pages the step touches, the most it can re-fault: its first
            step's faults (a fresh heap faults in every page it touches once), or
            ``max_faults`` where more (the first step reused pages the set-up had freed).
    """

    per_fault_us: float
    per_fault_source: str
    max_faults: int
    unprofiled_us: float
    fault_free_us: float
    n: int
    touched_faults: int = 0

    @property
    def refault_us(self) -> float:
        """CPU µs of a step that re-faults as much as the capture's most."""
        return self.max_faults * self.per_fault_us

    @property
    def touched_us(self) -> float:
        """CPU µs of a step that faults in every page it touches (``HostOp.touched_us``)."""
        return max(self.touched_faults, self.max_faults) * self.per_fault_us

    def describe(self, share: float | None = None) -> str:
        """The warning, sized at the model's ``host.refault_share`` ``share`` × the re-faulting
        step's CPU (µs; unsized without a share)."""
        cpu_ms = float(f"{self.refault_us / 1e3:.1f}")       # as the text prints it
        return said(self._text(), "page_faults",
                    effect_us=None if share is None else share * self.refault_us,
                    summary=f"step re-faults up to {cpu_ms:g} ms of CPU: the point adds "
                            f"{'a share' if share is None else f'{share:g}'} × that (the "
                            "interval 0–1 ×)")

    def _text(self) -> str:
        return (f"the training step's page faults (measured): a step re-faulted up to "
                f"{self.max_faults} pages × {self.per_fault_us:.2f} µs ({self.per_fault_source}) "
                f"= {self.refault_us / 1e3:.1f} ms of CPU, whether it does is set by each "
                "process's heap (glibc giving freed memory back to the kernel): the step is its "
                f"fault-free {self.fault_free_us / 1e3:.1f} ms (unprofiled steps' "
                f"{self.unprofiled_us / 1e3:.1f} ms less their faults, {self.n} steps) plus a "
                "share of that drawn uniformly over 0–1 per run (assumed; its middle is the "
                "point)")


def step_work_us(s) -> float:
    """A step record's main-thread CPU µs outside ``next()`` (0 where its clocks say less)."""
    return max(s.cpu_us - s.next_cpu_us, 0.0)


def _per_fault(groups) -> tuple[float, str] | None:
    """``(µs per fault, how)`` from the first of ``groups`` (step rows of one kind each, the
    unprofiled first) whose steps re-faulted and measure it (see the module docstring)."""
    for rows in groups:
        got = _group_per_fault(rows)
        if got is not None:
            return got
    return None


def _slopes(rows) -> np.ndarray:
    """The slopes (CPU µs per fault) of a step's CPU outside ``next()`` on its faults over the
    pairs of ``rows`` whose faults differ by :data:`MIN_FAULTS` or more."""
    x = np.array([s.minflt for s in rows], dtype=float)
    y = np.array([step_work_us(s) for s in rows])
    i, j = np.triu_indices(len(rows), 1)
    far = np.abs(x[j] - x[i]) >= MIN_FAULTS
    return (y[j] - y[i])[far] / (x[j] - x[i])[far]


def slope_fit(slopes: np.ndarray) -> float | None:
    """The median of ``slopes`` where at least :data:`MIN_PAIRS` of them, mostly positive
    (:data:`POSITIVE_SHARE`), give a median inside :data:`PER_FAULT_US`; else None."""
    if slopes.size >= MIN_PAIRS and np.mean(slopes > 0) >= POSITIVE_SHARE:
        slope = float(np.median(slopes))
        if PER_FAULT_US[0] <= slope <= PER_FAULT_US[1]:
            return slope
    return None


def _group_per_fault(rows) -> tuple[float, str] | None:
    """``(µs per fault, how)`` from one group of steps of one kind (within a group, the
    profiler's cost per step is in both steps of a pair); None where none re-faulted."""
    slope = slope_fit(_slopes(rows))
    if slope is not None:
        return slope, "the median slope of a step's CPU on its faults"
    sys_rows = [s for s in rows if s.minflt >= MIN_FAULTS and s.sys_cpu_us is not None]
    faults = sum(s.minflt for s in sys_rows)
    if faults > 0:
        per = sum(s.sys_cpu_us for s in sys_rows) / faults
        if PER_FAULT_US[0] <= per <= PER_FAULT_US[1]:
            return float(per), "system CPU per fault, the kernel's part only"
    return None


def _fit_rows(side: Sidecar | None) -> tuple[list, list] | None:
    """``(kept steps, their unprofiled ones)`` that measure ``side``'s faults (see
    :func:`refault_fit`), or None where it cannot."""
    if side is None or len(side.steps) < 2:
        return None
    steps = side.steps[1:]
    if any(s.minflt is None for s in steps):
        return None
    from stepsim.calibration.sys_spikes import spikes   # it reads MIN_FAULTS here

    # the last profiled step writes the trace, the first after it stops the profiler; a step
    # with a system-CPU spike (calibration.sys_spikes) holds more than its faults' cost
    prof = [i for i, s in enumerate(steps) if s.profiled]
    odd = {prof[-1], prof[-1] + 1} if prof else set()
    spiked = (spikes(side) or [False] * len(side.steps))[1:]
    kept = [s for i, s in enumerate(steps) if i not in odd and not spiked[i]]
    unprof = [s for s in kept if s.profiler_on is False and not s.profiled]
    return (kept, unprof) if len(unprof) >= MIN_STEPS else None


def slope_per_fault_us(side: Sidecar | None) -> float | None:
    """The CPU µs per fault :func:`refault_fit` takes where a slope measures it (the median
    slope of a step's CPU on its faults, the unprofiled steps' pairs, else the profiled
    ones'), for a fit pooled over runs (:func:`calibration.work_gauge.pooled_per_fault`);
    None where no slope does (no fault counts, no step that re-faulted, too few or too mixed
    slopes: the system-CPU fallback is the kernel's part only, another quantity)."""
    rows = _fit_rows(side)
    if rows is None:
        return None
    kept, unprof = rows
    if max(s.minflt for s in kept) < MIN_FAULTS:
        return None
    for group in (unprof, [s for s in kept if s.profiled]):
        slope = slope_fit(_slopes(group))
        if slope is not None:
            return slope
    return None


def refault_fit(side: Sidecar | None) -> Refault | None:
    """The capture's :class:`Refault`, or None where its sidecar has no fault counts (written
    before they were recorded), fewer than :data:`MIN_STEPS` unprofiled steps, no step that
    re-faulted :data:`MIN_FAULTS` pages, or no fault cost it can measure."""
    rows = _fit_rows(side)
    if rows is None:
        return None
    kept, unprof = rows
    most = int(max(s.minflt for s in kept))
    per = (_per_fault([unprof, [s for s in kept if s.profiled]]) if most >= MIN_FAULTS
           else None)
    if per is None:
        return None
    y = np.array([step_work_us(s) for s in unprof])
    x = np.array([s.minflt for s in unprof], dtype=float)
    free = float(np.median(np.maximum(y - per[0] * x, 0.0)))
    return Refault(per[0], per[1], most, float(np.median(y)), free, len(unprof),
                   max(int(side.steps[0].minflt or 0), most))
