"""A rank that contends with nothing, solved without events.

When one rank runs alone (no collective partner), its host thread cannot lose a core (no
more runnable threads than cores, no co-run interference), it has no DataLoader workers and
no two streams share a copy engine, then nothing in its step is decided by a race: every
instant is a max-plus function of the durations, the launches and the waits. This module
computes those instants directly, in program order, with the semantics of
:mod:`models.host` and :mod:`models.device` (the SimPy processes), and emits the same spans,
:class:`~models.device.TaskRun` and :class:`~models.host.HostWait` records:

* the host thread (:class:`models.solo_host.HostThread`) walks its ops on its own clock ``t``
  (µs): CPU work and launches add their time; a launch first takes its launch-queue slots,
  waiting for the earliest completions when they are held; a sync or a pageable copy waits
  for the tasks it names;
* each stream is advanced lazily, task after task, as far as the launches and the waits known
  so far allow: a task is *ready* at the latest of its predecessor's end, its launch and the
  ends of the tasks it waits for; it then idles ``gap_us`` and runs ``dur_us``.

A step whose relative state and drawn durations already occurred is replayed from its first
occurrence instead (:mod:`models.memo`). :func:`solvable` says whether a model qualifies;
:func:`solve` raises :class:`Unsolvable`
when it meets what only the event simulation can report (a wait that never ends), and the
caller then runs the SimPy processes, which raise the user-facing error.
"""
from __future__ import annotations

import heapq

from stepsim.models.device import TaskPlan, TaskRun
from stepsim.models.host import HostOpPlan
from stepsim.models.loader import DataLoaderSim
from stepsim.models.memo import StepMemo, memoizable
from stepsim.models.solo_host import HostThread
from stepsim.simcore.record import ListRecorder, NullRecorder, Recorder, Span

__all__ = ["Unsolvable", "solvable", "solve"]


_NULL = NullRecorder()


class Unsolvable(Exception):
    """The solver met a wait it cannot resolve (the event simulation reports it)."""


def solvable(n_ranks: int, simple_host: bool, num_workers: int, ops: list[HostOpPlan],
             streams: dict[str, list[TaskPlan]], workers_solvable: bool = False,
             shared_engines: bool = False) -> bool:
    """Whether a rank can be solved without events: one rank, a host that cannot lose its
    core (``simple_host``), no DataLoader workers unless they can be solved too
    (``workers_solvable``: :func:`models.solo_loader.loader_solvable`), no intra-op parallel
    CPU work, and each copy engine used by at most one stream (so copies never queue for it)
    unless ``shared_engines`` (:mod:`models.solo_ranks` queues them)."""
    if n_ranks != 1 or not simple_host or (num_workers != 0 and not workers_solvable):
        return False
    if any(op.kind == "cpu" and op.parallel_fraction > 0 for op in ops):
        return False
    if shared_engines:
        return True
    users: dict[str, set[str]] = {}
    for s, plans in streams.items():
        for p in plans:
            if p.engine is not None:
                users.setdefault(p.engine, set()).add(s)
    return all(len(v) <= 1 for v in users.values())


def _rounding(nd: int | None):
    """``x -> x`` rounded to ``nd`` decimals (unchanged when ``nd`` is None)."""
    return (lambda x: x) if nd is None else (lambda x: round(x, nd))


