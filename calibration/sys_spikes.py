"""System-CPU spikes of the training step: kernel time its page faults do not explain.

The harness records the main thread's system CPU and minor faults per step
(``steps[].sys_cpu_us``, ``steps[].minflt``: :func:`calibration.window.clocks`). A step's
system CPU is mostly its faults' (1.0–2.4 µs of kernel time a fault here, the 4 ms tick at
which the kernel samples it aside), but some steps hold far more at the same fault count:
the demo's capture of 2026-12-05 14:00 (1 worker) had 3 of its 8 profiled steps at 50, 208
and 163 ms of system CPU on 10,267 faults each, where its unprofiled steps held 8–23 ms on
8–10k, and the step after the window (the profiler's stop) 220 ms. What the kernel did there
is not measured (no reclaim or compaction was counted in ``/proc/vmstat``; 3 captures of the
demo at 14:51–15:01 had none); over the demo's captures of 2026-12-05 they came in 2.2 % of
the profiled steps, 7.8 % of the profiler's stop steps and 1.0 % of the unprofiled steps after
the window, in 2 of 6 demos (docs/measurements.md "Page faults of the training step").

Such a step is not the step's work, nor the profiler's per-op cost that
:mod:`calibration.profiler_overhead` scales away (a ratio of medians, which one spike in a
few steps does not move), yet the profiled window's mean carries it whole: the 14:00 capture's
trace gave a mean step of 99 ms against a median of 54 and unprofiled steps of 48. Calibration
therefore takes the training step's duration from the profiled steps without a spike
(:func:`spikes`) and measures the profiler factor on the steps without one on both sides.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.page_faults import MIN_FAULTS, step_work_us
from stepsim.calibration.sidecar import Sidecar

__all__ = ["spikes", "kernel_per_fault_us", "SPIKE_US", "SPIKE_SHARE", "spike_note"]

SPIKE_US = 16_000.0
"""System CPU (µs) past a step's faults × the kernel's cost per fault above which the step
holds a spike (assumed: 4 of the kernel's 4 ms ticks; over the demo's 3,500 steps of
2026-12-05 the excess of the steps without one lay within −8…+8 ms at P5–P95, the profiler's
warm-up steps' under 11.5 ms, the spikes' 35–220 ms)."""
SPIKE_SHARE = 0.25
"""... or above this share of the unprofiled steps' median CPU outside ``next()``, where that
is larger (assumed: a longer step's system time spreads more)."""



def kernel_per_fault_us(rows) -> float:
    """The kernel's CPU µs per fault: the median of system CPU ÷ faults over ``rows`` (step
    records) that faulted :data:`calibration.page_faults.MIN_FAULTS` pages or more; 0.0 where
    none did (measured)."""
    per = [s.sys_cpu_us / s.minflt for s in rows
           if s.minflt is not None and s.minflt >= MIN_FAULTS and s.sys_cpu_us is not None]
    return float(np.median(per)) if per else 0.0


def spikes(side: Sidecar | None) -> list[bool] | None:
    """Per step of ``side.steps``, whether its system CPU exceeds its faults × the kernel's
    cost per fault (:func:`kernel_per_fault_us` of the unprofiled steps after the first, else
    of the profiled ones without a spike, a profiled step's of the others) by more than
    :data:`SPIKE_US` or :data:`SPIKE_SHARE` of the unprofiled steps' median CPU outside
    ``next()``. None where the sidecar has no steps' system CPU and faults (written before
    they were recorded)."""
    if side is None or len(side.steps) < 2:
        return None
    steps = side.steps
    if any(s.sys_cpu_us is None or s.minflt is None for s in steps[1:]):
        return None
    unprof = [s for s in steps[1:] if not s.profiler_on and not s.profiled]
    work = float(np.median([step_work_us(s) for s in unprof])) if unprof else 0.0
    limit = max(SPIKE_US, SPIKE_SHARE * work)
    per = kernel_per_fault_us(unprof)
    if per:
        return [s.sys_cpu_us - per * s.minflt > limit if s.sys_cpu_us is not None
                and s.minflt is not None else False for s in steps]
    # no unprofiled step faulted MIN_FAULTS pages: the profiled steps price the faults, a step's
    # own system CPU never its own, nor a spiked step's anyone's (live captures under load with
    # one profiled step past MIN_FAULTS: test_sys_spikes' 200 ms there priced its faults at
    # 175 µs each, which hid it, and in another run the start-up step's spike too)
    spiked: set[int] = set()
    for _ in range(2):   # each priced on the others, then on the others without a spike
        calm = [s for s in steps if s.profiled and id(s) not in spiked]
        flags = [s.sys_cpu_us is not None and s.minflt is not None and s.sys_cpu_us
                 - kernel_per_fault_us([r for r in calm if r is not s]) * s.minflt > limit
                 for s in steps]
        spiked = {id(s) for s, x in zip(steps, flags) if x}
    return flags


def spike_note(dropped: list[tuple[int, float]], kept: int) -> str:
    """calibrate's line for the profiled steps left out of the training step's duration:
    ``dropped`` their (step number, system CPU µs), ``kept`` the profiled steps left."""
    nums = ", ".join(str(n) for n, _ in dropped)
    ms = ", ".join(f"{us / 1e3:.0f}" for _, us in dropped)
    return (f"profiled step(s) {nums} held {ms} ms of system CPU, far beyond their page "
            f"faults' (calibration.sys_spikes): the training step's duration and the "
            f"profiler's cost are taken from the other {kept} profiled steps "
            "and the unprofiled ones without such a spike")


def calm_window(side: Sidecar | None, prof: list, n_trace: int
                ) -> tuple[np.ndarray | None, str | None]:
    """``(mask, note)`` over the trace's ``n_trace`` calibrated steps, which are the sidecar's
    profiled steps ``prof`` one for one: True for a step without a spike (:func:`spikes`).
    ``(None, None)`` where none spiked or the two cannot be matched step for step;
    ``(None, note)`` where fewer than 2 are left without one (the window is kept whole, and
    the note says so)."""
    flags = spikes(side)
    if flags is None or not prof or len(prof) != n_trace:
        return None, None
    of = {id(s): x for s, x in zip(side.steps, flags)}
    mask = np.array([not of.get(id(s), False) for s in prof])
    if mask.all():
        return None, None
    number = {id(s): i for i, s in enumerate(side.steps)}
    dropped = [(number[id(s)], float(s.sys_cpu_us)) for s, k in zip(prof, mask) if not k]
    if mask.sum() < 2:
        return None, (f"{len(dropped)} of the {len(prof)} profiled steps held system CPU far "
                      "beyond their page faults' (calibration.sys_spikes): too few are left "
                      "without, so the training step keeps them and is too long by their "
                      "excess (profile more steps)")
    return mask, spike_note(dropped, int(mask.sum()))
