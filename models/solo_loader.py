"""A DataLoader whose threads never wait for a core, solved without events.

When the host's core pool can run every thread at once (no more runnable threads than cores)
and there is no co-run interference, CPU work is a plain delay, and the DataLoader of
:mod:`models.loader` (``in_order``) is a max-plus recurrence over batch indices ``i``:

* index ``i`` is sent (its produce time ``d_i`` drawn) when an iterator starts (the first
  ``prefetch_factor × num_workers`` of an epoch) or when batch ``i − cap`` is returned;
  it goes to worker ``w = (i − e) mod num_workers`` (``e``: the epoch's first index);
* the worker serves its indices in FIFO order: batch ``i`` starts at the latest of its send,
  the worker's previous batch's end and the workers' start-up, and takes
  ``(d_i + worker_handover_us) / threads_per_worker × cpu_scale``;
* the pin-memory thread pins batches in arrival order (the lower index first at a tie), one
  after the other, ``(unpickle_us + pin_us) × cpu_scale`` each;
* the main thread's ``next()`` at ``t`` returns batch ``r`` (the next in order) at the
  latest of ``t`` and its delivery, after unpickling it when nothing pinned it.

:class:`SoloLoader` computes those instants lazily, as the host thread of :mod:`models.solo`
asks for batches, and emits the spans and queue-depth samples the SimPy processes record
(held back until the run's stop is known, as the processes record only what ended by then).
"""
from __future__ import annotations

import heapq
from collections import deque

from stepsim.models.cpu import CpuPool
from stepsim.models.loader import LoaderStats
from stepsim.models.memo import KEY_DECIMALS
from stepsim.models.params import LoaderParams
from stepsim.simcore.record import Recorder, Span, record_cpu_work
from stepsim.simcore.units import transfer_us

__all__ = ["SoloLoader", "loader_solvable"]

# state changes, in the order they follow each other at one instant (a batch's chain)
_PRODUCED, _DELIVERED, _TAKEN, _RETURNED, _SENT = range(5)


def loader_solvable(params: LoaderParams, cpu: CpuPool) -> bool:
    """Whether the DataLoader can be solved without events: workers returning batches in
    order, on a core pool where no thread waits for a core and nothing slows co-runners."""
    return params.num_workers > 0 and params.in_order and not cpu.contended \
        and cpu.interference <= 0


