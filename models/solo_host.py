"""A rank's host thread solved without events: its ops walked on its own clock.

Shared by :func:`models.solo.solve` (one rank) and :mod:`models.solo_ranks` (ranks that meet
at collectives), with the semantics of :func:`models.host.host_process`: CPU work and launches
add their time (µs) to the host's clock ``t``; a launch first takes its launch-queue slots; a
sync or a pageable copy waits for the tasks it names. :meth:`HostThread.walk` is a generator
that yields wherever the host waits for an end not known yet (the launch queue's
:meth:`taking`, :meth:`HostThread.block`): one rank alone never can go on then (its caller
raises :class:`models.solo.Unsolvable`), ranks together resume it once another rank moved.
"""
from __future__ import annotations

from stepsim.models.host import HostOpPlan, HostWait
from stepsim.models.loader import DataLoaderSim
from stepsim.simcore.record import Recorder, Span, record_cpu_work

__all__ = ["HostThread"]


class HostThread:
    """One rank's host thread: its clock ``t`` (µs), where it records (``rec``, ``waits``:
    swapped while a step is captured), its device ``dev`` and launch queue ``lq``.

    Args: as :func:`models.host.host_process`; ``workers``: the DataLoader's workers as a
        :class:`models.solo_loader.SoloLoader` (None: ``loader`` produces each batch on the
        main thread); ``barrier``: the ranks' rendezvous (its ``moves`` count a first wait),
        None for a rank alone.
    """

    def __init__(self, rank: int, ops: list[HostOpPlan], delay_us: float, uses_core: bool,
                 cpu_scale: float, loader: DataLoaderSim, rng, sync_step, dev, lq,
                 rec: Recorder, waits, workers=None, barrier=None):
        self.rank, self.ops, self.delay_us, self.uses_core = rank, ops, delay_us, uses_core
        self.cpu_scale, self.loader, self.rng, self.sync_step = cpu_scale, loader, rng, sync_step
        self.dev, self.lq, self.rec, self.waits = dev, lq, rec, waits
        self.workers, self.barrier = workers, barrier
        self.lane = f"rank{rank}.host"
        self.t = 0.0
        self.calls: list | None = None   # while captured: the next() calls, relative to t0
        self.t0 = 0.0
        self.drawing = [op for op in ops if op.kind == "cpu" and op.samples is not None
                        and op.replay_us is None]
        self.batches = [op for op in ops if op.kind == "next_batch"]
        # per op, what the walk reads of it each step: the op, its kind's code (cpu 0,
        # launch 1, sync 2, next_batch 3), whether it draws, skipped under no_sync, its
        # blocked fraction
        codes = {"cpu": 0, "launch": 1, "sync": 2}
        self._plan = [(op, codes.get(op.kind, 3), op.kind == "cpu" and op.samples is not None
                       and op.replay_us is None, op.optimizer, op.block_fraction) for op in ops]

    def draw(self, step: int) -> tuple[list[float], list[float]]:
        """The step's random durations, drawn first (in op order, as the processes draw
        them): the CPU ops' and, without workers, the main thread's batches."""
        syncing = self.sync_step(step)
        draws = [op.samples.sample(self.rng) for op in self.drawing
                 if syncing or not op.optimizer]
        if self.workers is not None:
            return draws, []
        # a batch on the main process's threads, which fit the cores here: its wall is its
        # work over them (models.loader.DataLoaderSim.main_threads)
        loader = self.loader
        return draws, [loader.main_thread_draw_us(r) / loader.main_threads(r) for r in (
            None if op.replay_us is None else op.replay_us[step]
            for op in self.batches if syncing or not op.optimizer)]

    def n_batches(self, step: int) -> int:
        syncing = self.sync_step(step)
        return sum(1 for op in self.batches if syncing or not op.optimizer)

    def cpu(self, name: str, dur_us: float, category: str, step: int, block_fraction: float
            ) -> float:
        """CPU work of ``dur_us`` from ``t`` (the blocked fraction not on a core); its end."""
        t, rec = self.t, self.rec
        block = dur_us * block_fraction
        serial = dur_us - block if dur_us > block else 0.0
        core_us = (serial * self.cpu_scale if serial > 0 else 0.0) if self.uses_core else serial
        end = t + core_us if core_us > 0 else t
        record_cpu_work(rec, self.lane, name, category, t, core_us, end, step, self.rank)
        if block > 0:
            rec.span(Span(self.lane, name, "busy", end, block, step, self.rank, "", category))
            end += block
        return end

    def block(self, name: str, cause: str, step: int, targets: tuple[tuple[int, str], ...]):
        """Generator: wait for ``targets``; returns when they are done (µs)."""
        dev, first = self.dev, True
        # the host waits: copies may be granted up to what it waits for
        dev.host_lb, dev.host_wait = None, (self.t, float("inf"))
        if dev.entered:
            dev.pump()
        while True:
            end = t = self.t
            done = dev.done
            for s, tid in targets:
                e = done.get(s, {}).get(tid)
                if e is None:
                    break
                if e > end:
                    end = e
            else:
                break
            if first and self.barrier is not None:
                self.barrier.moves += 1
            first = False
            yield
        dev.host_lb = end
        if end > t:
            self.rec.span(Span(self.lane, name, "wait", t, end - t, step, self.rank, cause, ""))
            self.waits.append(HostWait(self.rank, step, t, end, cause, targets))
        return end

    def walk(self, step: int, draws: list[float], loads: list[float]):
        """Generator: the host's ops of ``step`` (``draws``, ``loads``: :meth:`draw`'s).

        Where the recorder keeps no span (draws, sweeps' step times), CPU work is the
        arithmetic of :meth:`cpu` inlined, the same operations in the same order."""
        dev, lq, lane, rank, loader = self.dev, self.lq, self.lane, self.rank, self.loader
        rec, workers = self.rec, self.workers
        keeps, immediate = rec.keeps, not lq.yields
        scale, uses_core, cpu = self.cpu_scale, self.uses_core, self.cpu
        launched, take = dev.launched, lq.take
        syncing = self.sync_step(step)
        draw, load = iter(draws), iter(loads)
        if self.delay_us > 0:
            self.t = cpu("straggle", self.delay_us, "straggle", step, 0.0)
        for op, kind, drawn, optimizer, bf in self._plan:
            if optimizer and not syncing:
                if kind == 1:
                    dev.host_lb = self.t
                    launched(step, op.task, self.t)
                continue
            dur_us = op.dur_us if op.replay_us is None else op.replay_us[step]
            if kind == 0:   # cpu
                if drawn:
                    dur_us = next(draw)
                if keeps:
                    self.t = cpu(op.name, dur_us, op.category, step, bf)
                    continue
                # self.cpu without its spans
                block = dur_us * bf
                serial = dur_us - block if dur_us > block else 0.0
                core_us = (serial * scale if serial > 0 else 0.0) if uses_core else serial
                end = self.t + core_us if core_us > 0 else self.t
                if block > 0:
                    end += block
                self.t = end
            elif kind == 1:   # launch
                t = self.t
                if immediate:
                    got = take(t, step, op.task, op.slots)
                else:
                    got = yield from lq.taking(t, step, op.task, op.slots)
                if got > t:
                    rec.span(Span(lane, "launch queue full", "wait", t, got - t, step, rank,
                                  "launch_queue", ""))
                    self.t = got
                if keeps:
                    self.t = dev.host_lb = cpu(op.name, dur_us, "launch", step, 0.0)
                else:   # self.cpu of a launch (block_fraction 0) without its spans
                    t = self.t
                    block = dur_us * 0.0
                    serial = dur_us - block if dur_us > block else 0.0
                    core_us = (serial * scale if serial > 0 else 0.0) if uses_core else serial
                    self.t = dev.host_lb = t + core_us if core_us > 0 else t
                launched(step, op.task, self.t)
                if op.block_cause is not None:
                    self.t = yield from self.block(op.name, op.block_cause, step,
                                                   ((step, op.task),))
            elif kind == 2:   # sync
                self.t = cpu(op.name, dur_us, "sync", step, 0.0)
                self.t = yield from self.block(op.name, "sync", step, tuple(
                    (step + off, tid) for off, tid in op.targets if step + off >= 0))
            elif workers is not None:   # next_batch from the DataLoader's workers
                t_call = self.t
                self.t = workers.next_batch(t_call, step, rec)
                if self.calls is not None:
                    self.calls.append((t_call - self.t0, self.t - self.t0))
            else:   # next_batch, produced on the main thread (no workers)
                work_us = next(load)
                core_us = work_us * loader.cpu.scale if work_us > 0 else 0.0
                record_cpu_work(rec, lane, "load batch (main thread)", "data", self.t,
                                core_us, self.t + core_us, step, rank)
                self.t += core_us
                loader.returned_on_main()
