"""The host's CPU cores, shared by DataLoader workers, the pin-memory thread and the host
thread that launches work.

The pool is a ``simpy.Resource`` with one server per core. The OS time-slices runnable threads;
we approximate that by splitting CPU work into quanta of ``quantum_us`` µs, each taken from the
pool in FIFO order, so ``k`` runnable threads on ``c < k`` cores each progress at about ``c/k``
of full speed (round robin), as under Linux's fair scheduler.
"""
from __future__ import annotations

import simpy

from stepsim.simcore.record import Recorder, Span

DEFAULT_QUANTUM_US = 2_000.0


class CpuPool:
    """``cores`` cores (≥ 1). When ``contended`` is False (no more runnable threads than cores
    can exist) CPU work is a plain timeout, which is exact and much cheaper.

    Raises:
        ValueError: if ``cores`` < 1 or ``quantum_us`` ≤ 0.
    """

    def __init__(self, env: simpy.Environment, cores: int, contended: bool,
                 quantum_us: float = DEFAULT_QUANTUM_US):
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        if quantum_us <= 0:
            raise ValueError(f"quantum_us must be > 0, got {quantum_us}")
        self.env = env
        self.cores = cores
        self.contended = contended
        self.quantum_us = quantum_us
        self.resource = simpy.Resource(env, capacity=cores)

    def work(self, work_us: float):
        """Process generator: run ``work_us`` µs of single-threaded CPU work to completion."""
        if work_us <= 0:
            return
        if not self.contended:
            yield self.env.timeout(work_us)
            return
        left = work_us
        while left > 1e-9:
            with self.resource.request() as req:
                yield req
                chunk = min(self.quantum_us, left)
                yield self.env.timeout(chunk)
                left -= chunk

    def parallel_work(self, work_us: float, threads: int):
        """Process generator: ``work_us`` µs of CPU work split evenly over ``threads`` threads."""
        if threads <= 1:
            yield from self.work(work_us)
            return
        procs = [self.env.process(self.work(work_us / threads)) for _ in range(threads)]
        yield simpy.AllOf(self.env, procs)


def record_cpu_work(rec: Recorder, lane: str, name: str, category: str, start_us: float,
                    work_us: float, end_us: float, step: int, rank: int) -> None:
    """Record ``work_us`` µs of CPU work that ran from ``start_us`` to ``end_us`` on the shared
    pool: a busy span for the work, then a ``cpu_cores`` wait for the rest (the time the thread
    was runnable without a core; its quanta are spread over the interval, shown at the end)."""
    work_us = min(work_us, end_us - start_us)
    if work_us > 0:
        rec.span(Span(lane, name, "busy", start_us, work_us, step, rank, category=category))
    if end_us - start_us - work_us > 1e-6:
        rec.span(Span(lane, name, "wait", start_us + work_us, end_us - start_us - work_us, step,
                      rank, cause="cpu_cores"))
