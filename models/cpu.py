"""The host's CPU cores, shared by DataLoader workers, the pin-memory thread and the host
thread that launches work.

The pool is a ``simpy.Resource`` with one server per core. The OS time-slices runnable threads;
we approximate that by splitting CPU work into quanta of ``quantum_us`` µs, each taken from the
pool in FIFO order, so ``k`` runnable threads on ``c < k`` cores each progress at about ``c/k``
of full speed (round robin), as under Linux's fair scheduler.

Two factors change how long a unit of CPU work takes (both 1 / 0 by default):

* ``scale``: the host's speed in this run relative to the capture (run-to-run noise);
* ``interference``: co-run interference (shared caches, memory bandwidth). With ``o`` other
  runnable threads per core (threads inside :meth:`CpuPool.work`, waiting for a core or
  not, divided by ``cores``), work runs ``(1 + interference × o) / (1 + interference × ref)``
  times slower, ``ref`` being the load its duration was captured under, so a duration
  replayed at its own capture's load is unchanged. The factor is taken per quantum.

Intra-op parallel work (:meth:`CpuPool.parallel_work`, torch's OpenMP team of ``T`` threads)
advances only while every thread of the team holds a core: a parallel region ends with its
slowest thread, and torch's ops are many short regions (far shorter than a time slice), so
a team thread that lost its core to a DataLoader worker stalls every region until it is
scheduled again, while the others spin at the barrier (libgomp's default wait policy spins
before it sleeps, so a waiting thread keeps its core and stays runnable). Linux time-slices
each core's run queue on its own, so with ``R`` runnable threads on ``c < R`` cores each
thread holds a core a share ``s = c / R`` of the time, independently of the others: the team
advances at ``s^T`` of full speed, not ``s``. Each quantum a team thread holds a core
advances its work by ``s^(T-1)`` of the quantum (the chance that the rest of the team holds
cores too); the rest of the quantum it spins, which is core time the workers do not get
(it is in the process's CPU time, as the capture measures it). Without contention
(``R ≤ c``) nothing changes. ``stall`` (``γ``, ``HostParams.team_stall``) makes the exponent
``γ (T − 1)``: the team advances at ``s^(1 + γ (T − 1))``. ``γ = 1`` is the threads holding
cores independently; measured here the team stalls harder than that (a thread that spun past
libgomp's spin count sleeps, and waking it waits for its core too; the scheduler moves
threads between the cores' queues): a 2-thread CNN step beside one always-runnable thread on
2 cores took ×3.77 its wall alone (P10–P90 ×2.21–6.41 over 16 pairs), ``γ`` 2.27 (0.96–3.58),
where ``γ = 1`` gives ×2.25.

A pool that can be contended need not be at every instant: a DataLoader worker with no index
left is blocked, not runnable. With ``adaptive``, the pool counts *claims*, the threads that
may be runnable now (the host's and the backend's threads all along, a worker's from the
index it is sent until it has none left, :meth:`CpuPool.claim`). While claims are at most
``cores`` no thread can wait for a core, so a quantum is always granted at once and the work
ends when a plain timeout of it would: the pool then runs work as one timeout and the host
thread runs ahead (:func:`models.host.host_process`), the instants unchanged. Claims rise only
when an index is sent, from the host thread's ``next()``, where it has caught up; if they then
pass ``cores`` while some work is inside such a timeout (which a quantum would have cut),
:class:`Oversubscribed` is raised and the caller runs the model again without ``adaptive``.
"""
from __future__ import annotations

import simpy

from stepsim.simcore.record import Recorder, Span

DEFAULT_QUANTUM_US = 2_000.0
MAX_QUANTA = 1000
"""Most quanta one piece of CPU work is split into: longer work takes longer quanta
(``work_us / MAX_QUANTA``), so the events, and the time, to simulate it stay bounded (a 1e12 µs
op would otherwise be 5e8 quanta); the round robin's error stays within one quantum, 0.1 % of
the work."""


class Oversubscribed(Exception):
    """An adaptive pool's claims passed its cores while work ran as one timeout (the run is
    redone without ``adaptive``)."""