class _LaunchQueue:
    """The launch queue on the host's clock: slots taken at launch, freed at the task's end
    (pushed on a heap once that end is known)."""

    yields = False   # taking never waits: the host calls take (models.solo_ranks' may wait)

    def __init__(self, capacity: int):
        self.capacity, self.pending = capacity, 0
        self.held: dict[tuple[int, str], int] = {}
        self.frees: list[tuple[float, int]] = []

    def take(self, t: float, step: int, task: str, slots: int) -> float:
        """Take ``slots`` at ``t``; returns when they were handed over (µs)."""
        n = min(slots, self.capacity)
        self.held[(step, task)] = n
        frees = self.frees
        while frees and frees[0][0] <= t:
            self.pending -= heapq.heappop(frees)[1]
        while self.pending + n > self.capacity:
            if not frees:
                raise Unsolvable("launch queue never frees")
            when, k = heapq.heappop(frees)
            self.pending -= k
            t = when if when > t else t
        self.pending += n
        return t

    def taking(self, t: float, step: int, task: str, slots: int):
        """:meth:`take` as a generator (:meth:`models.solo_host.HostThread.walk`'s form;
        a rank alone never waits in it)."""
        return self.take(t, step, task, slots)
        yield

    def free(self, step: int, task: str, when: float) -> None:
        n = self.held.pop((step, task), 0)
        if n:
            heapq.heappush(self.frees, (when, n))

    def snapshot(self, step: int, t: float, nd: int | None = None) -> tuple:
        """The queue's state relative to ``step`` and ``t`` (frees due by ``t`` applied:
        nothing takes a slot before ``t``), instants rounded to ``nd`` decimals if given."""
        while self.frees and self.frees[0][0] <= t:
            self.pending -= heapq.heappop(self.frees)[1]
        frees = [(w - t, n) for w, n in self.frees] if nd is None else [
            (round(w - t, nd), n) for w, n in self.frees]   # a memo key each step: no lambda
        frees.sort()
        return (self.pending, tuple(frees),
                tuple(sorted((s - step, k, n) for (s, k), n in self.held.items())))

    def restore(self, snap: tuple, step: int, t: float) -> None:
        """Set the state :meth:`snapshot` gave, moved to ``step`` and ``t``."""
        self.pending = snap[0]
        self.frees = [(w + t, n) for w, n in snap[1]]   # sorted: a heap
        self.held = {(s + step, k): n for s, k, n in snap[2]}


