"""Which core's run queue each thread of :class:`models.cpu.CpuPool` sits on, and the share of
a core that gives it: the per-core bookkeeping behind the pool's placed threads and intra-op
teams (the placement rules and their measurements are :mod:`models.cpu_place`'s; how the pool
runs work with them is :mod:`models.cpu`'s).

:class:`CoreQueues` is a base of ``CpuPool``: it holds the threads per core (``loads``), the
team threads per core (``team_loads``), the counts of team, placed and pending team threads,
when each named thread became runnable and last ended work, and the core each was placed on.
It reads the pool's ``env``, ``cores``, ``contended``, ``active`` and ``_stall_of``.
"""
from __future__ import annotations

from stepsim.models.cpu_place import (BALANCE_AFTER_US, balanced_share, least_loaded,
                                      placed_share, team_rate, team_shares)

__all__ = ["CoreQueues"]


class CoreQueues:
    """The per-core run queues of a CPU pool (see the module docstring)."""

    def init_queues(self, cores: int) -> None:
        """Empty queues on ``cores`` cores: team threads and placed threads per core."""
        self.loads = [0] * cores
        self.team_loads = [0] * cores
        self.team_threads = self.placed = 0
        self.pending = 0           # team threads placed whose work has not begun yet
        self.since: dict = {}      # thread -> when it became runnable (µs)
        self.last_end: dict = {}   # thread -> when its last work ended (µs)
        self.core_of: dict = {}    # thread -> the core it was placed on

    def _enter(self, thread, crew):
        """Place a thread entering the contended pool: a team thread on the core with the
        fewest team threads, a thread that woke on the least-loaded core (kept while it stays
        runnable), one runnable :data:`BALANCE_AFTER_US` or longer, or without an identity,
        balanced (None)."""
        if not self.contended:
            return None
        if crew is not None:
            self.pending -= 1
            return ("team", crew.pop())     # a core :meth:`_place_team` chose
        if thread is None:
            return None
        now = self.env.now
        j = None
        if abs(self.last_end.get(thread, -1.0) - now) <= 1e-9:
            j = self.core_of.get(thread)      # straight on from its last work: still runnable
        else:
            self.since[thread] = now          # it woke
        if now - self.since[thread] >= BALANCE_AFTER_US:
            return None
        if j is None:
            j = least_loaded(self.loads)
        self.loads[j] += 1
        self.placed += 1
        self.core_of[thread] = j
        return ("placed", j)

    def _place_team(self, threads: int) -> list[int]:
        """Cores for a team's ``threads`` threads, each on the core with the fewest team
        threads (then the fewest threads): all placed at once, so every thread of the team
        sees the same cores from the start."""
        cores = []
        for _ in range(threads):
            j = min(range(self.cores), key=lambda c: (self.team_loads[c], self.loads[c]))
            self.loads[j] += 1
            self.team_loads[j] += 1
            self.team_threads += 1
            cores.append(j)
        self.pending += threads
        return cores

    def _unplace(self, place, team_cores) -> None:
        if place is None:
            return
        j = place[1]
        self.loads[j] -= 1
        if place[0] == "team":
            self.team_loads[j] -= 1
            self.team_threads -= 1
            team_cores.remove(j)
        else:
            self.placed -= 1

    def _fluid(self) -> bool:
        """Whether the cores are shared per core now: a team and a placed thread runnable,
        more threads than cores (else the fair pool's round robin)."""
        return (self.team_threads > 0 and self.placed > 0
                and self.active + self.pending > self.cores)

    def _rate(self, place, team_cores) -> float:
        """Advance per unit of wall of a thread placed as ``place`` (models/cpu_place.py)."""
        balanced = self.active + self.pending - self.team_threads - self.placed
        if place is None:
            r = balanced_share(self.loads, balanced)
        elif place[0] == "placed":
            r = placed_share(self.loads, balanced, place[1])
        else:
            r = team_rate(team_shares(self.loads, balanced, team_cores),
                          self._stall_of(len(team_cores)))
        return max(r, 1e-9)
