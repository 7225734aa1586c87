"""What a DDP capture at torch's default threads measures of the one-thread job: the ranks'
training threads' CPU in their least-spun steps, and gloo's own threads' CPU.

The physics (fresh8's 2-rank gloo transformer on this 2-core machine, 2 intra-op threads a
rank, 1 worker a rank, 2026-12-07; every figure from its sidecars, runs alone under the lock):
R ranks × T threads on k cores, R·T > k. torch's OpenMP team spins at each parallel region
while one of its threads waits for a core, so the team's second thread burns as much CPU as
the training thread: over the profiled steps of 7 runs the thread named like the training
thread used 177, 188, 449, 438, 577, 573, 154 ms a step against the training thread's 174,
181, 444, 435, 576, 569, 149 (ratio 1.00–1.04), and a job step takes about R·T × (the training
thread's CPU) ÷ k of wall (4 × 174 ÷ 2 = 348 ms against 391 measured; 1,151 against 1,166;
175 against 192): the cores are busy with the teams, most of it spin. The spin comes in two
modes (the training thread's CPU a step 43–130 ms, or 230–830 ms), and a run's mix of the two
sets its mean step (run means of one setting 2.1× apart).

The one-thread rank does the same work with no team: its training thread's CPU a step is the
work W₁ alone. A T-thread step's training thread does the serial part S, its share P/T of the
parallel part and its spin: C = S + P/T + spin, with W₁ = S + P. So the least-spun steps bound
W₁ from below where P is small against S; measured, the quickest tenth of the unprofiled steps
at 2 threads (51–61 ms over 6 runs, median 55.5) sits 7 % under the one-thread runs' quickest
tenth (56–67, median 59.5), and the mean of the fast mode (the steps under
:data:`models.rank_threads.HEAVY_TAIL` × the quickest tenth: 76 ms on the capture) 7 % over the
one-thread runs' mean (64–81, 71 over 5 runs, 10 rank-runs). The model takes W₁ between the two
(their geometric mean), and the intervals draw it over the two ends × the host's stated
run-to-run range (``meta.ranges``; the spun capture's own run-to-run speeds are the spin's):
both ends are measured, which of them is nearer is not (it depends on P/S and on the fast
mode's residual spin).

Gloo's own CPU is measured apart from the team's by thread name
(:func:`calibration.gloo_cpu.gloo_own_cost`). Times are µs.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.gloo_cpu import gloo_own_cost
from stepsim.models.rank_threads import HEAVY_TAIL

__all__ = ["ONE_THREAD_CPU", "ONE_THREAD_BRACKET", "ONE_THREAD_COMM", "one_thread_cpu",
           "one_thread_notes"]

ONE_THREAD_CPU = "one_thread_cpu_us"
"""``meta.notes`` key: W₁, the one-thread training thread's CPU a step (µs), the geometric
mean of the two ends of :data:`ONE_THREAD_BRACKET`; ``meta.ranges`` varies it at
``meta.notes.one_thread_cpu_us``."""

ONE_THREAD_BRACKET = "one_thread_cpu_bracket_us"
"""``meta.notes`` key: ``"LOW,HIGH"``, the training thread's CPU a step (µs, mean over the
ranks) in the quickest tenth of the capture's unprofiled steps and in their fast mode."""

ONE_THREAD_COMM = "one_thread_comm_cpu"
"""``meta.notes`` key: ``"A,K"``, gloo's own threads' CPU per collective (µs) and per MiB."""

QUICKEST = 0.1
"""The share of the unprofiled steps read as the least spun (the quickest tenth)."""


def one_thread_cpu(sidecars: dict) -> tuple[float, float] | None:
    """``(low, high)`` µs: over the ranks' sidecars, the mean training-thread CPU a step of the
    quickest tenth of their unprofiled steps, and of their fast mode (the steps within
    :data:`HEAVY_TAIL` × that); None where a rank has fewer than 10 unprofiled steps."""
    lows, highs = [], []
    for side in sidecars.values():
        cpu = np.sort([s.cpu_us for s in side.steps[1:] if not s.profiled and s.cpu_us > 0])
        if cpu.size < 10:
            return None
        low = float(cpu[:max(int(cpu.size * QUICKEST), 1)].mean())
        lows.append(low)
        highs.append(float(cpu[cpu <= HEAVY_TAIL * low].mean()))
    return (float(np.mean(lows)), float(np.mean(highs))) if lows else None


def one_thread_notes(ranks: dict, sidecars: dict, team: int, oversubscribed: bool,
                     host_range: tuple[float, float]) -> tuple[dict, dict]:
    """``(notes, ranges)`` a one-thread what-if reads (:data:`ONE_THREAD_CPU` and its range,
    :data:`ONE_THREAD_BRACKET`, :data:`ONE_THREAD_COMM`), for a job whose ranks ran ``team``
    > 1 intra-op threads and oversubscribed their host's cores; ``host_range``: the host's
    stated run-to-run range. Empty where that is not so or the sidecars lack the steps or
    the threads' CPU."""
    if team < 2 or not oversubscribed or not sidecars:
        return {}, {}
    cpu, comm = one_thread_cpu(sidecars), gloo_own_cost(ranks, sidecars)
    if cpu is None or comm is None or cpu[0] <= 0:
        return {}, {}
    mid = float(np.sqrt(cpu[0] * cpu[1]))
    return ({ONE_THREAD_CPU: mid, ONE_THREAD_BRACKET: f"{cpu[0]:.1f},{cpu[1]:.1f}",
             ONE_THREAD_COMM: f"{comm[0]:.1f},{comm[1]:.1f}"},
            {f"meta.notes.{ONE_THREAD_CPU}": (cpu[0] / mid * host_range[0],
                                              cpu[1] / mid * host_range[1])})
