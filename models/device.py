"""Device lanes: compute streams, copy engines and the communication stream.

Each stream is one process that runs its tasks in order, step after step (CUDA stream
semantics). A task becomes *ready* when (1) the previous task on its stream has finished,
(2) the host op that launches it has been issued (a kernel never starts before its launch), and
(3) every task it ``waits`` for, in the same step, has finished (``cudaStreamWaitEvent``).
The stream then idles for the task's ``gap_us`` (idle the calibration could not explain:
device-side launch latency, a dependency the trace does not show; a ``wait`` span with cause
``device_idle``, not busy time). The task *starts* once (4) a host↔device copy holds its
direction's copy engine (one engine per direction, shared by every stream of the rank) and
(5) a collective has been entered by every simulated rank: the time between entering and start
is *arrival skew*, the rest is transfer (NCCL kernels spin until every peer joins, so a
profiler shows skew + transfer as one kernel).

Every run is logged as a :class:`TaskRun`, the raw material of gap attribution.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import simpy

from stepsim.models.cpu_pieces import run_pieces
from stepsim.models.step_bound import StepBound, step_range
from stepsim.simcore.record import Recorder, Span


class TaskRun(NamedTuple):
    """One execution of a device task (instants in µs); a named tuple (immutable, cheap).

    ``launch_us`` is when its host launch was issued (None when no host op launches it);
    ``ready_us`` when its stream, launch and waits allowed it; ``gap_us`` the unexplained idle
    it then waited out (``ready_us + gap_us`` is when a collective was entered by this rank);
    ``start_us`` when it got its copy engine / when the last rank entered; ``end_us`` when it
    finished.
    """

    rank: int
    step: int
    task: str
    stream: str
    launch_us: float | None
    ready_us: float
    start_us: float
    end_us: float
    gap_us: float = 0.0


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """A device task as one rank's stream process runs it (built by the simulator)."""

    id: str
    name: str
    category: str
    dur_us: float
    waits: tuple[str, ...]
    launched: bool
    engine: str | None          # "h2d" / "d2h" when it needs a copy engine
    collective: bool
    skip_in_no_sync: bool       # DDP collective or optimizer task (skipped under no_sync)
    gap_us: float = 0.0         # unexplained idle after ready, before it starts (µs)
    prev_waits: tuple[str, ...] = ()                # tasks of the previous step it waits for
    replay_us: tuple[float, ...] | None = None      # window replay: dur_us per step
    replay_gap_us: tuple[float, ...] | None = None  # window replay: gap_us per step


COIN_BELOW_US = 3_000.0
"""Below this wait (µs) in a collective by the ranks that entered it before the last, which of
them resumes late after it is a coin (:meth:`StepEvents.pays_lag`; measured)."""