class CpuPool:
    """``cores`` cores (≥ 1). When ``contended`` is False (no more runnable threads than cores
    can exist) CPU work is a plain timeout, which is exact and much cheaper; with
    ``adaptive`` also while the claims are at most ``cores`` (see the module docstring).

    Raises:
        ValueError: if ``cores`` < 1 or ``quantum_us`` ≤ 0.
    """

    def __init__(self, env: simpy.Environment, cores: int, contended: bool,
                 quantum_us: float = DEFAULT_QUANTUM_US, scale: float = 1.0,
                 interference: float = 0.0, adaptive: bool = False, stall: float = 1.0):
        if cores < 1:
            raise ValueError(f"cores must be >= 1, got {cores}")
        if quantum_us <= 0:
            raise ValueError(f"quantum_us must be > 0, got {quantum_us}")
        self.env = env
        self.cores = cores
        self.contended = contended
        self.quantum_us = quantum_us
        self.resource = simpy.Resource(env, capacity=cores)
        self.scale, self.interference = scale, interference
        self.stall = stall
        self.active = 0   # threads inside work(): running or runnable
        self.adaptive = adaptive and contended
        self.claims = 0   # threads that may be runnable (adaptive pools; :meth:`claim`)
        self.timed = 0    # work inside one timeout of an adaptive pool
        self.went_free = 0   # times an adaptive pool's work ran as one timeout (for tests)

    def claim(self, threads: int) -> None:
        """``threads`` more threads may be runnable from now on (fewer when negative).

        Raises:
            Oversubscribed: the claims pass ``cores`` while work runs as one timeout.
        """
        self.claims += threads
        if threads > 0 and self.timed and self.claims > self.cores:
            raise Oversubscribed(f"{self.claims} threads may run on {self.cores} cores")

    def free(self) -> bool:
        """Whether no thread can wait for a core until the claims rise (CPU work is then a
        plain timeout, slowed by ``scale`` only)."""
        return self.interference <= 0 and (
            not self.contended or self.adaptive and self.claims <= self.cores)

    def slowdown(self, ref: float) -> float:
        """Factor on CPU work now, for work captured at ``ref`` other threads per core."""
        if self.interference <= 0:
            return self.scale
        others = max(self.active - 1, 0) / self.cores
        return self.scale * (1 + self.interference * others) / (1 + self.interference * ref)

    def coupling(self, team: int) -> float:
        """Share of a held quantum in which a thread of a ``team``-thread parallel region
        advances: ``min(1, cores / runnable)^(γ (team − 1))``, with ``γ = 1`` the chance
        that the other team threads hold cores too (each core time-slices its own run
        queue); ``γ`` is ``stall`` (see the module docstring)."""
        if team <= 1 or self.active <= self.cores:
            return 1.0
        return (self.cores / self.active) ** (self.stall * (team - 1))

    def work(self, work_us: float, ref: float = 0.0, team: int = 1):
        """Process generator: run ``work_us`` µs of one thread's CPU work (as captured at
        ``ref`` other runnable threads per core) to completion; ``team``: the threads of the
        parallel region it is part of (1: none), whose stalls it spins through (see the
        module docstring); returns the core time in which its work advanced (µs): a team
        thread's spinning is left out, so the caller shows it as waiting for cores."""
        if work_us <= 0:
            return 0.0
        self.active += 1
        try:
            if self.free():
                busy = work_us * self.scale
                if not self.contended:
                    yield self.env.timeout(busy)
                    return busy
                self.timed += 1
                self.went_free += 1
                try:
                    yield self.env.timeout(busy)
                finally:
                    self.timed -= 1
                return busy
            left, busy = work_us, 0.0
            quantum = max(self.quantum_us, work_us / MAX_QUANTA)
            while left > 1e-9:
                chunk = min(quantum, left)
                if self.contended:
                    with self.resource.request() as req:
                        yield req
                        # a quantum of core time, of which the share ``coupling`` advances
                        # the work (the rest spins): the fair scheduler shares core time
                        k = self.coupling(team)
                        chunk = min(chunk, quantum * k)
                        dt = chunk * self.slowdown(ref)
                        yield self.env.timeout(dt / k)
                else:
                    dt = chunk * self.slowdown(ref)
                    yield self.env.timeout(dt)
                busy += dt
                left -= chunk
            return busy
        finally:
            self.active -= 1

    def hold(self, wall_us: float):
        """Process generator: a thread busy until ``wall_us`` µs of wall-clock time have
        passed (spinning on a clock): while it lasts it takes its turn for a core like any
        runnable thread, and it ends on time whether or not it had one; neither the host's
        speed nor interference stretches it. Returns the core time it held (µs)."""
        if wall_us <= 0:
            return 0.0
        env, end = self.env, self.env.now + wall_us
        if not self.contended:
            self.active += 1
            try:
                yield env.timeout(wall_us)
            finally:
                self.active -= 1
            return wall_us
        held = 0.0
        self.active += 1
        try:
            while end - env.now > 1e-9:
                with self.resource.request() as req:
                    got = yield req | env.timeout(end - env.now)
                    if req not in got:
                        break           # the deadline passed while it waited for a core
                    dt = min(self.quantum_us, end - env.now)
                    yield env.timeout(dt)
                    held += dt
            return held
        finally:
            self.active -= 1

    def parallel_work(self, work_us: float, threads: int, ref: float = 0.0, team: bool = True):
        """Process generator: ``work_us`` µs of CPU work split evenly over ``threads`` threads;
        with ``team`` they are one OpenMP team (its regions advance only while every thread
        holds a core: the training step's intra-op threads, measured), else independent
        threads that share the cores fairly (a DataLoader worker's ``threads_per_worker``,
        whose synchronisation nothing measures). Returns one thread's core time in which the
        work advanced (µs, the mean; spinning left out)."""
        if threads <= 1:
            return (yield from self.work(work_us, ref))
        procs = [self.env.process(self.work(work_us / threads, ref, threads if team else 1))
                 for _ in range(threads)]
        done = yield simpy.AllOf(self.env, procs)
        return sum(done.values()) / threads


def record_cpu_work(rec: Recorder, lane: str, name: str, category: str, start_us: float,
                    work_us: float, end_us: float, step: int, rank: int) -> None:
    """Record ``work_us`` µs of CPU work that ran from ``start_us`` to ``end_us`` on the shared
    pool: a busy span for the work, then a ``cpu_cores`` wait for the rest (the time the thread
    was runnable without a core; its quanta are spread over the interval, shown at the end)."""
    if not rec.keeps:
        return
    work_us = min(work_us, end_us - start_us)
    if work_us > 0:
        rec.span(Span(lane, name, "busy", start_us, work_us, step, rank, category=category))
    if end_us - start_us - work_us > 1e-6:
        rec.span(Span(lane, name, "wait", start_us + work_us, end_us - start_us - work_us, step,
                      rank, cause="cpu_cores"))
