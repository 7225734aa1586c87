"""The host thread: the Python thread that takes batches, does CPU work, launches device work
and blocks on synchronisations. It runs ahead of the device until it blocks: on ``next()`` of
the DataLoader, on a sync, on a copy from pageable memory, or on a full launch queue (CUDA's
bounded queue of pending launches).

Semantics (CUDA runtime, as PyTorch uses it):

* a launch costs ``dur_us`` of host CPU and then lets its task start (``cudaLaunchKernel``);
* ``cudaMemcpyAsync`` from/to *pageable* host memory (``DeviceTask.pinned is False``) returns
  only when the copy is done, so the host blocks for the copy and everything queued before it
  on its stream; pinned copies with ``non_blocking=True`` (``pinned`` True or unknown) don't;
* a sync on a task blocks until that task is done (``cudaStreamSynchronize`` /
  ``cudaEventSynchronize``, ``.item()``); a sync without a task waits for everything issued
  so far on every stream (``cudaDeviceSynchronize``).

A ``cpu`` op of ``d`` µs (its wall time with a core for every thread) is three parts, in
order (``HostOp``): one thread's CPU work, ``threads`` threads' parallel CPU work
(``parallel_fraction × d`` of wall, ``threads ×`` that of CPU) and a wait that uses no core
(``block_fraction × d``: a sleep, a CUDA synchronisation, I/O). Only the CPU parts compete
with DataLoader workers for the cores.

Every blocking wait on the device is logged as a :class:`HostWait` naming the tasks awaited,
so gap attribution can follow it to what the device was doing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.cpu_co import co_core_work
from stepsim.models.cpu_spin import spin as team_spin
from stepsim.models.device import LaunchQueue, StepEvents
from stepsim.models.loader import DataLoaderSim
from stepsim.models.step_bound import StepBound, step_range
from stepsim.simcore.dists import Duration
from stepsim.simcore.record import Recorder, Span, record_cpu_work


@dataclass(frozen=True, slots=True)
class HostWait:
    """The host blocked from ``start_us`` to ``end_us`` until ``tasks`` (``(step, task id)``
    pairs) were done. ``cause`` is ``sync`` or, for a pageable copy, ``h2d``/``d2h``."""

    rank: int
    step: int
    start_us: float
    end_us: float
    cause: str
    tasks: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class HostOpPlan:
    """A host op as the host process runs it (built by the simulator).

    ``block_cause``: for a launch of a pageable copy, the wait cause (``h2d``/``d2h``);
    ``targets``: for a sync, the ``(step offset, task id)`` pairs it waits for (offset 0: this
    step, −1: the previous step); ``optimizer``: skipped under ``no_sync``; ``samples``: for a
    ``cpu`` op with measured per-step durations, the distribution each step draws from;
    ``slots``: for a launch, the launch-queue slots it takes (``DeviceTask.launches``);
    ``replay_us``: in a window replay, the op's value in each step (``HostOp.replay_us``), used
    instead of ``dur_us``/``samples`` (for ``next_batch``, the main thread's ``next()`` time).
    """

    kind: str
    name: str
    dur_us: float
    task: str | None
    category: str
    block_cause: str | None
    targets: tuple[tuple[int, str], ...]
    optimizer: bool
    samples: Duration | None = None   # for cpu ops: per-step durations drawn instead of dur_us
    slots: int = 1                    # launch-queue slots a launch takes
    replay_us: tuple[float, ...] | None = None   # window replay: the op's value per step
    threads: int = 1                  # cpu ops: intra-op threads of the parallel part
    parallel_fraction: float = 0.0    # cpu ops: share of the wall on ``threads`` threads
    block_fraction: float = 0.0       # cpu ops: share of the wall that uses no core
    corun_ref: float = 0.0            # cpu ops: other cores' busy share in the capture
    wall: bool = False                # cpu ops: dur_us is wall-clock time busy on a core
    #                                   (RankParams.phase_wall_us), not work the speed scales
    lag: Duration | None = None       # cpu ops: the resume lag (HostOp.resume_lag_us), a
    lag_task: str | None = None       # wait paid by the last rank to enter this collective
    co_core_us: float = 0.0           # sync ops: µs of wall the thread then shares one core
    #                                   with the other released ranks' (models.cpu_co)


INTERLEAVE_SLICES = 8
"""Slices a cpu op with a parallel part is run in on a contended pool, alternating its serial
and parallel parts (:func:`host_process`): torch's ops are many serial dispatches, each with
its parallel region, not one serial part followed by one parallel part. Assumed: with 8
slices of a 35 ms step (about 4 ms each, two quanta) a worker's 20 ms batch meets both parts
in proportion."""


def host_process(env: simpy.Environment, rank: int, ops: list[HostOpPlan], delay_us: float,
                 cpu: CpuPool, uses_core: bool, loader: DataLoaderSim, events: StepEvents,
                 recorder: Recorder, n_steps: int | StepBound, step_starts: list[float],
                 launch_queue: LaunchQueue, waits_out: list[HostWait], sync_step,
                 rng: np.random.Generator):
    """Process generator of one rank's host thread over ``n_steps`` steps.

    Args:
        launch_queue: the rank's launch queue (a launch takes a slot).
        waits_out: receives one :class:`HostWait` per blocking wait on the device.
        sync_step: ``sync_step(step)`` is False for a ``no_sync`` micro-step.
        rng: the host's random stream (draws of ``cpu`` ops with ``samples``).

    ``step_starts`` receives the instant (µs) each step begins, and finally the instant the last
    step's host work ends (so it has ``n_steps + 1`` entries). ``n_steps``: a count, or a
    :class:`models.step_bound.StepBound` the caller may raise.
    """
    lane = f"rank{rank}.host"
    tail: list = [None]   # stops the spin of the last team op's threads (CpuPool.spin)
    co_left = [0.0]       # after a barrier: the shared core's time (µs) from its pairing
    # Run-ahead: while the host's CPU work cannot contend with anything (no core pool, or one
    # with no more runnable threads than cores and no co-run interference), cpu ops and
    # launches only move the host's own clock ``t``; a launch's event is scheduled for its
    # instant and the process yields only where it meets the rest (a sync, next(), a pageable
    # copy, a full launch queue, intra-op parallel work): one SimPy event per launch instead of
    # a process resume per op, with the same instants. An adaptive pool (models.cpu) allows it
    # while its claims fit its cores: they rise only in next(), where the host has caught up.
    always = not uses_core or (not cpu.contended and cpu.interference <= 0)
    adaptive = uses_core and cpu.adaptive
    simple = always
    t = env.now

    def catch_up():
        nonlocal t
        if t > env.now:
            yield env.timeout(t - env.now)
        t = env.now

    def fire_launch(step: int, task: str, when: float) -> None:
        if when <= env.now:
            events.launched(rank, step, task).succeed(env.now)
            return
        env.timeout(when - env.now).callbacks.append(
            lambda _ev: events.launched(rank, step, task).succeed(when))

    def run_ahead(name: str, dur_us: float, category: str, step: int,
                  block_fraction: float = 0.0) -> None:
        """``busy`` on the host's own clock, for work without a parallel part."""
        nonlocal t
        start = t
        block = dur_us * block_fraction
        serial = max(dur_us - block, 0.0)
        if uses_core:
            core_us = serial * cpu.scale if serial > 0 else 0.0
        else:
            core_us = serial
        if core_us > 0:
            t = t + core_us
        record_cpu_work(recorder, lane, name, category, start, core_us, t, step, rank)
        if block > 0:
            t0, t = t, t + block
            recorder.span(Span(lane, name, "busy", t0, block, step, rank, category=category))

    def busy(name: str, dur_us: float, category: str, step: int, op: HostOpPlan | None = None):
        if op is not None and op.threads > 1 and tail[0] is not None:
            if not tail[0].triggered:
                tail[0].succeed()       # the spinning team's next region begins
            tail[0] = None
        start = env.now
        serial, par, block = dur_us, 0.0, 0.0
        if op is not None:
            par, block = dur_us * op.parallel_fraction, dur_us * op.block_fraction
            serial = max(dur_us - par - block, 0.0)
        ref = op.corun_ref if op is not None else 0.0
        if uses_core and par > 0 and cpu.contended:
            # torch's ops alternate a serial part (dispatch, Python) and a parallel region:
            # in slices, so a worker that runs during part of the op meets both in proportion
            # (the serial part first, then the parallel, hid every stall behind the serial
            # part whenever a worker's batch was shorter than it)
            # the team's other threads spin through each serial part (team_spin_us > 0)
            core_us, k = 0.0, INTERLEAVE_SLICES
            # (not a team of more threads than cores: libgomp then spins 100 times only)
            spin = cpu.spin_us > 0 and op.threads <= cpu.cores
            for _ in range(k):
                stop = env.event() if spin and serial > 0 else None
                if stop is not None:
                    spinning = env.process(team_spin(cpu, op.threads - 1, 1e18, stop))
                core_us += yield from cpu.work(serial / k, ref)
                if stop is not None:
                    stop.succeed()
                    yield spinning
                core_us += yield from cpu.parallel_work(par * op.threads / k, op.threads, ref)
            if spin:     # and after its last region, until they sleep or the next op begins
                tail[0] = env.event()
                env.process(team_spin(cpu, op.threads - 1, cpu.spin_us, tail[0]))
        elif uses_core:
            core_us = 0.0
            if co_left[0] > 0 and serial > 0:     # released by a barrier: on the shared core
                core_us, serial = yield from co_core_work(cpu, serial, ref, co_left[0])
                if serial > 1e-9:
                    co_left[0] = 0.0                # spread again: the rest on the pool
            core_us += yield from cpu.work(serial, ref)
            if par > 0:
                core_us += yield from cpu.parallel_work(par * op.threads, op.threads, ref)
        else:
            core_us = serial + par
            if core_us > 0:
                yield env.timeout(core_us)
        record_cpu_work(recorder, lane, name, category, start, core_us, env.now, step, rank)
        if block > 0:
            t0 = env.now
            yield env.timeout(block)
            recorder.span(Span(lane, name, "busy", t0, block, step, rank, category=category))

    def block(name: str, cause: str, step: int, targets: tuple[tuple[int, str], ...]):
        evs = [events.done(rank, s, tid) for s, tid in targets]
        pending = [e for e in evs if not e.processed]
        if not pending:
            return
        start = env.now
        yield pending[0] if len(pending) == 1 else simpy.AllOf(env, pending)
        if env.now > start:
            recorder.span(Span(lane, name, "wait", start, env.now - start, step, rank, cause=cause))
            waits_out.append(HostWait(rank, step, start, env.now, cause, targets))

    for step in step_range(n_steps, rank):
        step_starts.append(t)
        syncing = sync_step(step)
        if adaptive:
            simple = cpu.free()
        if delay_us > 0:
            if simple:
                run_ahead("straggle", delay_us, "straggle", step)
            else:
                yield from busy("straggle", delay_us, "straggle", step)
        for op in ops:
            if op.optimizer and not syncing:
                if op.kind == "launch":
                    fire_launch(step, op.task, t)
                continue
            kind = op.kind
            if adaptive:
                simple = cpu.free()
            dur_us = op.dur_us if op.replay_us is None else op.replay_us[step]
            if kind == "cpu" and op.samples is not None and op.replay_us is None:
                dur_us = op.samples.sample(rng)
            if kind == "cpu" and op.lag is not None:
                # drawn every step (the stream stays aligned), paid by the step's one payer:
                # the last to enter, or a coin where the others waited under 3 ms
                lag_us = op.lag.sample(rng)
                if lag_us > 0 and events.pays_lag(rank, step, op.lag_task, rng):
                    yield from catch_up()
                    start = env.now
                    yield env.timeout(lag_us)
                    recorder.span(Span(lane, "late resume", "wait", start, lag_us, step, rank,
                                       cause="core"))
                    t = env.now
            if kind == "cpu" and op.wall:
                if simple:
                    start, t = t, t + dur_us
                    if dur_us > 0:
                        recorder.span(Span(lane, op.name, "busy", start, dur_us, step, rank,
                                           category=op.category))
                    continue
                yield from catch_up()       # not simple: it uses a core of a contended pool
                start = env.now
                held = yield from cpu.hold(dur_us)
                record_cpu_work(recorder, lane, op.name, op.category, start, held, env.now,
                                step, rank)
                t = env.now
                continue
            if simple and kind == "cpu" and op.parallel_fraction <= 0 and co_left[0] <= 0:
                run_ahead(op.name, dur_us, op.category, step, op.block_fraction)
                continue
            if simple and kind == "launch" and op.block_cause is None and (
                    launch_queue.pending + min(op.slots, launch_queue.capacity)
                    <= launch_queue.capacity):
                launch_queue.take(step, op.task, op.slots)   # slots free: it cannot block
                run_ahead(op.name, dur_us, "launch", step)
                fire_launch(step, op.task, t)
                continue
            yield from catch_up()
            if kind == "launch":
                full = launch_queue.take(step, op.task, op.slots)
                if full is not None:
                    start = env.now
                    yield full
                    recorder.span(Span(lane, "launch queue full", "wait", start, env.now - start,
                                       step, rank, cause="launch_queue"))
                yield from busy(op.name, dur_us, "launch", step)
                events.launched(rank, step, op.task).succeed(env.now)
                if op.block_cause is not None:
                    yield from block(op.name, op.block_cause, step, ((step, op.task),))
            elif kind == "cpu":
                yield from busy(op.name, dur_us, op.category, step, op)
            elif kind == "sync":
                yield from busy(op.name, dur_us, "sync", step)
                targets = tuple((step + off, tid) for off, tid in op.targets if step + off >= 0)
                yield from block(op.name, "sync", step, targets)
                co_left[0] = op.co_core_us
            else:   # next_batch
                yield from loader.next_batch(step, None if op.replay_us is None else dur_us)
            t = env.now
    yield from catch_up()
    step_starts.append(env.now)
