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

:func:`co_core_work` runs a released thread's CPU work there: one core of the pool is held
for the shared queue while any released thread has work on it, and the threads on it take
turns of :data:`SLICE_US` (FIFO: with ``m`` of them each advances at ``1/m``); a thread alone
on it (the first released, before the other's late release) runs at full speed. The threads
leave it for the fair pool ``comm.barrier_co_core_us`` µs of wall after the second joined
(the scheduler's balancing spreads them; set by the barrier what-if,
:func:`scenarios.ddp_whatifs.insert_barrier`), or at their next wait for a collective.
Times are µs.
"""
from __future__ import annotations

import simpy

__all__ = ["CoCore", "co_core_work", "SLICE_US"]

SLICE_US = 750.0
"""A turn on the shared core (µs): Linux's EEVDF base slice, ``sched_base_slice_ns`` 750,000 by
default since 6.6 (documented, not measured here; the kernel here is 6.18). The pool's 2 ms
quantum would let the first thread run a whole short share before the second's first turn."""


class CoCore:
    """The one core the released threads share: its queue, the pool core held for it, and
    when a second thread joined it (``paired``, µs; None while one is alone on it)."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.queue = simpy.Resource(env, capacity=1)
        self.users = 0
        self.paired: float | None = None
        self.ready: simpy.Event | None = None
        self.done: simpy.Event | None = None

    def _hold(self, pool):
        """Process: hold one pool core from the first user's arrival until the last leaves."""
        with pool.resource.request() as req:
            yield req
            self.ready.succeed()
            yield self.done


def co_core_work(pool, work_us: float, ref: float = 0.0, shared_us: float = 0.0):
    """Process generator: a released training thread's ``work_us`` µs of CPU work run on the
    core it shares with the other released threads (see the module docstring) until
    ``shared_us`` µs after a second thread joined it (then the scheduler spreads them);
    returns ``(core µs in which it advanced, work µs left for the pool)``. A thread alone on
    it runs at full speed. On a pool that cannot be contended: ``(0, work_us)``, the pool's
    plain work (no thread waits for a core there)."""
    if work_us <= 0 or not pool.contended or shared_us <= 0:
        return 0.0, max(work_us, 0.0)
    env = pool.env
    co = getattr(pool, "co_core", None)
    if co is None:
        co = pool.co_core = CoCore(env)
    if co.users == 0:
        co.ready, co.done, co.paired = env.event(), env.event(), None
        env.process(co._hold(pool))
    co.users += 1
    if co.users >= 2 and co.paired is None:
        co.paired = env.now
    pool.active += 1
    ready, done = co.ready, co.done
    left, busy = work_us, 0.0
    try:
        if not ready.processed:
            yield ready
        while left > 1e-9:
            with co.queue.request() as req:
                yield req
                end = None if co.paired is None else co.paired + shared_us
                if end is not None and env.now >= end - 1e-9:
                    break
                slow = pool.slowdown(ref)
                chunk = min(SLICE_US, left)
                if end is not None:
                    chunk = min(chunk, (end - env.now) / slow)
                dt = chunk * slow
                yield env.timeout(dt)
            busy += dt
            left -= chunk
        return busy, left
    finally:
        pool.active -= 1
        co.users -= 1
        if co.users == 0:
            done.succeed()
