"""Job steps that repeat across ranks: solved once per (state, durations), replayed after.

Ranks solved together without events (:mod:`models.solo_ranks`) evolve, from the instant
every host starts step ``s``, as a function of the job's state then and of the step's
durations, nothing else: each rank's state relative to its own host's step start (as
:mod:`models.memo` has it for one rank, plus the streams parked on a collective or a shared
copy engine, each engine's free instant and the host's lower bound on its next launch), each
host's start relative to rank 0's, and the collectives' rendezvous (entries so far, starts not
yet read, who is parked) relative to rank 0's start. The solver holds every host at the start
of step ``s`` until all are there (:class:`JobMemo` is asked then); the first time a
(state, durations) pair occurs the job's step, up to every host's start of step ``s + 1``, is
solved and its spans, task runs and host waits captured; each later time they are replayed
moved by the difference in start instant and step number, and the state it ended in is set
on every rank. In steady state a job without random durations solves one step and replays the
rest: a few operations per rank a step, not one per op.

Relative instants are compared rounded (:data:`models.memo.KEY_DECIMALS`); the state a replay
ends in is the captured one, exact, moved. Holding the hosts never changes what is solved
(each is a max-plus function of what is known), except where a held host's next launch is
what another rank waits for: the solver then lets every host go on and tries again at the
next step's start.
"""
from __future__ import annotations

from stepsim.models.device import TaskRun
from stepsim.models.host import HostWait
from stepsim.models.memo import KEY_DECIMALS, _Tee, _Waits, memoizable
from stepsim.models.solo import _rounding
from stepsim.simcore.record import Block, NullRecorder

__all__ = ["JobMemo", "JOB_MAX_ENTRIES"]

JOB_MAX_ENTRIES = 8
"""Most distinct job steps kept (each holds every rank's records of one step)."""


class _JobRuns:
    """Forwards task runs and keeps a copy (only each (rank, step)'s last end when the sink
    keeps no runs: all that a replay then needs)."""

    def __init__(self, out):
        self.out, self.kept = out, {}
        self.all = getattr(out, "keep", True)
        self.rows: list[TaskRun] = []

    def append(self, r: TaskRun) -> None:
        self.out.append(r)
        if self.all:
            self.rows.append(r)
        else:
            k = (r.rank, r.step)
            got = self.kept.get(k)
            if got is None or r.end_us > got.end_us:
                self.kept[k] = r

    def block(self) -> Block:
        return Block(self.rows if self.all else list(self.kept.values()), (4, 5, 6, 7), 1)


def _dev_extra(dev, t: float, nd: int | None) -> tuple:
    """A rank device's cross-rank state relative to ``t``: parked streams, copy-engine
    requests and free instants, the host's launch bound."""
    r = _rounding(nd)
    h = dev.host_lb
    return (tuple(sorted((i, r(a - t), r(b - t), g) for i, (a, b, g) in dev.entered.items())),
            tuple(sorted((e, tuple(sorted((i, r(v - t)) for i, v in d.items())))
                         for e, d in dev.requests.items())),
            tuple(sorted((e, r(v - t)) for e, v in dev.engine_free.items())),
            r(h - t) if h is not None else None,
            None if h is not None else tuple(r(v - t) for v in dev.host_wait))


def _set_dev_extra(dev, snap: tuple, t: float) -> None:
    entered, requests, free, h, wait = snap
    dev.entered = {i: (a + t, b + t, g) for i, a, b, g in entered}
    dev.requests = {e: {i: v + t for i, v in d} for e, d in requests}
    dev.engine_free = {e: v + t for e, v in free}
    dev.host_lb = None if h is None else h + t
    if wait is not None:
        dev.host_wait = (wait[0] + t, wait[1] + t)


def _barrier_state(b, step: int, t: float, index: dict, nd: int | None) -> tuple:
    """The rendezvous relative to ``step`` and ``t`` (parked devices by rank position)."""
    r = _rounding(nd)
    return (tuple(sorted((s - step, k, n, r(v - t)) for (s, k), (n, v) in b.entries.items())),
            tuple(sorted((s - step, k, r(v - t), n) for (s, k), (v, n) in b.starts.items())),
            tuple(sorted((s - step, k, tuple(index[id(d)] for d in ds))
                         for (s, k), ds in b.parked.items())))


def _set_barrier(b, snap: tuple, step: int, t: float, devs: list) -> None:
    entries, starts, parked = snap
    b.entries = {(s + step, k): [n, v + t] for s, k, n, v in entries}
    b.starts = {(s + step, k): [v + t, n] for s, k, v, n in starts}
    b.parked = {(s + step, k): [devs[i] for i in ds] for s, k, ds in parked}


class _JobStep:
    """One captured job step: every rank's output and end state, relative to its start."""

    def __init__(self, key, step: int, t0s: list[float], rec, runs, waits):
        self.key, self.step0, self.t0s = key, step, t0s
        self.rec = rec if isinstance(rec, NullRecorder) else _Tee(rec)
        self.runs, self.waits = _JobRuns(runs), _Waits(waits)


