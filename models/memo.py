"""Steps that repeat: solved once per (state, durations), replayed after.

A rank solved without events (:mod:`models.solo`) evolves as a function of its state at the
step's start and the step's durations, nothing else: the same relative state (when each
stream is free, the launches and slots still pending, the ends that later tasks or syncs can
still ask for, all measured from the step's start) and the same drawn durations give the same
step, moved in time. So the first time a (state, durations) pair occurs the step is solved
and its output captured; each later time its spans, task runs and host waits are replayed
moved by the difference in start instant and step number, and the state it ended in is set.
In steady state a model without random durations solves one step and replays the rest; one
whose ``cpu`` ops or batches draw from measured samples, one step per combination drawn.

Relative instants are compared rounded to 0.1 ns (:data:`KEY_DECIMALS`): a state that
differs by less replays the step captured from the other; the state a replay ends in is the
captured one, exact, moved.
"""
from __future__ import annotations

from stepsim.models.device import TaskPlan, TaskRun
from stepsim.models.host import HostOpPlan, HostWait
from stepsim.simcore.record import Block, ListRecorder, Recorder, Span

__all__ = ["StepMemo", "memoizable", "KEY_DECIMALS", "MAX_ENTRIES"]

KEY_DECIMALS = 4
"""Relative instants (µs) are compared rounded to this many decimals."""
MAX_ENTRIES = 64
"""Most distinct steps kept; later new ones are solved without being kept."""


def memoizable(ops: list[HostOpPlan], streams: dict[str, list[TaskPlan]]) -> bool:
    """Whether steps can be replayed: every device task is launched by the host (no stream
    runs ahead of it) and no window replay's per-step values are in play."""
    return all(op.replay_us is None for op in ops) and all(
        p.launched and p.replay_us is None and p.replay_gap_us is None
        for ps in streams.values() for p in ps)


class _Runs:
    """Forwards task runs and keeps a copy."""

    def __init__(self, out):
        self.out, self.kept = out, []

    def append(self, r: TaskRun) -> None:
        self.kept.append(r)
        self.out.append(r)


class _Waits(list):
    """Forwards host waits and keeps a copy."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def append(self, w: HostWait) -> None:
        super().append(w)
        self.out.append(w)


class _Tee(ListRecorder):
    """Forwards spans and keeps a copy (neither when ``out`` keeps none: a replay's spans
    would go nowhere)."""

    def __init__(self, out: Recorder):
        super().__init__()
        self.out = out
        self.keeps = out.keeps

    def span(self, span: Span) -> None:
        if self.keeps:
            self.spans.append(span)
            self.out.span(span)


class _Step:
    """One captured step: its output and the state it ended in, relative to its start."""

    def __init__(self, memo: "StepMemo", key, step: int, t: float, rec: Recorder, runs, waits):
        self.memo, self.key, self.step0, self.t0 = memo, key, step, t
        self.rec, self.runs, self.waits = _Tee(rec), _Runs(runs), _Waits(waits)

    def done(self, t: float, dev, lq) -> None:
        """The step is over at ``t``: keep it."""
        self.dur_us = t - self.t0
        self.spans = Block(self.rec.spans, (3,), 5)
        self.task_runs = Block(self.runs.kept, (4, 5, 6, 7), 1)
        self.host_waits = list(self.waits)
        self.end_dev = dev.snapshot(self.step0, self.t0, self.memo.ids)
        self.end_lq = lq.snapshot(self.step0, self.t0)
        del self.rec, self.runs, self.waits
        self.memo.table[self.key] = self

    def replay(self, step: int, t: float, dev, lq, rec: Recorder, runs, waits) -> float:
        """Emit the step moved to ``step`` starting at ``t``, set the state it ends in;
        returns its end (µs)."""
        dt, ds = t - self.t0, step - self.step0
        rec.shifted(self.spans, dt, ds)
        runs.shifted(self.task_runs, dt, ds)
        for w in self.host_waits:
            waits.append(HostWait(w.rank, w.step + ds, w.start_us + dt, w.end_us + dt, w.cause,
                                  tuple((s + ds, k) for s, k in w.tasks)))
        dev.restore(self.end_dev, step, t)
        lq.restore(self.end_lq, step, t)
        return t + self.dur_us


class StepMemo:
    """The captured steps of one rank, by (relative state, drawn durations).

    Args:
        ops, streams: the rank's plans (the sync targets and waited-for tasks are the ends
            a state holds).
        last: the last measured step; steps from ``last - 1`` on are always solved (the
            solver holds back the output after ``last``).
    """

    def __init__(self, ops: list[HostOpPlan], streams: dict[str, list[TaskPlan]], last: int):
        self.ids = {w for ps in streams.values() for p in ps for w in (*p.waits, *p.prev_waits)}
        self.ids |= {k for op in ops if op.kind == "sync" for _, k in op.targets}
        self.last = last
        self.table: dict = {}

    def key(self, step: int, t: float, dev, lq, draws: list, loads: list, syncing: tuple):
        """The step's key, or None where steps are not replayed."""
        if step < 1 or step >= self.last - 1:
            return None
        return (dev.snapshot(step, t, self.ids, KEY_DECIMALS), lq.snapshot(step, t, KEY_DECIMALS),
                tuple(draws),
                tuple(loads), syncing)

    def get(self, key) -> _Step | None:
        return self.table.get(key)

    def capture(self, key, step: int, t: float, rec: Recorder, runs, waits) -> _Step | None:
        """Start capturing the step (None once :data:`MAX_ENTRIES` are kept): the solver
        writes to the capture's ``rec``, ``runs`` and ``waits``, then calls ``done``."""
        if len(self.table) >= MAX_ENTRIES:
            return None
        return _Step(self, key, step, t, rec, runs, waits)