class _Device:
    """One rank's streams, advanced as far as what is known allows."""

    barrier = None          # a rank among others: its collectives' cross-rank rendezvous
    shared = frozenset()    # copy engines two streams share (models.solo_ranks)
    entered: dict = {}      # streams parked on one of those (models.solo_ranks; never set here)
    host_lb: float | None = 0.0            # no launch comes before (µs; models.solo_ranks)
    host_wait = (0.0, float("inf"))
    _rows: list | None = None               # _advance's per-task rows (_rows_of)

    def __init__(self, rank: int, streams: dict[str, list[TaskPlan]], n_steps: int,
                 lq: _LaunchQueue, rec: Recorder, runs, sync_step, backlog: dict[str, float],
                 released: set[str], hold_from: int):
        self.rank, self.n_steps, self.lq, self.sync_step = rank, n_steps, lq, sync_step
        self.out_rec, self.out_runs, self.hold_from = rec, runs, hold_from
        self.held = ListRecorder()          # spans of steps >= hold_from, until the stop is known
        self.held_runs: list[TaskRun] = []
        self.names = list(streams)
        self.plans = [streams[s] for s in self.names]
        self.lanes = [f"rank{rank}.stream:{s}" for s in self.names]
        self.pos = [[0, 0] for _ in self.names]           # (step, index) of the next task
        self.free_at = [backlog.get(s, 0.0) for s in self.names]
        self.stream_of = {p.id: i for i, ps in enumerate(self.plans) for p in ps}
        self.waited = {w for ps in self.plans for p in ps for w in (*p.waits, *p.prev_waits)}
        self.launch: dict[int, dict[str, float]] = {}
        self.done: dict[int, dict[str, float]] = {-1: {w: 0.0 for w in released}}
        for i, s in enumerate(self.names):
            b = backlog.get(s, 0.0)
            if b > 0:
                rec.span(Span(self.lanes[i], "work launched before the window", "busy", 0.0, b,
                              -1, rank, "", "other"))

    def launched(self, step: int, task: str, t: float) -> None:
        self.launch.setdefault(step, {})[task] = t
        i = self.stream_of.get(task)
        if i is not None and self._advance(i):
            self.pump()

    def pump(self) -> None:
        """Advance every stream until none can move."""
        moved = True
        while moved:
            moved = False
            for i in range(len(self.plans)):
                if self._advance(i):
                    moved = True

    def flush(self, stop_us: float) -> None:
        """Hand over what was held back that ended by ``stop_us``."""
        for sp in self.held.spans:
            if sp.start_us + sp.dur_us <= stop_us:
                self.out_rec.span(sp)
        for r in self.held_runs:
            if r.end_us <= stop_us:
                self.out_runs.append(r)

    def done_at(self, step: int, task: str) -> float:
        d = self.done.get(step, {}).get(task)
        if d is None:
            raise Unsolvable(f"task {task} of step {step} never finishes")
        return d

    def snapshot(self, step: int, t: float, ids: set[str], nd: int | None = None) -> tuple:
        """The streams' state relative to ``step`` and ``t``: positions, when each is free,
        the launches of tasks not run yet, and the ends of the tasks ``ids`` that can still
        be asked for; instants rounded to ``nd`` decimals if given."""
        lo = min([step] + [p[0] for p in self.pos]) - 1
        done, r = self.done, _rounding(nd)
        # a step's launches and ends hold every task: pick the few asked for by set
        # operations (each (step, task) once, so the sorted tuples do not depend on the order)
        launch = tuple(sorted((s - step, k, r(d[k] - t)) for s, d in self.launch.items()
                              if s >= lo for k in d.keys() - done.get(s, {}).keys()))
        ends = tuple(sorted((s - step, k, r(d[k] - t)) for s, d in done.items() if s >= lo
                            for k in d.keys() & ids))
        return (tuple((p[0] - step, p[1]) for p in self.pos),
                tuple(r(f - t) for f in self.free_at), launch, ends)

    def restore(self, snap: tuple, step: int, t: float) -> None:
        """Set the state :meth:`snapshot` gave, moved to ``step`` and ``t``."""
        pos, free, launch, ends = snap
        self.pos = [[s + step, k] for s, k in pos]
        self.free_at = [f + t for f in free]
        self.launch = {}
        for s, k, v in launch:
            self.launch.setdefault(s + step, {})[k] = v + t
        self.done = {k: v for k, v in self.done.items() if k < 0}
        for s, k, v in ends:
            self.done.setdefault(s + step, {})[k] = v + t

    def forget_before(self, step: int) -> None:
        """Drop launches and ends of steps before ``step`` (nothing can ask for them)."""
        low = min([step] + [p[0] for p in self.pos]) - 2
        for d in (self.launch, self.done):
            for k in [k for k in d if k < low and k >= 0]:
                del d[k]

    def _rows_of(self) -> list[list[tuple]]:
        """Per stream, per task, what :meth:`_advance` reads of it (built on first use, once
        ``barrier`` and ``shared`` are set): the plan, its id, launched, waits, previous
        step's waits, whether it waits at all, whether it meets other ranks or a shared copy
        engine, skipped under no_sync, whether others wait for it."""
        barrier, shared, waited = self.barrier, self.shared, self.waited
        self._rows = [[(p, p.id, p.launched, p.waits, p.prev_waits, bool(p.waits or p.prev_waits),
                        bool(p.collective and barrier is not None or p.engine in shared),
                        p.skip_in_no_sync, p.id in waited) for p in plans]
                      for plans in self.plans]
        return self._rows

    def _advance(self, i: int) -> bool:
        """Run stream ``i``'s tasks while their inputs are known; True when a task others
        wait for has finished."""
        rows = (self._rows or self._rows_of())[i]
        pos = self.pos[i]
        step, k = pos
        held = step >= self.hold_from
        rec, runs = (self.held, self.held_runs) if held else (self.out_rec, self.out_runs)
        keeps = rec.keeps   # False: no span is made (a recorder that keeps none)
        free_at = self.free_at[i]
        notify = False
        n = len(rows)
        n_steps, launches, dones, lq = self.n_steps, self.launch, self.done, self.lq
        while step < n_steps and n:
            p, pid, launched, waits, prev_waits, waiting, joinable, skip, notifies = rows[k]
            ready = free_at
            launch_us = None
            if launched:
                d = launches.get(step)
                launch_us = None if d is None else d.get(pid)
                if launch_us is None:
                    break
                if launch_us > ready:
                    ready = launch_us
            if waiting:
                blocked = False
                for s, ws in ((step, waits), (step - 1, prev_waits)):
                    d = dones.get(s, {})
                    for w in ws:
                        e = d.get(w)
                        if e is None:
                            blocked = True
                            break
                        if e > ready:
                            ready = e
                    if blocked:
                        break
                if blocked:
                    break
            joined = joinable and (not skip or self.sync_step(step))
            if joined:   # a collective among ranks, a shared copy engine (models.solo_ranks)
                end = self.meet(i, step, p, free_at, ready, launch_us, rec, runs)
                if end is None:
                    break
            elif ready > free_at and keeps:
                rec.span(Span(self.lanes[i], p.name, "wait", free_at, ready - free_at, step,
                              self.rank, "dependency", ""))
            done = dones.get(step)
            if done is None:
                done = dones[step] = {}
            if joined:
                pass
            elif skip and not self.sync_step(step):
                end = ready
            else:
                gap_us = p.gap_us if p.replay_gap_us is None else p.replay_gap_us[step]
                dur_us = p.dur_us if p.replay_us is None else p.replay_us[step]
                start = ready
                if gap_us > 0:
                    start = ready + gap_us
                    if keeps:
                        rec.span(Span(self.lanes[i], p.name, "wait", ready, gap_us, step,
                                      self.rank, "device_idle", ""))
                end = start + dur_us if dur_us > 0 else start
                if keeps:
                    rec.span(Span(self.lanes[i], p.name, "busy", start, dur_us, step, self.rank,
                                  "", p.category))
                runs.append(TaskRun(self.rank, step, pid, self.names[i], launch_us, ready, start,
                                    end, gap_us))
            done[pid] = end
            if launched:
                lq.free(step, pid, end)
            if notifies:
                notify = True
            free_at = end
            k += 1
            if k == n:
                step, k = step + 1, 0
                if step >= self.hold_from and not held:
                    held = True
                    rec, runs = self.held, self.held_runs
                    keeps = True
        pos[0], pos[1] = step, k
        self.free_at[i] = free_at
        return notify