class JobMemo:
    """The captured steps of a job of ranks (:class:`models.solo_ranks._Rank`), by
    (relative state, drawn durations).

    Args:
        ranks: the job's ranks; each has ``dev``, ``lq``, ``host`` (its clock ``host.t``,
            µs) and ``r`` (its plans).
        barrier: the collectives' rendezvous.
        last: the last measured step; steps from ``last - 1`` on are always solved.
        keep_waits: whether the host waits' sink keeps them (else replays emit none).
    """

    def __init__(self, ranks: list, barrier, last: int, keep_waits: bool = True):
        self.ranks, self.barrier, self.last = ranks, barrier, last
        self.keep_waits = keep_waits
        self.ids = []
        for x in ranks:
            ids = {w for ps in x.r.streams.values() for p in ps for w in (*p.waits, *p.prev_waits)}
            self.ids.append(ids | {k for op in x.r.ops if op.kind == "sync" for _, k in op.targets})
        self.index = {id(x.dev): i for i, x in enumerate(ranks)}
        self.on = all(memoizable(x.r.ops, x.r.streams) for x in ranks)
        self.table: dict = {}
        self.states: dict = {}   # relative state -> its number (a key holds the number)
        self.capture: _JobStep | None = None
        self.pending = None   # (a replayed capture, its step, dt): end state not set yet

    def holds(self, step: int) -> bool:
        """Whether hosts are held at the start of ``step`` (to key it or close a capture)."""
        return self.on and 1 <= step < self.last

    def _state(self, step: int, base: list[float], t: float, nd: int | None) -> tuple:
        ranks = self.ranks
        return (tuple(x.dev.snapshot(step, b, self.ids[i], nd) for i, (x, b) in
                      enumerate(zip(ranks, base))),
                tuple(x.lq.snapshot(step, b, nd) for x, b in zip(ranks, base)),
                tuple(_dev_extra(x.dev, b, nd) for x, b in zip(ranks, base)),
                _barrier_state(self.barrier, step, t, self.index, nd))

    def at_start(self, step: int, draws: list, syncing: tuple, rec, runs, waits):
        """Every host is at the start of ``step``: close a capture, then replay the step if
        it occurred before (returns True: every host's clock is set to the step's end; the
        rest of the state only once a step is solved again, :meth:`settle`) or start
        capturing it; the caller routes the output through :meth:`sinks`."""
        ranks = self.ranks
        cap, self.capture = self.capture, None
        if cap is not None:
            cap.t_ends = [x.host.t - b for x, b in zip(ranks, cap.t0s)]
            cap.end = self._state(cap.step0, cap.t0s, cap.t0s[0], None)
            cap.spans = Block(getattr(cap.rec, "spans", []), (3,), 5)
            cap.task_runs = cap.runs.block()
            cap.host_waits = list(cap.waits)
            cap.next_state = None
            del cap.rec, cap.runs, cap.waits
            self.table[cap.key] = cap
        if step >= self.last - 1:
            self.settle()
            return False
        chain = self.pending
        if chain is not None and chain[0].next_state is not None:
            state = chain[0].next_state   # what follows a replayed step is known
        else:
            self.settle()
            t = ranks[0].host.t
            t0s = [x.host.t for x in ranks]
            state = (tuple(round(b - t, KEY_DECIMALS) for b in t0s),
                     self._state(step, t0s, t, KEY_DECIMALS))
            state = self.states.setdefault(state, len(self.states))   # hashed once
            if chain is not None:
                chain[0].next_state = state
        key = (state, tuple(draws), syncing)
        hit = self.table.get(key)
        if hit is None:
            self.settle()
            if len(self.table) < JOB_MAX_ENTRIES:
                self.capture = _JobStep(key, step, [x.host.t for x in ranks], rec, runs, waits)
            return False
        dt, ds = ranks[0].host.t - hit.t0s[0], step - hit.step0
        rec.shifted(hit.spans, dt, ds)
        runs.shifted(hit.task_runs, dt, ds)
        for w in hit.host_waits if self.keep_waits else ():
            waits.append(HostWait(w.rank, w.step + ds, w.start_us + dt, w.end_us + dt, w.cause,
                                  tuple((s + ds, k) for s, k in w.tasks)))
        for x, b, e in zip(ranks, hit.t0s, hit.t_ends):
            x.host.t = b + dt + e
        self.pending = (hit, step, dt)
        return True

    def settle(self) -> None:
        """Set the state the last replayed step ended in on every rank (a run of replayed
        steps sets only the hosts' clocks until then)."""
        if self.pending is None:
            return
        hit, step, dt = self.pending
        self.pending = None
        ranks = self.ranks
        devs, lqs, extra, bar = hit.end
        for i, x in enumerate(ranks):
            b = hit.t0s[i] + dt
            x.dev.restore(devs[i], step, b)
            x.lq.restore(lqs[i], step, b)
            _set_dev_extra(x.dev, extra[i], b)
        _set_barrier(self.barrier, bar, step, hit.t0s[0] + dt, [x.dev for x in ranks])

    def drop(self) -> None:
        """The hosts could not all be held at a step's start: the capture is abandoned."""
        self.capture = None

    def sinks(self, rec, runs, waits) -> tuple:
        """Where the ranks write while a step is captured (the given sinks otherwise)."""
        c = self.capture
        return (rec, runs, waits) if c is None else (c.rec, c.runs, c.waits)
