"""The released ranks' training threads on one core after a barrier (issue 12: the straggler +
barrier row), beside :class:`models.cpu.CpuPool`.

When a ``dist.barrier()`` releases the ranks of one host, each rank's training thread is woken
by its own gloo thread and the wake-up puts it on that thread's core: measured on the DDP
demo's job (``bench/ddp_barrier_cores.py``, 2 cores, 2026-12-07), the two training threads
sat on one core for 0.63-0.70 of the backward after a 40 ms barrier (and 0.65-0.70 after one
without a wait), each holding half of it there (run-queue wait 0.49-0.53 of the wall), while
without a barrier they never did (the straggler's backward ran while the other rank slept).
The fair pool (:class:`models.cpu.CpuPool`) would spread them over both cores and charge
them only the gloo threads' slices.

:func:`co_core_work` runs a released thread's first CPU work there: one core of the pool is
held for the shared queue while any released thread has work on it, and the threads on it
take turns of :data:`SLICE_US` (FIFO: with ``m`` of them each advances at ``1/m``); a
thread alone on it runs at full speed. How much of each thread's CPU after the barrier runs
there is ``comm.barrier_co_core_us`` (set by the barrier what-if,
:func:`scenarios.ddp_whatifs.insert_barrier`). Times are µs.
"""
from __future__ import annotations

import simpy

__all__ = ["CoCore", "co_core_work", "SLICE_US"]

SLICE_US = 750.0
"""A turn on the shared core (µs): Linux's EEVDF base slice, ``sched_base_slice_ns`` 750,000 by
default since 6.6 (documented, not measured here; the kernel here is 6.18). The pool's 2 ms
quantum would let the first thread run a whole short share before the second's first turn."""


class CoCore:
    """The one core the released threads share: its queue, and the pool core held for it."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.queue = simpy.Resource(env, capacity=1)
        self.users = 0
        self.ready: simpy.Event | None = None
        self.done: simpy.Event | None = None

    def _hold(self, pool):
        """Process: hold one pool core from the first user's arrival until the last leaves."""
        with pool.resource.request() as req:
            yield req
            self.ready.succeed()
            yield self.done


def co_core_work(pool, work_us: float, ref: float = 0.0):
    """Process generator: ``work_us`` µs of a released training thread's CPU work run on the
    core it shares with the other released threads (see the module docstring); returns the
    core time in which it advanced (µs). On a pool that cannot be contended, plain
    :meth:`~models.cpu.CpuPool.work` (no thread waits for a core there)."""
    if work_us <= 0:
        return 0.0
    if not pool.contended:
        return (yield from pool.work(work_us, ref))
    co = getattr(pool, "co_core", None)
    if co is None:
        co = pool.co_core = CoCore(pool.env)
    if co.users == 0:
        co.ready, co.done = pool.env.event(), pool.env.event()
        pool.env.process(co._hold(pool))
    co.users += 1
    pool.active += 1
    ready, done = co.ready, co.done
    try:
        if not ready.processed:
            yield ready
        left, busy = work_us, 0.0
        while left > 1e-9:
            chunk = min(SLICE_US, left)
            with co.queue.request() as req:
                yield req
                dt = chunk * pool.slowdown(ref)
                yield pool.env.timeout(dt)
            busy += dt
            left -= chunk
        return busy
    finally:
        pool.active -= 1
        co.users -= 1
        if co.users == 0:
            done.succeed()
