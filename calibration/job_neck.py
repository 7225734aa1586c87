"""A re-measured CPU (gloo) DDP job's bottleneck from its ranks' capture sidecars (a GPU job's
thread blocks on its device as well: not read here): where the training
thread's wall time outside ``next()`` went, per rank, and which share of the job's step names
it.

A rank's step outside ``next()`` is its training thread's CPU, its run-queue wait (runnable,
no core free: ``steps[].run_wait_us``) and the rest, when the thread was blocked. In a DDP
step the thread blocks in the collectives (and a barrier): it waits there for the last rank
to arrive (arrival skew) and for the transfer. Reading that blocked time as a wait for cores
named a straggler's job ``cpu_cores`` (newuser2's 2-rank gloo job with a DataLoader worker,
2026-12-06: a 40 ms straggler's runs, and the baseline's, all measured ``cpu_cores``; over
the scored steps rank 0 blocked 46.0 ms of a 67.8 ms step, its run-queue wait 1.5 ms).

Per job (:func:`job_bottleneck`): the rank that blocked least waited for the transfer alone
(it arrived last), so the job's exposed communication is that rank's blocked time ``b_min``
and the arrival skew of the rank that blocked most ``b_max − b_min``. That rank's step splits
into its ``next()``, its own work (CPU and run-queue wait), ``b_min`` and the skew; the
largest names the job (``arrival_skew``, ``comm``), else its ranks' own bottleneck stands (as the simulator names a
rank's largest critical-path share, :func:`models.bottleneck.name_bottleneck`).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.cpu import waited_for_cores

__all__ = ["RankWaits", "rank_waits", "job_bottleneck"]


class RankWaits:
    """A rank's mean per step (µs) outside ``next()``: ``wall_us``, the training thread's
    ``cpu_us``, its run-queue wait ``run_wait_us`` (None where the sidecar does not record
    it) and ``blocked_us`` (the rest; with no run-queue wait recorded it holds that wait);
    ``next_us``: its wall time in ``next()``."""

    __slots__ = ("wall_us", "cpu_us", "run_wait_us", "blocked_us", "next_us")

    def __init__(self, wall_us: float, cpu_us: float, run_wait_us: float | None,
                 next_us: float = 0.0):
        self.wall_us, self.cpu_us, self.run_wait_us = wall_us, cpu_us, run_wait_us
        self.next_us = next_us
        self.blocked_us = max(wall_us - cpu_us - (run_wait_us or 0.0), 0.0)

    def waited_for_cores(self) -> bool:
        """Whether its thread waited for a core (:func:`calibration.cpu.waited_for_cores` of
        its CPU plus run-queue wait against its CPU); False where the wait is not recorded
        (the wall beyond the CPU is then the collectives' as much as the cores')."""
        return self.run_wait_us is not None and self.cpu_us > 0 and waited_for_cores(
            self.cpu_us + self.run_wait_us, self.cpu_us)


def rank_waits(rows) -> RankWaits | None:
    """:class:`RankWaits` of a rank's scored step records (``steps[]``), the training thread's
    own CPU (not its process's: gloo's threads run beside it); None without records."""
    if not rows:
        return None
    wall = float(np.mean([s.wall_us - s.next_wall_us for s in rows]))
    cpu = float(np.mean([max(s.cpu_us - s.next_cpu_us, 0.0) for s in rows]))
    waits = [s.run_wait_us for s in rows]
    run_wait = float(np.mean(waits)) if all(w is not None for w in waits) else None
    return RankWaits(wall, cpu, run_wait, float(np.mean([s.next_wall_us for s in rows])))


def job_bottleneck(waits: list[RankWaits]) -> str | None:
    """``arrival_skew`` or ``comm`` where that is the largest part of the step of the rank
    that blocked most (see the module docstring); None otherwise, or without every rank's
    waits."""
    if len(waits) < 2 or any(w is None for w in waits):
        return None
    low = min(w.blocked_us for w in waits)
    top = max(waits, key=lambda w: w.blocked_us)
    parts = {"work": top.wall_us - top.blocked_us, "next": top.next_us, "comm": low,
             "arrival_skew": top.blocked_us - low}
    key = max(parts, key=lambda k: parts[k])
    return key if key in ("comm", "arrival_skew") else None
