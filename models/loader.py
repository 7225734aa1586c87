"""DataLoader model: worker processes, the bounded prefetch pipeline, the pin-memory thread and
the main thread's share of the work.

Semantics follow ``torch/utils/data/dataloader.py`` (``_MultiProcessingDataLoaderIter``):

* ``_reset`` sends ``prefetch_factor × num_workers`` indices when an iterator starts (every
  epoch); ``_try_put_index`` is called once per batch returned to the user, so at most
  ``num_workers × prefetch_factor`` batches are outstanding (sent, not yet returned);
* indices go to workers round-robin (``_worker_queue_idx_cycle``); with ``in_order=False`` a
  worker is skipped while it holds ``prefetch_factor`` unreturned tasks, so a slow worker
  cannot hoard the indices;
* each worker serves its own index queue in FIFO order (``_worker_loop``);
* ``_next_data`` returns batch ``rcvd_idx`` next, an early batch waiting in the reorder buffer
  (head-of-line blocking); with ``in_order=False`` batches are returned as they arrive;
* with ``pin_memory`` one thread of the main process (``_pin_memory_loop``) receives every
  batch from the workers (so it pays the unpickling) and pins it, serially, in arrival order
  (batches that arrive at the same instant: the lower index first); without it the main
  thread unpickles;
* ``persistent_workers=False`` starts new workers every epoch (``worker_startup_us``);
* ``num_workers=0`` (``_SingleProcessDataLoaderIter``) produces each batch on the main thread
  inside ``next()``;
* a worker's CPU per batch is its produce time plus ``worker_handover_us`` (the batch's
  hand-over in the worker process, before the main process can receive it).

A batch's produce time is drawn when its index is sent (in index order, from the worker's
distribution), so the draws do not depend on which of two simultaneous events SimPy runs
first; with the pin thread's tie rule, a loader whose threads never wait for a core is then a
function of its durations alone, which :mod:`models.solo_loader` solves without events.

Queue depth: ``rank{r}.loader.ready`` counts the batches ``next()`` could return without
waiting (pinned if ``pin_memory``; in order: the unbroken run from the next index, so batches
stuck behind a late one in the reorder buffer don't count); ``rank{r}.loader.buffered``
counts every batch a worker finished that the main thread has not taken;
``rank{r}.loader.outstanding`` counts indices sent and not yet returned.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import heapq

import numpy as np
import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.params import LoaderParams
from stepsim.simcore.record import Recorder, Span, record_cpu_work
from stepsim.simcore.units import transfer_us


LATE = 2
"""SimPy priority after URGENT (0) and NORMAL (1): an event scheduled with it now runs once
every other event of this instant has."""


def end_of_instant(env: simpy.Environment) -> simpy.Event:
    """An event that fires at ``env.now`` after every URGENT or NORMAL event of this instant."""
    ev = simpy.Event(env)
    ev._ok, ev._value = True, None   # triggered (what Event.succeed sets), at a later priority
    env.schedule(ev, LATE)
    return ev


@dataclass
class LoaderStats:
    """What one rank's DataLoader did (for invariants and reports).

    Attributes:
        produced: batch indices in the order workers finished them.
        consumed: batch indices in the order the main thread returned them.
        max_outstanding: the most batches ever sent and not yet returned.
        max_ready: the most batches ever produced and not yet taken (``buffered``).
        cap: ``num_workers × prefetch_factor`` (0 without workers).
    """

    produced: list[int] = field(default_factory=list)
    consumed: list[int] = field(default_factory=list)
    max_outstanding: int = 0
    max_ready: int = 0
    cap: int = 0


class DataLoaderSim:
    """One rank's DataLoader; the host thread calls ``yield from loader.next_batch(step)``.

    Args:
        env: the SimPy environment.
        params: the loader's parameters.
        cpu: the core pool shared with the host thread.
        rng: this loader's random stream (produce-time samples).
        recorder: span / sample hook.
        rank: rank index written into spans.

    Spans: ``rank{r}.worker{w}`` busy (``produce``) and waits (``cpu_cores``, ``startup``);
    ``rank{r}.pin_memory`` busy (``pin``); on ``rank{r}.host``: waits with cause ``input`` and
    busy spans of category ``data`` (unpickling, or producing when ``num_workers=0``).
    """

    def __init__(self, env: simpy.Environment, params: LoaderParams, cpu: CpuPool,
                 rng: np.random.Generator, recorder: Recorder, rank: int = 0):
        self.env, self.p, self.cpu, self.rng, self.rec, self.rank = env, params, cpu, rng, recorder, rank
        nw = params.num_workers
        specs = params.produce_by_worker or [params.produce] * max(nw, 1)
        self.produce = [s.build() for s in specs]
        self.pin_us = transfer_us(params.batch_bytes, params.pin_gbps) if params.pin_memory else 0.0
        self.host_lane = f"rank{rank}.host"
        self.stats = LoaderStats(cap=nw * params.prefetch_factor)
        self.sent = 0              # indices handed out (global batch counter)
        self.returned = 0          # batches returned to the user
        self.buffered = 0          # produced, not yet taken by the main thread
        self.delivered: set[int] = set()   # through the pin thread, not yet taken
        self.epoch_sent = 0        # indices sent in the current epoch
        self.epoch_returned = 0    # batches returned in the current epoch
        self.startup_until = 0.0   # workers of this epoch can start producing at this instant
        if nw == 0:
            return
        self.max_tasks = nw * params.prefetch_factor
        self.worker_tasks = [0] * nw   # sent to a worker, not yet returned (``_workers_num_tasks``)
        self.queued = [0] * nw         # sent to a worker, not yet produced (its claim on cores)
        self.next_worker = 0
        self.index_q = [simpy.Store(env) for _ in range(nw)]
        # with a pin thread: (arrival instant, index, worker), served lowest first
        self.result_q = simpy.PriorityStore(env) if params.pin_memory else simpy.Store(env)
        self.out_q = simpy.Store(env) if params.pin_memory else self.result_q
        self.reorder: dict[int, int] = {}   # idx -> worker, received early (in-order mode)
        for w in range(nw):
            env.process(self._worker(w))
        if params.pin_memory:
            env.process(self._pin_thread())
        self._start_epoch()

    # -- bookkeeping ---------------------------------------------------------------------
    def _note(self):
        t, st = self.env.now, self.stats
        out = self.sent - self.returned
        if self.p.in_order:
            usable = 0
            while self.returned + usable in self.delivered:
                usable += 1
        else:
            usable = len(self.delivered)
        self.rec.sample(f"rank{self.rank}.loader.ready", t, usable)
        self.rec.sample(f"rank{self.rank}.loader.buffered", t, self.buffered)
        self.rec.sample(f"rank{self.rank}.loader.outstanding", t, out)
        st.max_outstanding = max(st.max_outstanding, out)
        st.max_ready = max(st.max_ready, self.buffered)

    def _deliver(self, idx: int):
        self.delivered.add(idx)
        self._note()

    def _start_epoch(self):
        """A new iterator (``_reset``): new workers unless persistent, then the first
        ``prefetch_factor × num_workers`` indices."""
        p = self.p
        first = self.returned == 0
        if p.worker_startup_us > 0 and (first or not p.persistent_workers):
            self.startup_until = self.env.now + p.worker_startup_us
        self.epoch_sent = self.epoch_returned = 0
        self.next_worker = 0
        for _ in range(self.max_tasks):
            self._try_put_index()

    def _try_put_index(self):
        p = self.p
        if p.batches_per_epoch is not None and self.epoch_sent >= p.batches_per_epoch:
            return   # the sampler is exhausted for this epoch
        nw = p.num_workers
        for _ in range(nw):
            w = self.next_worker
            self.next_worker = (w + 1) % nw
            if p.in_order or self.worker_tasks[w] < self.max_tasks // nw:
                break
        else:
            return
        self.worker_tasks[w] += 1
        self.index_q[w].put((self.sent, self.produce[w].sample(self.rng) + p.worker_handover_us))
        self.queued[w] += 1
        if self.queued[w] == 1:   # the worker was blocked on its index queue: now runnable
            self.cpu.claim(p.threads_per_worker)
        self.sent += 1
        self.epoch_sent += 1
        self._note()

    # -- processes -----------------------------------------------------------------------
    def _worker(self, w: int):
        lane = f"rank{self.rank}.worker{w}"
        tpw = self.p.threads_per_worker
        while True:
            idx, work_us = yield self.index_q[w].get()
            if self.env.now < self.startup_until:
                t0 = self.env.now
                yield self.env.timeout(self.startup_until - t0)
                self.rec.span(Span(lane, "worker start-up", "wait", t0, self.env.now - t0,
                                   rank=self.rank, cause="startup"))
            start = self.env.now
            core_us = yield from self.cpu.parallel_work(work_us, tpw, self.p.corun_ref,
                                                       team=False, thread=(self.rank, w))
            self.queued[w] -= 1
            if not self.queued[w]:
                self.cpu.claim(-tpw)
            record_cpu_work(self.rec, lane, f"batch {idx}", "produce", start,
                             core_us, self.env.now, -1, self.rank)
            self.buffered += 1
            self.stats.produced.append(idx)
            self._note()
            if not self.p.pin_memory:
                self._deliver(idx)
                yield self.result_q.put((idx, w))
            else:
                yield self.result_q.put((self.env.now, idx, w))

    def _pin_thread(self):
        lane = f"rank{self.rank}.pin_memory"
        cost_us = self.p.unpickle_us + self.pin_us
        q = self.result_q
        while True:
            first = yield q.get()
            yield end_of_instant(self.env)   # every batch arriving now is in the queue
            heapq.heappush(q.items, first)
            item = heapq.heappop(q.items)[1:]
            start = self.env.now
            core_us = yield from self.cpu.work(cost_us, thread=(self.rank, "pin"))
            if cost_us > 0:
                record_cpu_work(self.rec, lane, f"pin batch {item[0]}", "pin", start, core_us,
                                 self.env.now, -1, self.rank)
            self._deliver(item[0])
            yield self.out_q.put(item)

    # -- consumer side -------------------------------------------------------------------
    def next_batch(self, step: int, main_thread_us: float | None = None):
        """Process generator run by the host thread: returns (the batch index) when the next
        batch is in the main thread's hands, after unpickling (or producing it when
        ``num_workers=0``). Records its waits and work on the host lane.

        ``main_thread_us``: with ``num_workers=0``, the main thread's time for this batch (µs)
        instead of a draw of ``produce`` (a window replay's measured ``next()`` time)."""
        p = self.p
        if p.num_workers == 0:
            start = self.env.now
            work_us, tpw = self.main_thread_draw_us(main_thread_us), self.main_threads(
                main_thread_us)
            core_us = yield from (self.cpu.parallel_work(
                work_us, tpw, p.corun_ref, team=False, thread=(self.rank, "main"))
                if tpw > 1 else self.cpu.work(work_us, p.corun_ref))
            record_cpu_work(self.rec, self.host_lane, "load batch (main thread)", "data", start,
                             core_us, self.env.now, step, self.rank)
            return self.returned_on_main()
        if p.batches_per_epoch is not None and self.epoch_returned >= p.batches_per_epoch:
            self._start_epoch()   # StopIteration, then the training loop's next iter(loader)
        start = self.env.now
        if p.in_order:
            want = self.returned
            while want not in self.reorder:
                idx, w = yield self.out_q.get()
                self.reorder[idx] = w
            w = self.reorder.pop(want)
            idx = want
        else:
            idx, w = yield self.out_q.get()
        if self.env.now > start:
            self.rec.span(Span(self.host_lane, "next(DataLoader)", "wait", start,
                               self.env.now - start, step, self.rank, cause="input"))
        self.buffered -= 1
        self.delivered.discard(idx)
        self._note()
        if not p.pin_memory and p.unpickle_us > 0:
            t0 = self.env.now
            core_us = yield from self.cpu.work(p.unpickle_us)
            record_cpu_work(self.rec, self.host_lane, "unpickle batch", "data", t0,
                             core_us, self.env.now, step, self.rank)
        self.worker_tasks[w] -= 1
        self.epoch_returned += 1
        out = self._returned(idx)
        self._try_put_index()
        return out

    def main_thread_draw_us(self, main_thread_us: float | None = None) -> float:
        """With ``num_workers=0``: the main thread's CPU work (µs, before the pool's speed
        factor) for the next batch, as :meth:`next_batch` draws it."""
        if main_thread_us is not None:
            return main_thread_us
        return self.produce[0].sample(self.rng) + self.pin_us

    def main_threads(self, main_thread_us: float | None = None) -> int:
        """With ``num_workers=0``: the threads the main process makes a drawn batch on, a
        worker's ``threads_per_worker``: the library threads a worker's process runs beside its
        own (numpy's OpenBLAS team) run in the main process too, where the dataset's code
        runs there (fresh7's audio batches at 0 workers: process CPU 233 ms against 114 ms of
        the main thread's, 2.0×, as in its worker, 351 against 171 ms; 2026-12-07). 1 for a
        window replay's measured ``next()`` time, which is the batch's wall already."""
        return self.p.threads_per_worker if main_thread_us is None else 1

    def returned_on_main(self) -> int:
        """With ``num_workers=0``: the batch produced on the main thread is returned."""
        idx = self.returned
        self.stats.produced.append(idx)
        return self._returned(idx)

    def _returned(self, idx: int) -> int:
        self.returned += 1
        self.stats.consumed.append(idx)
        if self.p.num_workers:
            self._note()
        return idx

