"""Arrival skew against transfer, per rank, for the collectives and barriers of a simulation.

A collective cannot finish before the last rank enters it, so each rank's time in it splits
into *arrival skew* (from its own entry to the last rank's entry: waiting for a straggler)
and *transfer* (from the last entry to its exit: the communication itself). A barrier
(``dist.barrier()``, a collective that moves no bytes) is all skew but for its message
exchange. :func:`rank_comm` reads the split off the simulated runs (a :class:`TaskRun` is
entered at ``ready_us + gap_us`` and starts when the last rank has entered), per rank, with
barriers apart from the collectives that move data; times are per measured step (µs).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stepsim.models.simulate import SimResult
from stepsim.simcore.units import us_to_ms

__all__ = ["RankComm", "rank_comm", "BARRIER", "COLLECTIVE"]

BARRIER, COLLECTIVE = "barrier", "collective"
"""The two groups: barriers (a zero-byte collective, or one named ``barrier``) and the
collectives that move data."""


@dataclass(frozen=True)
class RankComm:
    """One rank's time in one group of collectives, per measured step (µs).

    Attributes:
        rank: the rank.
        group: :data:`BARRIER` or :data:`COLLECTIVE`.
        count: how many it entered per step.
        in_us: its time in them, entry to exit (what a profiler shows it spending there).
        skew_us: the part spent waiting for the last rank to enter (arrival skew).
        transfer_us: the rest: from the last rank's entry to its exit (transfer).
    """

    rank: int
    group: str
    count: float
    in_us: float
    skew_us: float
    transfer_us: float

    def to_dict(self) -> dict:
        """JSON-ready, times in ms."""
        return {"rank": self.rank, "group": self.group, "count": self.count,
                "in_ms": us_to_ms(self.in_us), "skew_ms": us_to_ms(self.skew_us),
                "transfer_ms": us_to_ms(self.transfer_us)}


def _group(task) -> str:
    named = "barrier" in (task.name or task.id).lower()
    return BARRIER if named or task.bytes == 0 else COLLECTIVE


def rank_comm(result: SimResult) -> list[RankComm]:
    """Per rank and group, the split of its measured window's collectives (entered in the
    window), per measured step; empty for a model of one rank or without collectives."""
    model = result.model
    if model is None or len(result.ranks) < 2:
        return []
    tasks = {tid: t for tid, t in model.task_map().items() if t.kind == "collective"}
    steps = result.step_us.shape[1]
    windows = {r: result.rank_window_us(r) for r in result.ranks}
    acc: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for run in result.runs:
        t = tasks.get(run.task)
        if t is None:
            continue
        entry = run.ready_us + run.gap_us
        w0, w1 = windows[run.rank]
        if not w0 <= entry < w1:
            continue
        a = acc[(run.rank, _group(t))]
        a[0] += 1
        a[1] += run.end_us - entry
        a[2] += run.start_us - entry
        a[3] += run.end_us - run.start_us
    return [RankComm(rank, group, *(v / steps for v in a))
            for (rank, group), a in sorted(acc.items())]
