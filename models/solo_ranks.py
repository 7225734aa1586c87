"""Ranks that meet only at collectives, solved without events.

When every rank of a job is solvable on its own (:func:`models.solo.solvable`: a host thread
that cannot lose its core, no DataLoader workers) and the ranks interact only through their
collectives, every instant is still a max-plus function of the
durations: a collective (one per rank, keyed by step and task) starts when the last rank has
entered it (the max of the entries, each rank's ``ready + gap_us``) and lasts its ``dur_us``
on each rank (the transfer), as the SimPy :class:`~models.device.Barrier` has it. This module
solves all ranks together, each with :mod:`models.solo`'s semantics:

* each rank's host thread (:class:`models.solo_host.HostThread`, as :func:`models.solo.solve`
  walks it) is a generator that walks its ops on its own clock and yields where
  it waits for what other ranks decide (a sync or launch-queue slot on a collective whose last
  entry is not known yet);
* each rank's streams advance as in :mod:`models.solo`; a collective parks its stream after
  the rank's entry until the last rank's entry is known, then runs; a copy on an engine two
  streams share (a FIFO ``simpy.Resource`` in the processes) parks its stream until no other
  stream can still request that engine earlier (a lower bound from each stream's free
  instant, a parked entry, or the host's next launch), then gets it in request order; two
  requests at one instant raise :class:`~models.solo.Unsolvable` (SimPy's order of them is
  its event order);
* the ranks are resumed in turn, the streams a completed collective released advanced, until
  every host is done. When no rank can move, the one whose launch queue frees earliest
  (the earliest instant any host can go on, so no end still unknown can come before it)
  takes that free; when none can, a wait never ends and :class:`~models.solo.Unsolvable` is
  raised (the SimPy processes then name the deadlock).

The output is what the event simulation records by its stop (every host done and every rank's
last measured step finished). A job step whose relative state and drawn durations already
occurred is replayed, moved in time, on every rank at once (:mod:`models.memo_ranks`).
"""
from __future__ import annotations

import heapq

from stepsim.models.device import TaskPlan, TaskRun
from stepsim.models.host import HostOpPlan
from stepsim.models.loader import DataLoaderSim
from stepsim.models.memo_ranks import JobMemo
from stepsim.models.solo import Unsolvable, _Device, _LaunchQueue
from stepsim.models.solo_host import HostThread
from stepsim.simcore.record import Recorder, Span

__all__ = ["RankInput", "solve_ranks"]

AT_START = "at start"
"""What a host yields when it is held at a step's start (:mod:`models.memo_ranks`)."""


class _Barrier:
    """The collectives' rendezvous: per (step, task), how many ranks entered and the latest
    entry (µs); once all ``n`` have, the start, read once by each rank parked on it."""

    def __init__(self, n: int):
        self.n = n
        self.entries: dict[tuple[int, str], list] = {}   # key -> [entered, latest entry]
        self.starts: dict[tuple[int, str], list] = {}    # key -> [start, readers left]
        self.parked: dict[tuple[int, str], list] = {}    # key -> devices parked on it
        self.woken: list = []                            # devices a start released
        self.moves = 0   # collectives completed, waits first met, hosts ended: progress

    def enter(self, key: tuple[int, str], entry_us: float, dev) -> float | None:
        """Rank ``dev`` enters at ``entry_us``: the start if it was the last, else None (it
        is parked until then)."""
        e = self.entries.get(key)
        if e is None:
            e = self.entries[key] = [0, entry_us]
        e[0] += 1
        if entry_us > e[1]:
            e[1] = entry_us
        if e[0] < self.n:
            self.parked.setdefault(key, []).append(dev)
            return None
        del self.entries[key]
        self.starts[key] = [e[1], self.n - 1]
        self.woken.extend(self.parked.pop(key, ()))
        self.moves += 1
        return e[1]

    def start(self, key: tuple[int, str]) -> float | None:
        """The start of a collective this rank is parked on, once known."""
        s = self.starts.get(key)
        if s is None:
            return None
        s[1] -= 1
        if s[1] == 0:
            del self.starts[key]
        return s[0]


