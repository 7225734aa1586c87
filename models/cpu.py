"""The host's CPU cores, shared by DataLoader workers, the pin-memory thread and the host
thread that launches work.

The pool is a ``simpy.Resource`` with one server per core. The OS time-slices runnable threads;
we approximate that by splitting CPU work into quanta of ``quantum_us`` µs, each taken from the
pool in FIFO order, so ``k`` runnable threads on ``c < k`` cores each progress at about ``c/k``
of full speed (round robin), as under Linux's fair scheduler.

How much slower each quantum of CPU work runs (the host's speed, co-run interference on the
other cores' busy share, and the cache refill per time slice past the cores) is
:mod:`models.cpu_slowdown`'s: :meth:`CpuPool.slowdown`.

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
(``R ≤ c``) nothing changes, and neither does a team of more threads than cores (``T > c``):
libgomp then spins 100 times, not 300,000, before a waiting thread sleeps (its
``GOMP_SPINCOUNT`` documentation), so the team's threads share the cores without stalling
each other (each advances at its share; documented, not measured here). ``stall`` (``γ``,
``HostParams.team_stall``) makes the exponent
``γ (T − 1)``: the team advances at ``s^(1 + γ (T − 1))``. ``γ = 1`` is the threads holding
cores independently; measured here the team stalls harder than that (a thread that spun past
libgomp's spin count sleeps, and waking it waits for its core too; the scheduler moves
threads between the cores' queues): a 2-thread CNN step beside one always-runnable thread on
2 cores took ×3.77 its wall alone (P10–P90 ×2.21–6.41 over 16 pairs), ``γ`` 2.27 (0.96–3.58),
where ``γ = 1`` gives ×2.25.

That fair pool holds for threads that stay runnable (Linux balances them across the cores). A
thread that *woke* (a DataLoader worker given an index, the pin-memory thread given a batch)
stays on the core's queue it woke on: beside a team it shares one team thread's core, half a
core each, while the other team threads keep theirs (measured, :mod:`models.cpu_place`). While
a team and such a *placed* thread are runnable, more threads than cores, every thread advances
at its share of the core it is on (a team at its slowest thread's share times the others' to
the power ``γ``), per quantum, without the FIFO pool; a caller names a thread (``thread``) to
be placed, and it is balanced again after :data:`~models.cpu_place.BALANCE_AFTER_US` of
runnable time. One-thread models never meet a team: nothing changes for them.
A team's other threads also spin, runnable, through the op's serial parts and for
``spin_us`` after its last region (:func:`models.cpu_spin.spin`, ``host.team_spin_us``,
measured).

A gloo thread's slice after a wake-up (``preempt``) does not queue behind the held quanta: it
runs at once and the holder that owes least absorbs its time at the end of its quantum, as
Linux's wake-up preemption takes a running thread's core (measured: the DDP demo's training
threads waited for a core about as long as the gloo threads ran during backward, 0.80-0.93 ms
against 0.76-0.84 ms a step, :mod:`calibration.gloo_preempt`).

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

from stepsim.models.cpu_place import BALANCE_AFTER_US
from stepsim.models.cpu_queues import CoreQueues
from stepsim.models.cpu_slowdown import slowdown

DEFAULT_QUANTUM_US = 2_000.0
MAX_QUANTA = 1000
"""Most quanta one piece of CPU work is split into: longer work takes longer quanta
(``work_us / MAX_QUANTA``), so the events, and the time, to simulate it stay bounded (a 1e12 µs
op would otherwise be 5e8 quanta); the round robin's error stays within one quantum, 0.1 % of
the work."""


class Oversubscribed(Exception):
    """An adaptive pool's claims passed its cores while work ran as one timeout (the run is
    redone without ``adaptive``)."""


class CpuPool(CoreQueues):
    """``cores`` cores (≥ 1). When ``contended`` is False (no more runnable threads than cores
    can exist) CPU work is a plain timeout, which is exact and much cheaper; with
    ``adaptive`` also while the claims are at most ``cores`` (see the module docstring).

    Raises:
        ValueError: if ``cores`` < 1 or ``quantum_us`` ≤ 0.
    """

    def __init__(self, env: simpy.Environment, cores: int, contended: bool,
                 quantum_us: float = DEFAULT_QUANTUM_US, scale: float = 1.0,
                 interference: float = 0.0, adaptive: bool = False, stall: float = 1.0,
                 spin_us: float = 0.0, oversub: float = 0.0, oversub_ref: float = 0.0):
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
        self.oversub, self.oversub_ref = oversub, oversub_ref   # :mod:`models.cpu_slowdown`
        self.stall = stall
        self.spin_us = spin_us   # a team's spin after its last region (µs, :func:`models.cpu_spin.spin`)
        self.active = 0   # threads inside work(): running or runnable
        self.adaptive = adaptive and contended
        self.claims = 0   # threads that may be runnable (adaptive pools; :meth:`claim`)
        self.timed = 0    # work inside one timeout of an adaptive pool
        self.went_free = 0   # times an adaptive pool's work ran as one timeout (for tests)
        self.init_queues(cores)   # per-core placement (models/cpu_queues.py)
        self.owed: dict = {}       # holder of a quantum -> core time woken threads took (µs)
        self.piece_ends: dict = {}   # held collective pieces' timeouts (models/cpu_pieces.py)
        self.merged_at = -1.0        # the last instant held pieces merged (µs, models/cpu_pieces.py)

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
        """Factor on CPU work now, for work captured at a busy share ``ref`` of other cores
        (:func:`models.cpu_slowdown.slowdown`)."""
        return slowdown(self.scale, self.interference, self.oversub, self.active, self.cores,
                        ref, self.oversub_ref)

    def coupling(self, team: int) -> float:
        """Share of a held quantum in which a thread of a ``team``-thread parallel region
        advances: ``min(1, cores / runnable)^(γ (team − 1))``, with ``γ = 1`` the chance
        that the other team threads hold cores too (each core time-slices its own run
        queue); ``γ`` is ``stall`` (see the module docstring)."""
        if team <= 1 or self.active <= self.cores:
            return 1.0
        return (self.cores / self.active) ** (self._stall_of(team) * (team - 1))

    def _stall_of(self, team: int) -> float:
        """``γ`` for a team of ``team`` threads: 0 for more threads than cores, which libgomp
        barely spins for (see the module docstring)."""
        return self.stall if team <= self.cores else 0.0

    def work(self, work_us: float, ref: float = 0.0, team: int = 1, thread=None, crew=None,
             preempt: bool = False, quanta: int = MAX_QUANTA):
        """Process generator: run ``work_us`` µs of one thread's CPU work (as captured at
        ``ref`` other runnable threads per core) to completion; ``team``: the threads of the
        parallel region it is part of (1: none), whose stalls it spins through (see the
        module docstring); returns the core time in which its work advanced (µs): a team
        thread's spinning is left out, so the caller shows it as waiting for cores.
        ``thread``: a key naming the calling thread (a DataLoader worker's), so that a thread
        that woke is placed on one core's queue beside a team; ``crew``: a team thread's
        placement, (the cores left to hand out, the team's cores) (:meth:`parallel_work`).
        ``preempt``: a thread that just woke (a gloo thread's slice after its wait for a
        core) takes a core from a running thread when every core is held, as Linux's wake-up
        preemption gives it one: it runs at once, and the thread holding the core absorbs
        that time at the end of its quantum (:meth:`_steal`); ``quanta``: most it is cut in."""
        if work_us <= 0:
            return 0.0
        if preempt and self.contended and not self._fluid() and \
                self.resource.count >= self.cores and not self.free():
            return (yield from self._steal(work_us, ref))
        self.active += 1
        place = self._enter(thread, crew and crew[0])
        team_cores = crew[1] if crew else None
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
            quantum = max(self.quantum_us, work_us / max(quanta, 1))
            req = None   # the core a one-thread chunk kept (_keeps)
            try:
                while left > 1e-9:
                    chunk = min(quantum, left)
                    if place is not None and place[0] == "placed" and (
                            self.env.now - self.since[thread] >= BALANCE_AFTER_US):
                        self._unplace(place, team_cores)    # runnable long enough: balanced
                        place = None
                    if self.contended and self._fluid():
                        k = self._rate(place, team_cores)
                        chunk = min(chunk, quantum * k)
                        dt = chunk * self.slowdown(ref)
                        yield self.env.timeout(dt / k)
                    elif self.contended:
                        if req is None:
                            req = self.resource.request()
                            yield req
                        # a quantum of core time, of which the share ``coupling`` advances
                        # the work (the rest spins): the fair scheduler shares core time
                        # (both calls skipped where they give 1 and ``scale``: the hot path)
                        k = 1.0 if team <= 1 else self.coupling(team)
                        chunk = min(chunk, quantum * k)
                        dt = chunk * (self.scale if self.interference <= 0 and self.oversub <= 0
                                      else self.slowdown(ref))
                        self.owed[req] = 0.0
                        try:
                            yield self.env.timeout(dt / k)
                        finally:
                            owed = self.owed.pop(req)
                        if owed > 1e-9:     # preempted meanwhile (:meth:`_steal`)
                            yield self.env.timeout(owed)
                        if not (left - chunk > 1e-9 and self._keeps(team, place)):
                            self.resource.release(req)
                            req = None
                    else:
                        dt = chunk * self.slowdown(ref)
                        yield self.env.timeout(dt)
                    busy += dt
                    left -= chunk
            finally:
                if req is not None:
                    self.resource.release(req)
            return busy
        finally:
            self.active -= 1
            self._unplace(place, team_cores)
            if thread is not None:
                self.last_end[thread] = self.env.now

    def _keeps(self, team: int, place) -> bool:
        """Whether a one-thread chunk keeps its core for its next: nobody queued, no other
        event due now, the FIFO path again (a release and request would run the same)."""
        return team <= 1 and place is None and self.env.peek() > self.env.now and not (
            self.resource.queue or self._fluid())

    def _steal(self, work_us: float, ref: float):
        """``work_us`` of a woken thread's work run at once on a core taken from a holder
        (every core held): the holder of a quantum that owes the least so far owes it, and
        spends it holding its core without advancing at the end of its quantum (it was
        preempted), so the cores' time adds up; a core held by a wall-clock spin
        (:meth:`hold`) owes nothing (the spin ends on time). Returns the core time it ran
        (µs)."""
        self.active += 1
        try:
            dt = work_us * self.slowdown(ref)
            if self.owed:
                victim = min(self.owed, key=self.owed.get)
                self.owed[victim] += dt
            yield self.env.timeout(dt)
            return dt
        finally:
            self.active -= 1

    def hold(self, wall_us: float):
        """Process generator: a thread busy until ``wall_us`` µs of wall-clock time have
        passed (spinning on a clock): while it lasts it takes its turn for a core like any
        runnable thread, and it ends on time whether or not it had one; neither the host's
        speed nor interference stretches it. Returns the core time it held (µs). Its turns are
        quanta of at least ``wall_us / MAX_QUANTA``, as :meth:`work`'s: a straggler's hour
        (``straggler:ms=3600000``, the fix's bound) was 1.8 million 2 ms turns a step, a
        whatif that had not ended after 4 minutes."""
        if wall_us <= 0:
            return 0.0
        env, end = self.env, self.env.now + wall_us
        quantum = max(self.quantum_us, wall_us / MAX_QUANTA)
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
                    dt = min(quantum, end - env.now)
                    yield env.timeout(dt)
                    held += dt
            return held
        finally:
            self.active -= 1

    def parallel_work(self, work_us: float, threads: int, ref: float = 0.0, team: bool = True,
                      thread=None):
        """Process generator: ``work_us`` µs of CPU work split evenly over ``threads`` threads;
        with ``team`` they are one OpenMP team (its regions advance only while every thread
        holds a core: the training step's intra-op threads, measured), else independent
        threads that share the cores fairly (a DataLoader worker's ``threads_per_worker``,
        whose synchronisation nothing measures). Returns one thread's core time in which the
        work advanced (µs, the mean; spinning left out). ``thread``: a key naming the calling
        thread (its ``threads`` independent threads are named from it)."""
        if threads <= 1:
            return (yield from self.work(work_us, ref, thread=thread))
        crew = None
        if team and self.contended and work_us > 0:
            cores = self._place_team(threads)
            crew = (list(cores), cores)    # (cores still to hand out, cores of the team)
        procs = [self.env.process(self.work(
            work_us / threads, ref, threads if team else 1,
            None if team or thread is None else (thread, i), crew)) for i in range(threads)]
        done = yield simpy.AllOf(self.env, procs)
        return sum(done.values()) / threads