class SoloLoader:
    """One rank's DataLoader as a recurrence; the host calls :meth:`next_batch`, then
    :meth:`finish` once the run's stop instant is known.

    Args:
        params: the loader's parameters (``num_workers`` > 0, ``in_order``).
        scale: the core pool's speed factor (``HostParams.cpu_scale``).
        rng: the loader's random stream (produce times, drawn at each send as the processes
            draw them).
        rank: rank index written into spans.
    """

    def __init__(self, params: LoaderParams, scale: float, rng, rank: int = 0):
        self.p, self.scale, self.rng, self.rank = params, scale, rng, rank
        nw = params.num_workers
        specs = params.produce_by_worker or [params.produce] * nw
        self.produce = [s.build() for s in specs]
        pin_us = transfer_us(params.batch_bytes, params.pin_gbps) if params.pin_memory else 0.0
        self.pin_cost_us = params.unpickle_us + pin_us
        self.stats = LoaderStats(cap=nw * params.prefetch_factor)
        self.cap = nw * params.prefetch_factor
        self.host_lane = f"rank{rank}.host"
        self.lanes = [f"rank{rank}.worker{w}" for w in range(nw)]
        self.worker_free = [0.0] * nw
        self.arrived: list[float] = []      # per index: when its worker finished it
        self.delivered: list[float] = []    # per index: when next() could take it
        self.unpinned: list[tuple[float, int]] = []   # (arrival, index) not yet pinned
        self.pin_free = 0.0
        self.sent = self.returned = 0
        self.epoch_first = self.epoch_sent = self.epoch_returned = 0
        self.startup_until = 0.0
        self.spans: list[Span] = []          # worker and pin spans, emitted by finish()
        self.changes: list[tuple[float, int, int]] = []   # (instant, kind, index)
        self.drawn: deque[float] = deque()   # produce times drawn ahead (:meth:`key`)
        self._start_epoch(0.0)

    # -- the producer side -------------------------------------------------------------------
    def _start_epoch(self, t: float) -> None:
        p = self.p
        if p.worker_startup_us > 0 and (self.returned == 0 or not p.persistent_workers):
            self.startup_until = t + p.worker_startup_us
        self.epoch_first, self.epoch_sent, self.epoch_returned = self.sent, 0, 0
        for _ in range(self.cap):
            self._send(t)

    def _send(self, t: float) -> None:
        """Send the next index at ``t`` (if the epoch has one left) and schedule its worker."""
        p = self.p
        if p.batches_per_epoch is not None and self.epoch_sent >= p.batches_per_epoch:
            return
        i, w = self.sent, (self.sent - self.epoch_first) % p.num_workers
        work_us = (self.drawn.popleft() if self.drawn else self.produce[w].sample(self.rng)
                   ) + p.worker_handover_us
        self.sent += 1
        self.epoch_sent += 1
        self.changes.append((t, _SENT, i))
        start = self.worker_free[w] if self.worker_free[w] > t else t
        lane = self.lanes[w]
        if start < self.startup_until:
            until = start + (self.startup_until - start)
            self.spans.append(Span(lane, "worker start-up", "wait", start, until - start,
                                   -1, self.rank, "startup", ""))
            start = until
        tpw = p.threads_per_worker
        if tpw <= 1:
            core_us = work_us * self.scale if work_us > 0 else 0.0
            end = start + core_us if work_us > 0 else start
        else:
            each = work_us / tpw * self.scale if work_us / tpw > 0 else 0.0
            end = start + each if each > 0 else start
            core_us = sum([each] * tpw) / tpw
        record_cpu_work(self, lane, f"batch {i}", "produce", start, core_us, end, -1, self.rank)
        self.worker_free[w] = end
        self.arrived.append(end)
        self.changes.append((end, _PRODUCED, i))
        if p.pin_memory:
            self.delivered.append(float("nan"))
            heapq.heappush(self.unpinned, (end, i))
        else:
            self.delivered.append(end)
            self.changes.append((end, _DELIVERED, i))

    keeps = True   # as a recorder (record_cpu_work's): its spans are held back

    def span(self, span: Span) -> None:   # record_cpu_work's recorder: held back
        self.spans.append(span)

    def _pin_through(self, want: int | None) -> float | None:
        """Pin, in arrival order, every batch up to ``want`` (None: every batch sent); returns
        when ``want`` is delivered (µs). Every batch arriving before it is sent by now (unsent
        ones are sent once ``want`` is returned)."""
        while want is None and self.unpinned or want is not None and \
                self.delivered[want] != self.delivered[want]:   # NaN: not pinned yet
            self._pin_next()
        return None if want is None else self.delivered[want]

    def _pin_next(self) -> None:
        """The pin thread pins the earliest arrival (the lower index at a tie)."""
        arrival, i = heapq.heappop(self.unpinned)
        start = self.pin_free if self.pin_free > arrival else arrival
        end = start
        if self.pin_cost_us > 0:
            core_us = self.pin_cost_us * self.scale
            end = start + core_us
            record_cpu_work(self, f"rank{self.rank}.pin_memory", f"pin batch {i}", "pin", start,
                            core_us, end, -1, self.rank)
        self.pin_free = end
        self.delivered[i] = end
        self.changes.append((end, _DELIVERED, i))

    def _pin_before(self, t: float) -> None:
        """Pin every batch that arrived before ``t`` (those pinned before them arrived
        earlier still, so they are all sent)."""
        while self.unpinned and self.unpinned[0][0] < t:
            self._pin_next()

    def key(self, t: float, sends: int) -> tuple | None:
        """The loader's state at ``t`` (µs) as far as it can still matter, relative to ``t``
        and the next index to return, with the produce times of the next ``sends`` indices
        (drawn now, used when they are sent): two steps that start with the same key and host
        state return their batches at the same relative instants (:mod:`models.memo`). None
        with epochs (their counters never repeat). Instants before ``t`` are cut to ``t``
        where only their lateness can matter (a worker's or the pin thread's end, a
        delivery)."""
        p = self.p
        if p.batches_per_epoch is not None:
            return None
        nw, nd = p.num_workers, KEY_DECIMALS
        while len(self.drawn) < sends:
            self.drawn.append(self.produce[(self.sent + len(self.drawn)) % nw].sample(self.rng))
        if p.pin_memory:
            self._pin_before(t)
        w0 = self.sent % nw
        free = tuple(round(max(self.worker_free[(w0 + k) % nw] - t, 0.0), nd) for k in range(nw))
        out = tuple(round(max(self.delivered[j] - t, 0.0), nd) if self.delivered[j] ==
                    self.delivered[j] else (round(self.arrived[j] - t, nd),)
                    for j in range(self.returned, self.sent))
        return (tuple(list(self.drawn)[:sends]), free, out, round(max(self.pin_free - t, 0.0), nd),
                round(max(self.startup_until - t, 0.0), nd))

    # -- the consumer side -------------------------------------------------------------------
    def next_batch(self, t: float, step: int, rec: Recorder) -> float:
        """The main thread's ``next()`` at ``t`` (µs) in ``step``: returns when the batch is in
        its hands (µs); records the host lane's wait and unpickling on ``rec``."""
        p = self.p
        if p.batches_per_epoch is not None and self.epoch_returned >= p.batches_per_epoch:
            self._start_epoch(t)   # StopIteration, then the loop's next iter(loader)
        want = self.returned
        ready = self._pin_through(want) if p.pin_memory else self.delivered[want]
        if ready > t:
            rec.span(Span(self.host_lane, "next(DataLoader)", "wait", t, ready - t, step,
                          self.rank, "input", ""))
            t = ready
        self.changes.append((t, _TAKEN, want))
        if not p.pin_memory and p.unpickle_us > 0:
            core_us = p.unpickle_us * self.scale
            record_cpu_work(rec, self.host_lane, "unpickle batch", "data", t, core_us,
                            t + core_us, step, self.rank)
            t = t + core_us
        self.epoch_returned += 1
        self.returned += 1
        self.stats.consumed.append(want)
        self.changes.append((t, _RETURNED, want))
        self._send(t)
        return t

    def finish(self, stop_us: float, rec: Recorder) -> None:
        """Emit what the processes would have recorded by ``stop_us``: the worker and pin
        spans that ended by then, and the queue-depth samples (``rank{r}.loader.ready``,
        ``.buffered``, ``.outstanding``) of every state change until then."""
        if self.p.pin_memory:
            self._pin_through(None)   # nothing is sent any more
        for sp in self.spans:
            if sp.start_us + sp.dur_us <= stop_us:
                rec.span(sp)
        st, r = self.stats, self.rank
        names = [f"rank{r}.loader.{k}" for k in ("ready", "buffered", "outstanding")]
        sent = returned = buffered = 0
        delivered: set[int] = set()
        for t, kind, i in sorted(self.changes):
            if t > stop_us:
                break
            if kind == _SENT:
                sent += 1
            elif kind == _PRODUCED:
                buffered += 1
                st.produced.append(i)
            elif kind == _DELIVERED:
                delivered.add(i)
            elif kind == _TAKEN:
                buffered -= 1
                delivered.discard(i)
            else:
                returned += 1
            usable = 0
            while returned + usable in delivered:
                usable += 1
            rec.sample(names[0], t, usable)
            rec.sample(names[1], t, buffered)
            rec.sample(names[2], t, sent - returned)
            st.max_outstanding = max(st.max_outstanding, sent - returned)
            st.max_ready = max(st.max_ready, buffered)