class _RankDevice(_Device):
    """One rank's streams; its collectives go through the barrier, its copies through the
    copy engines two streams share, each granted in request order (a FIFO
    ``simpy.Resource``) once no other stream can still request it earlier."""

    def __init__(self, barrier: _Barrier, shared: frozenset, *args):
        super().__init__(*args)
        self.barrier, self.shared = barrier, shared
        self.entered: dict[int, tuple[float, float, float]] = {}   # parked stream -> (ready, entry, gap)
        self.requests: dict[str, dict[int, float]] = {e: {} for e in shared}  # parked stream -> entry
        self.engine_free = {e: 0.0 for e in shared}
        self.users = {e: [i for i, ps in enumerate(self.plans) if any(p.engine == e for p in ps)]
                      for e in shared}
        self.host_lb: float | None = 0.0   # no launch comes before (None: the host waits)
        self.host_wait = (0.0, float("inf"))  # while it waits: its clock, its earliest known free

    def pump(self) -> None:
        """Advance every stream until none can move (a copy waiting for its engine may be
        granted once another stream has moved)."""
        while True:
            before = [tuple(p) for p in self.pos]
            super().pump()
            if not self.entered or before == [tuple(p) for p in self.pos]:
                return

    def meet(self, i: int, step: int, p: TaskPlan, free_at: float, ready: float,
             launch_us: float | None, rec: Recorder, runs) -> float | None:
        """Run collective or shared-engine copy ``p`` on stream ``i``: its end, or None while
        its start is not known (the stream stays parked on it)."""
        lane, rank = self.lanes[i], self.rank
        park = self.entered.pop(i, None)
        if park is None:
            if ready > free_at:
                rec.span(Span(lane, p.name, "wait", free_at, ready - free_at, step, rank,
                              "dependency", ""))
            gap_us = p.gap_us if p.replay_gap_us is None else p.replay_gap_us[step]
            entry = ready + gap_us if gap_us > 0 else ready
            if gap_us > 0:
                rec.span(Span(lane, p.name, "wait", ready, gap_us, step, rank, "device_idle", ""))
            if p.collective:
                start = self.barrier.enter((step, p.id), entry, self)
            else:
                self.requests[p.engine][i] = entry
                start = self._granted(p.engine, i, entry)
        else:
            ready, entry, gap_us = park
            start = self.barrier.start((step, p.id)) if p.collective else self._granted(
                p.engine, i, entry)
        if start is None:
            self.entered[i] = (ready, entry, gap_us)
            return None
        dur_us = p.dur_us if p.replay_us is None else p.replay_us[step]
        end = start + dur_us if dur_us > 0 else start
        if p.collective:
            cause = "arrival_skew"
        else:
            cause = p.engine
            self.engine_free[p.engine] = end
        if start > entry:
            rec.span(Span(lane, p.name, "wait", entry, start - entry, step, rank, cause, ""))
        rec.span(Span(lane, p.name, "busy", start, dur_us, step, rank, "", p.category))
        runs.append(TaskRun(rank, step, p.id, self.names[i], launch_us, ready, start, end,
                            gap_us))
        return end

    def _granted(self, engine: str, i: int, entry: float) -> float | None:
        """When stream ``i``'s request at ``entry`` gets ``engine``, or None while another
        stream may still request it earlier.

        Raises:
            Unsolvable: two requests at one instant (the order SimPy's queue keeps then
                depends on its event order)."""
        reqs = self.requests[engine]
        for j in self.users[engine]:
            if j == i:
                continue
            e = reqs.get(j)
            if e is None:
                e = self._earliest(j)
            elif e == entry:
                raise Unsolvable(f"two copies request the {engine} engine at {entry} us")
            if e <= entry:
                return None
        del reqs[i]
        free = self.engine_free[engine]
        return free if free > entry else entry

    def _earliest(self, j: int) -> float:
        """A lower bound (µs) on when stream ``j`` (not parked on a copy engine) can next
        request one: its free instant, a collective's entry, or the host's next launch."""
        step, k = self.pos[j]
        if step >= self.n_steps:
            return float("inf")
        park = self.entered.get(j)
        if park is not None:
            return park[1]
        lb = self.free_at[j]
        p = self.plans[j][k]
        if p.launched and p.id not in self.launch.get(step, {}):
            h = self.host_lb
            if h is None:
                t, free = self.host_wait
                h = min(self._blocked_lb(), free)
                h = t if t > h else h
            lb = h if h > lb else lb
        return lb

    def _blocked_lb(self) -> float:
        """While the host waits: a lower bound on when it goes on (so launches again), the
        earliest end of what is parked (everything it can wait for is behind one of them)."""
        out = float("inf")
        for j, (_, entry, _) in self.entered.items():
            st, k = self.pos[j]
            p = self.plans[j][k]
            out = min(out, entry + (p.dur_us if p.replay_us is None else p.replay_us[st]))
        return out


