"""A team's threads spinning at libgomp's barrier (:func:`spin`), beside
:class:`models.cpu.CpuPool`.

libgomp's threads do not sleep when a parallel region ends: they spin, runnable, until the
next region or until their spin count runs out (``GOMP_SPINCOUNT``, 300,000 by default).
Measured here (2026-12-05, a user's CNN on torch's 2 threads, 2 cores, per-thread
``/proc/<pid>/task/*/schedstat``): at 0 workers the team's other thread kept running 7.4–8.0
ms into the main thread's 16 ms ``next()`` (one voluntary switch a step: it slept once), and
beside 1–2 workers, whose ``next()`` is 3–4 ms, it never slept (0.2–0.3 a step): the team holds
its cores through the step's serial parts and hand-overs, which is core time the workers do
not get. ``host.team_spin_us`` is that time (calibration.team_stall.team_spin_from_sidecar).
"""
from __future__ import annotations

import simpy

from stepsim.models.cpu import CpuPool


def spin(pool: CpuPool, threads: int, wall_us: float, stop: simpy.Event | None = None):
    """Process generator: ``threads`` threads of a team spinning at its barrier, runnable
    and advancing nothing, until ``wall_us`` µs of wall have passed or ``stop`` fires
    (the team's next region begins). libgomp's threads spin there between regions, and
    for a while after the last one before they sleep (measured: the team's other thread
    held its core 7.4–8.0 ms into the 0-worker ``next()``, :attr:`HostParams.team_spin_us`),
    so while the main thread runs an op's serial part, or waits in ``next()``, the team
    still takes core time from DataLoader workers. On a pool that cannot be contended it
    does nothing (a spinner then takes no core anyone needs). Each spinner counts as a
    team thread on the core with the fewest team threads (per-core placement) and takes
    its turn for a core like :meth:`CpuPool.hold` in the fair pool."""
    if threads <= 0 or wall_us <= 0 or not pool.contended:
        return
    env, end = pool.env, pool.env.now + wall_us
    cores = []
    for _ in range(threads):
        j = min(range(pool.cores), key=lambda c: (pool.team_loads[c], pool.loads[c]))
        pool.loads[j] += 1
        pool.team_loads[j] += 1
        cores.append(j)
    pool.team_threads += threads
    pool.active += threads
    try:
        procs = [env.process(_spin_one(pool, end, stop)) for _ in range(threads)]
        yield simpy.AllOf(env, procs)
    finally:
        for j in cores:
            pool.loads[j] -= 1
            pool.team_loads[j] -= 1
        pool.team_threads -= threads
        pool.active -= threads


def _spin_one(pool: CpuPool, end: float, stop):
    """One spinner of :func:`spin`: per quantum, in the per-core placement it just holds
    its place; in the fair pool it takes its turn for a core."""
    env = pool.env

    def wait(ev):
        return ev if stop is None else ev | stop

    while end - env.now > 1e-9 and not (stop is not None and stop.triggered):
        dt = min(pool.quantum_us, end - env.now)
        if pool._fluid():
            yield wait(env.timeout(dt))
            continue
        with pool.resource.request() as req:
            got = yield wait(req | env.timeout(end - env.now))
            if req not in got:
                break
            yield wait(env.timeout(dt))
