"""A host training step's wall and CPU time in closed form (:mod:`calibration.cpu` fits with
them and re-exports them): whether its threads waited for a core, its parallel and blocked
parts, a stalled intra-op team's work wall, and the assumed parallel efficiency with its range.
Times in µs.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CORE_WAIT_RATIO", "waited_for_cores", "split_host_step", "stalled_team_wall",
           "parallel_efficiency", "efficiency_range"]

CORE_WAIT_RATIO = 1.15
"""Wall ÷ CPU time of the training step above which its thread(s) waited for a core."""


def waited_for_cores(wall_us: float, cpu_us: float) -> bool:
    """Whether a training step of ``wall_us`` µs that used ``cpu_us`` µs of CPU (all its
    threads) spent part of its wall time with none of its threads on a core (waiting for a
    core, or blocked): its wall time exceeds ``CORE_WAIT_RATIO`` × its CPU time. Like is
    compared with like: a process's CPU time (any number of threads) cannot fall below its
    wall time while one of its threads runs."""
    return wall_us > CORE_WAIT_RATIO * cpu_us


def split_host_step(wall_us: float, cpu_us: float, threads: int) -> tuple[float, float]:
    """``(parallel_fraction, block_fraction)`` of a host step of ``wall_us`` µs (every thread
    with a core) that used ``cpu_us`` µs of CPU on up to ``threads`` threads, in closed form:
    the parallel part ``p`` runs ``threads`` threads and the serial part ``s`` one, so
    ``s + p ≤ wall`` and ``s + threads × p = cpu``; the least parallel part that explains the
    CPU time is taken (``p = (cpu − wall) / (threads − 1)`` when the CPU time exceeds the
    wall), and the wall time no thread's CPU explains is blocking."""
    if wall_us <= 0:
        return 0.0, 0.0
    par = min(max((cpu_us - wall_us) / (threads - 1), 0.0), wall_us) if threads > 1 else 0.0
    serial = min(max(cpu_us - threads * par, 0.0), wall_us - par)
    block = max(wall_us - par - serial, 0.0)
    return par / wall_us, block / wall_us


def stalled_team_wall(wall_us: np.ndarray, cpu_us: np.ndarray, threads: int,
                      gamma: float = 1.0) -> tuple[np.ndarray, float]:
    """``(work wall per step (µs), mean share)`` of a training step on ``threads`` intra-op
    threads captured with fewer cores than runnable threads, in closed form: its threads were
    runnable through the step (working, or spinning at the barriers) and each held a core a
    share ``s = cpu / (threads × wall)`` of it; the team advances at
    ``s^(1 + gamma (threads − 1))`` (:mod:`models.cpu`; ``gamma`` 1: only while all of its
    threads hold cores, each independently), so its wall with a core per thread is ``wall ×``
    that. ``gamma`` is the model's team stall, drawn with the work re-inverted
    (:func:`calibration.sidecar_fit.contended_team_stall`). Measured here (the demo's CNN at
    2 threads, quiet): at ``gamma`` 1, captures at 1, 2 and 4 workers give 38.4, 38.3 and
    38.3 ms, against 35.5 ms measured alone at num_workers=0."""
    share = np.clip(cpu_us / (threads * np.maximum(wall_us, 1e-9)), 0.0, 1.0)
    return wall_us * share ** (1 + gamma * (threads - 1)), float(share.mean())


def parallel_efficiency(threads: int) -> float:
    """The assumed share of a ``threads``-thread parallel part's CPU time that is work, not
    spinning: the middle of what one capture allows, 1 / ``threads`` (one thread did all the
    work, the others spun) to 1 (no thread spun). Measured here once (the demo's CNN, 2
    threads): 0.70 (48.2 ms on one thread against 35.5 ms wall and 67.2 ms CPU on two)."""
    return (1 + 1 / threads) / 2


def efficiency_range(threads: int) -> tuple[float, float]:
    """Factor range on :func:`parallel_efficiency` that spans 1 / ``threads`` to 1 (a hair
    under, so a draw stays a valid share)."""
    e = parallel_efficiency(threads)
    return (1 / threads) / e, (1 - 1e-9) / e