class _RankQueue(_LaunchQueue):
    """A rank's launch queue whose slots may wait on ends other ranks decide."""

    waiting: float | None = None   # the host's clock while it waits here (µs)
    grant = False                  # the coordinator lets it take its earliest known free
    yields = True                  # taking may wait (a generator that yields)

    def __init__(self, capacity: int, barrier: _Barrier):
        super().__init__(capacity)
        self.barrier = barrier
        self.dev = None

    def taking(self, t: float, step: int, task: str, slots: int):
        """Generator: take ``slots`` at ``t``; returns when they were handed over (µs). Pops
        a known free only when no held slot's end is unknown, or when granted."""
        n = min(slots, self.capacity)
        self.held[(step, task)] = n
        frees = self.frees
        while True:
            while frees and frees[0][0] <= t:
                self.pending -= heapq.heappop(frees)[1]
            if self.pending + n <= self.capacity:
                break
            if self.grant or self.pending == sum(k for _, k in frees):
                self.grant = False
                when, k = heapq.heappop(frees)
                self.pending -= k
                t = when if when > t else t
                continue
            if self.waiting is None:
                self.barrier.moves += 1
            self.waiting = t
            # the host waits: copies may be granted up to when it can go on
            dev = self.dev
            dev.host_lb, dev.host_wait = None, (t, frees[0][0] if frees else float("inf"))
            if dev.entered:
                dev.pump()
            yield
        if self.waiting is not None:
            self.dev.host_lb = t
        self.waiting = None
        self.pending += n
        return t


class RankInput:
    """One rank's plans and parameters (as :func:`models.solo.solve` takes them)."""

    def __init__(self, rank: int, ops: list[HostOpPlan], streams: dict[str, list[TaskPlan]],
                 delay_us: float, cpu_scale: float, loader: DataLoaderSim, rng):
        self.rank, self.ops, self.streams, self.delay_us = rank, ops, streams, delay_us
        self.cpu_scale, self.loader, self.rng = cpu_scale, loader, rng


class _Rank:
    """One rank's host thread (a generator over its steps) and device."""

    def __init__(self, r: RankInput, barrier: _Barrier, uses_core: bool, queue_depth: int,
                 rec: Recorder, runs, waits, n_steps: int, last: int, sync_step,
                 backlog: dict[str, float], released: set[str], hold_at: list[int]):
        self.hold_at, self.replayed, self.drawn, self.memo = hold_at, False, (), None
        self.r, self.n_steps = r, n_steps
        self.lq = _RankQueue(queue_depth, barrier)
        users: dict[str, set[str]] = {}
        for name, plans in r.streams.items():
            for p in plans:
                if p.engine is not None:
                    users.setdefault(p.engine, set()).add(name)
        shared = frozenset(e for e, ss in users.items() if len(ss) > 1)
        self.dev = self.lq.dev = _RankDevice(barrier, shared, r.rank, r.streams, n_steps,
                                             self.lq, rec, runs, sync_step, backlog, released,
                                             last + 1)
        self.host = HostThread(r.rank, r.ops, r.delay_us, uses_core, r.cpu_scale, r.loader,
                               r.rng, sync_step, self.dev, self.lq, rec, waits, barrier=barrier)
        self.starts: list[float] = []

    def steps(self):
        """Generator: the host thread over every step (see :func:`models.solo.solve`),
        yielding :data:`AT_START` where the job holds it (:mod:`models.memo_ranks`)."""
        host, dev = self.host, self.dev
        dev.pump()
        for step in range(self.n_steps):
            self.starts.append(host.t)
            if self.memo.pending is None:   # else the state is set only when solved again
                dev.forget_before(step)
            draws, loads = host.draw(step)
            if self.memo.holds(step) and step == self.hold_at[0]:
                self.drawn = (tuple(draws), tuple(loads))
                yield AT_START
                if self.replayed:   # the job's step was replayed
                    for _ in loads:
                        host.loader.returned_on_main()
                    continue
            yield from host.walk(step, draws, loads)
        self.starts.append(host.t)
        host.barrier.moves += 1