class StepEvents:
    """Lazily created per-(rank, step, task) events: ``launched`` (its value is the launch
    instant, µs) and ``done``."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._launched: dict[tuple[int, int, str], simpy.Event] = {}
        self._done: dict[tuple[int, int, str], simpy.Event] = {}
        self._ranks: set[int] = set()
        self._payer: dict[tuple[int, str], int] = {}

    def launched(self, rank: int, step: int, task: str) -> simpy.Event:
        key = (rank, step, task)
        ev = self._launched.get(key)
        if ev is None:
            ev = self._launched[key] = self.env.event()
            self._ranks.add(rank)
        return ev

    def entered_last(self, rank: int, step: int, task: str) -> bool:
        """Whether ``rank`` launched ``task`` of ``step`` last of the ranks that launched it
        (ties: the highest rank, as :func:`models.collectives.split_collective`)."""
        evs = {r: self._launched.get((r, step, task)) for r in self._ranks}
        got = {r: ev.value for r, ev in evs.items() if ev is not None and ev.triggered}
        return rank in got and max(got, key=lambda r: (got[r], r)) == rank

    def pays_lag(self, rank: int, step: int, task: str, rng: np.random.Generator) -> bool:
        """Whether ``rank`` pays ``step``'s late resume after ``task`` (the step's one payer,
        decided once, so every rank agrees): the rank that launched it last where it entered
        :data:`COIN_BELOW_US` or more after every other (the others slept that long in it and
        wake with their cores), else one drawn at random (one number from ``rng``, the first
        asking rank's) among the ranks that entered within that of the last, ties included.

        Measured (the 12 demo captures of 2026-12-05 09:26-10:24, steps with one rank's
        resume over 0.3 ms after the other's): the late rank had entered the last all-reduce
        last in 29 of 34 steps where the other had waited over 3 ms in it, 19 of 40 at
        1-3 ms and 30 of 50 below 1 ms (49 of 90 below 3 ms: a coin). Before, the rank that
        entered last paid always, so a model whose ranks' skew is systematic put every late
        resume on one rank."""
        key = (step, task)
        if key not in self._payer:
            got = {r: ev.value for r in self._ranks
                   if (ev := self._launched.get((r, step, task))) is not None and ev.triggered}
            if not got:
                return False
            last = max(got, key=lambda r: (got[r], r))
            near = sorted(r for r in got if got[last] - got[r] < COIN_BELOW_US)
            self._payer[key] = near[int(rng.integers(len(near)))] if len(near) > 1 else last
        return self._payer[key] == rank

    def done(self, rank: int, step: int, task: str) -> simpy.Event:
        key = (rank, step, task)
        ev = self._done.get(key)
        if ev is None:
            ev = self._done[key] = self.env.event()
        return ev


class LaunchQueue:
    """One rank's bounded queue of launched, unfinished device work (the runtime's launch
    queue, ``DeviceParams.launch_queue_depth`` entries): a launch takes a slot (a coarsened
    task one per fine launch it stands for, at most ``capacity``), its task frees them on
    completion; the host blocks only when the slots it needs are taken. A counter with one
    waiter (the rank's host thread)."""

    def __init__(self, env: simpy.Environment, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.env, self.capacity, self.pending = env, capacity, 0
        self._held: dict[tuple[int, str], int] = {}
        self._waiter: tuple[simpy.Event, int] | None = None

    def take(self, step: int, task: str, slots: int = 1) -> simpy.Event | None:
        """Take ``slots`` for ``task`` of ``step``: None when they were free, else an event
        that fires once they have been handed over."""
        n = min(slots, self.capacity)
        self._held[(step, task)] = n
        if self.pending + n <= self.capacity:
            self.pending += n
            return None
        ev = self.env.event()
        self._waiter = (ev, n)
        return ev

    def free(self, step: int, task: str) -> None:
        """``task`` of ``step`` finished: free its slots (if its launch took any)."""
        n = self._held.pop((step, task), 0)
        self.pending -= n
        if self._waiter is not None and self.pending + self._waiter[1] <= self.capacity:
            (ev, need), self._waiter = self._waiter, None
            self.pending += need
            ev.succeed()


class Barrier:
    """Cross-rank rendezvous of collectives: the n-th arrival at a key releases everyone."""

    def __init__(self, env: simpy.Environment, n_ranks: int):
        self.env, self.n = env, n_ranks
        self._state: dict[tuple[int, str], list] = {}

    def arrive(self, step: int, task: str) -> simpy.Event:
        st = self._state.setdefault((step, task), [0, self.env.event()])
        st[0] += 1
        if st[0] == self.n:
            st[1].succeed()
            del self._state[(step, task)]
        return st[1]


def stream_process(env: simpy.Environment, rank: int, stream: str, plans: list[TaskPlan],
                   events: StepEvents, barrier: Barrier | None,
                   engines: dict[str, simpy.Resource], recorder: Recorder, n_steps: int | StepBound,
                   launch_queue: LaunchQueue, runs: list[TaskRun], sync_step,
                   busy_us: float = 0.0, cpu=None, cpu_us: dict[str, float] | None = None,
                   wake: dict[str, tuple[int, float]] | None = None):
    """Process generator for one stream of one rank over ``n_steps`` steps (a count or a
    :class:`models.step_bound.StepBound`).

    Args:
        plans: the stream's tasks in order, durations already set for this rank.
        engines: this rank's copy engines by direction (``h2d``, ``d2h``).
        launch_queue: the rank's launch queue; a launched task frees its slot when done.
        runs: receives one :class:`TaskRun` per executed task.
        sync_step: ``sync_step(step)`` is False for a ``no_sync`` micro-step.
        busy_us: the stream is first busy this long (µs) with work from before step 0 (a
            window replay's captured backlog).
        cpu, cpu_us: the rank's host cores (:class:`models.cpu.CpuPool`) and the collectives'
            CPU work on them by task id (µs, see ``comm.host_cpu_us``); a collective runs
            that work on the cores (a share of them when they are contended, at the host's
            speed), then the part of ``dur_us`` that is not that work (the wait for the peer's
            hops): ``work + max(dur_us − work, 0)`` with a core to itself at the capture's
            speed, more when the cores are busy or the host slower.
        wake: per collective task id, ``(w, L)``: its backend threads' wake-ups and the wait
            for a core of each (µs, ``comm.wakeup_wait_us``). Its CPU work is split into ``w``
            equal pieces, each after a wake-up that waits ``L`` when every core of the host
            is busy at that instant (``cpu.active`` ≥ cores, this collective's thread not
            counted) and nothing when one is idle: a CFS wake-up onto busy cores waits for a
            running thread's slice, which the processor-shared pool would not make it wait;
            the piece then takes a core from a running thread at once (``preempt``: the
            thread it took the core from absorbs it, :meth:`models.cpu.CpuPool.work`), not
            after a 2 ms quantum of the pool's queue.
    """
    lane = f"rank{rank}.stream:{stream}"
    done, launched = events.done, events.launched
    keeps = recorder.keeps   # a recorder that keeps nothing is sent no span (none is made)
    if busy_us > 0:
        yield env.timeout(busy_us)
        recorder.span(Span(lane, "work launched before the window", "busy", 0.0, busy_us, -1,
                           rank, category="other"))
    for step in step_range(n_steps):
        syncing = sync_step(step)
        for t in plans:
            launch_ev = launched(rank, step, t.id) if t.launched else None
            evs = [done(rank, step, w) for w in t.waits]
            evs += [done(rank, step - 1, w) for w in t.prev_waits]
            pending = [ev for ev in evs if not ev.processed]
            if launch_ev is not None and not launch_ev.processed:
                pending.append(launch_ev)
            if pending:
                stalled = env.now
                yield pending[0] if len(pending) == 1 else simpy.AllOf(env, pending)
                if keeps and env.now > stalled:
                    recorder.span(Span(lane, t.name, "wait", stalled, env.now - stalled, step,
                                       rank, cause="dependency"))
            if t.skip_in_no_sync and not syncing:
                done(rank, step, t.id).succeed()
                if t.launched:
                    launch_queue.free(step, t.id)
                continue
            ready = env.now
            gap_us = t.gap_us if t.replay_gap_us is None else t.replay_gap_us[step]
            dur_us = t.dur_us if t.replay_us is None else t.replay_us[step]
            if gap_us > 0:
                yield env.timeout(gap_us)
                if keeps:
                    recorder.span(Span(lane, t.name, "wait", ready, gap_us, step, rank,
                                       cause="device_idle"))
            entered = env.now
            req = None
            if t.collective and barrier is not None:
                yield barrier.arrive(step, t.id)
                if keeps and env.now > entered:
                    recorder.span(Span(lane, t.name, "wait", entered, env.now - entered, step,
                                       rank, cause="arrival_skew"))
            elif t.engine is not None:
                req = engines[t.engine].request()
                yield req
                if env.now > entered:
                    recorder.span(Span(lane, t.name, "wait", entered, env.now - entered, step,
                                       rank, cause=t.engine))
            start = env.now
            if t.collective and cpu is not None:
                # on the host's cores (gloo on CPU tensors): its CPU work, as the cores allow,
                # then the rest of its measured transfer that is no CPU work of this rank
                work_us = cpu_us.get(t.id, 0.0)
                n_wake, wait_us = (wake or {}).get(t.id, (1, 0.0))
                yield from run_pieces(cpu, work_us, n_wake, wait_us, on_wait=(
                    (lambda woke: recorder.span(Span(
                        lane, t.name, "wait", woke, wait_us, step, rank, cause="cpu_cores")))
                    if keeps else None))
                if dur_us > work_us:
                    yield env.timeout(dur_us - work_us)
            elif dur_us > 0:
                yield env.timeout(dur_us)
            if req is not None:
                engines[t.engine].release(req)
            if keeps:
                recorder.span(Span(lane, t.name, "busy", start, dur_us, step, rank,
                                   category=t.category))
            runs.append(TaskRun(rank, step, t.id, stream,
                                launch_ev.value if launch_ev is not None else None,
                                ready, start, env.now, gap_us))
            done(rank, step, t.id).succeed()
            if t.launched:
                launch_queue.free(step, t.id)
