"""The steps a simulation's SimPy processes loop over, which the caller may raise.

A run of ``n`` steps and the first steps of a longer run with the same seed are one run up to
the instant a process first asks for a step past ``n`` (the processes, their random streams
and the loader see the count only as their loop bound; :mod:`models.extend`). A
:class:`StepBound` is that loop bound, read where each process starts its next step: raised
before any process asked past it, the run goes on as the longer run from its start would;
once one did (:attr:`StepBound.refused`), it can no longer be raised.
"""
from __future__ import annotations

import simpy

__all__ = ["StepBound", "step_range"]


class StepBound:
    """Steps ``0 .. n - 1``, ``n`` raisable while no process has asked for step ``n``.

    Attributes:
        n: the steps each process runs.
        refused: whether a process asked for step ``n`` (its loop ended there).
    """

    def __init__(self, n: int):
        self.n = n
        self.refused = False
        self._watch: dict[tuple[int, int], simpy.Event] = {}

    def steps(self, rank: int | None = None):
        """The step numbers one process runs, read one at a time; ``rank``: the host thread
        of that rank, whose start of a watched step (:meth:`watch`) triggers its event."""
        step = 0
        while step < self.n:
            if rank is not None and self._watch:
                ev = self._watch.pop((rank, step), None)
                if ev is not None:   # the host appends the step's start right after
                    ev.succeed()
            yield step
            step += 1
        self.refused = True

    def watch(self, env: simpy.Environment, rank: int, step: int) -> simpy.Event:
        """An event triggered when ``rank``'s host thread starts ``step`` (one that is only
        triggered: it resumes no process, so the run's other events keep their order)."""
        ev = self._watch.get((rank, step))
        if ev is None:
            ev = self._watch[(rank, step)] = env.event()
        return ev

    def raise_to(self, n: int) -> bool:
        """Run ``n`` steps instead (at least the current ``n``); False, and nothing changed,
        where a process already asked past the current bound."""
        if self.refused or n < self.n:
            return False
        self.n = n
        return True


def step_range(n_steps, rank: int | None = None):
    """The steps a process runs: ``range(n_steps)`` for a fixed count, else those of the
    :class:`StepBound` (``rank``: as :meth:`StepBound.steps`)."""
    return range(n_steps) if isinstance(n_steps, int) else n_steps.steps(rank)