def solve_ranks(ranks: list[RankInput], uses_core: bool, queue_depth: int, rec: Recorder,
                runs, waits, n_steps: int, last: int, sync_step, backlog: dict[str, float],
                released: set[str]) -> list[list[float]]:
    """Solve ``n_steps`` steps of ``ranks`` together; returns each rank's host step-start
    instants (µs, ``n_steps + 1`` of them), in ``ranks`` order.

    Args: as :func:`models.solo.solve`, per rank in :class:`RankInput`. The output is what the
        event simulation records by its stop: the latest of every host's end and every rank's
        end of step ``last``.

    Raises:
        Unsolvable: a wait that never ends (the event simulation names it).
    """
    barrier = _Barrier(len(ranks))
    hold_at = [1]   # the step at whose start every host is held (models.memo_ranks)
    rs = [_Rank(r, barrier, uses_core, queue_depth, rec, runs, waits, n_steps, last, sync_step,
                backlog, released, hold_at) for r in ranks]
    memo = JobMemo(rs, barrier, last, getattr(waits, "keep", True))
    for x in rs:
        x.memo = memo
    live = [(x, x.steps()) for x in rs]
    held: list = []

    def wake() -> None:
        while barrier.woken:
            woken, barrier.woken = barrier.woken, []
            for dev in dict.fromkeys(woken):
                dev.pump()

    def route(sinks) -> None:
        for x in rs:
            x.host.rec, x.dev.out_runs, x.host.waits = sinks
            x.dev.out_rec = sinks[0]

    while live or held:
        before = barrier.moves
        still = []
        for x, gen in live:
            try:
                if next(gen) is AT_START:
                    held.append((x, gen))
                    barrier.moves += 1
                else:
                    still.append((x, gen))
            except StopIteration:
                pass
            wake()
        live = still
        if held and not live:   # every host at the start of step hold_at[0]
            step = hold_at[0]
            replayed = memo.at_start(step, [x.drawn for x in rs], tuple(
                sync_step(step + d) for d in (-1, 0, 1)), rec, runs, waits)
            route(memo.sinks(rec, runs, waits))
            hold_at[0] += 1
            live, held = sorted(held, key=lambda xg: xg[0].r.rank), []
            for x, _ in live:   # resumed with whether the step was replayed
                x.replayed = replayed
            continue
        if live and barrier.moves == before:
            if held:   # a held host's next launch is waited for: all go on, held again later
                memo.drop()
                route((rec, runs, waits))
                hold_at[0] += 1
                for x, _ in held:
                    x.replayed = False
                live, held = live + held, []
                continue
            # nothing moved: the host whose launch queue frees earliest goes on
            grants = [(max(x.lq.waiting, x.lq.frees[0][0]), i) for i, (x, _) in enumerate(live)
                      if x.lq.waiting is not None and x.lq.frees]
            if not grants:
                raise Unsolvable("a wait across ranks never ends")
            live[min(grants)[1]][0].lq.grant = True
    memo.settle()
    wake()
    stop = 0.0
    for x in rs:
        ends = x.dev.done.get(last, {})
        if len(ends) < sum(len(ps) for ps in x.dev.plans):
            raise Unsolvable(f"the device of rank {x.r.rank} never finishes step {last}")
        stop = max([stop, x.host.t, *ends.values()])
    for x in rs:
        x.dev.flush(stop)
    return [x.starts for x in rs]