def solve(rank: int, ops: list[HostOpPlan], streams: dict[str, list[TaskPlan]],
          delay_us: float, uses_core: bool, cpu_scale: float, loader: DataLoaderSim,
          queue_depth: int, rec: Recorder, runs, waits, n_steps: int, last: int, sync_step,
          rng, backlog: dict[str, float], released: set[str], workers=None) -> list[float]:
    """Solve ``n_steps`` steps of one rank; returns the host's step-start instants (µs,
    ``n_steps + 1`` of them).

    Args: as :func:`models.host.host_process` and :func:`models.device.stream_process`
        (``runs`` and ``waits`` receive each :class:`TaskRun` and :class:`HostWait` through
        ``append``; ``released``: the tasks whose step −1 counts as done at 0). The output is
        what the event simulation would have recorded by its stop: the host's end or, if
        later, the end of step ``last``'s device work; so spans and runs of the steps after
        ``last`` are held back until that instant is known.
        workers: the DataLoader's workers as a :class:`models.solo_loader.SoloLoader` (None
        without workers: ``loader`` then produces each batch on the main thread).

    Raises:
        Unsolvable: a wait that never ends (the event simulation names it).
    """
    lq = _LaunchQueue(queue_depth)
    dev = _Device(rank, streams, n_steps, lq, rec, runs, sync_step, backlog, released, last + 1)
    host = HostThread(rank, ops, delay_us, uses_core, cpu_scale, loader, rng, sync_step, dev,
                      lq, rec, waits, workers)
    dev.pump()
    starts: list[float] = []
    out_rec, out_waits = rec, waits
    memo = StepMemo(ops, streams, last) if memoizable(ops, streams) and (
        workers is None or workers.p.batches_per_epoch is None) else None
    for step in range(n_steps):
        t = host.t
        starts.append(t)
        dev.forget_before(step)
        draws, loads = host.draw(step)
        if workers is not None:   # the workers' state, the step's sends drawn
            loads = [workers.key(t, host.n_batches(step))] if memo is not None and (
                1 <= step < last - 1) else []
        key = memo.key(step, t, dev, lq, draws, loads, tuple(sync_step(step + d) for d in (-1, 0, 1))
                       ) if memo is not None else None
        hit = memo.get(key) if key is not None else None
        if hit is not None:
            host.t = hit.replay(step, t, dev, lq, out_rec, runs, waits)
            if workers is not None:   # the loader's own record, made anew (its spans name batches)
                for rel_call, _ in hit.batch_calls:
                    workers.next_batch(t + rel_call, step, _NULL)
            else:
                for _ in loads:
                    loader.returned_on_main()
            continue
        capture = memo.capture(key, step, t, out_rec, runs, waits) if key is not None else None
        if capture is not None:
            host.rec = dev.out_rec = capture.rec
            dev.out_runs, host.waits = capture.runs, capture.waits
            host.calls, host.t0 = [], capture.t0
        for _ in host.walk(step, draws, loads):
            raise Unsolvable(f"the host of rank {rank} waits in step {step} for a task that "
                             "never finishes")
        if capture is not None:
            host.rec = dev.out_rec = out_rec
            dev.out_runs, host.waits = runs, out_waits
            capture.batch_calls, host.calls = host.calls, None
            capture.done(host.t, dev, lq)
    t = host.t
    starts.append(t)
    ends = dev.done.get(last, {})
    if len(ends) < sum(len(ps) for ps in dev.plans):
        raise Unsolvable(f"the device never finishes step {last}")
    stop = max([t, *ends.values()])
    dev.flush(stop)
    if workers is not None:
        workers.finish(stop, out_rec)
    return starts
