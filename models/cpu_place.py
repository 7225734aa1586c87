"""Per-core placement beside torch's intra-op team (:class:`models.cpu.CpuPool`), in closed form.

Linux time-slices each core's run queue on its own. Measured here (2 cores, 2026-12-04/05,
load 1.4–2.4, ``/proc/<pid>/task/*/schedstat`` per thread, a small CNN's fwd/bwd loop on
torch's default 2 threads beside a process that is busy ``B`` ms of CPU then sleeps 10–20 ms):

* the two team threads sit one per core, and a worker that wakes lands on one core's queue and
  stays there (97 % of its runnable samples on one core at ``B`` = 20 ms): it holds that core
  half the time it is runnable (0.48–0.59 at ``B`` = 10–100 ms, where the pool's fair share
  is 2/3), the team thread there the other half, while the other team thread keeps its own
  core (0.95 of the wall; it spins at the barriers);
* the team then advances at the share of its slowest thread: the step took ×1.42–1.56 its
  wall alone beside a worker runnable 2/3 of the time, ``1/3 + 2/3 × 1/2`` = ×1.5;
* two workers, one per core: two always-busy ones gave every thread 0.49 of a core and the
  step ×3.15 (median; mean ×3.9), two spinners resumed for each step ×4.17 (median of 16),
  the team's threads holding their cores independently: ``(1/2)^(1+γ)``, ``γ`` 0.65–1.06
  (×4 at ``γ`` 1);
* a thread that stays runnable is balanced across the cores: at ``B`` = 300 ms, 1 s and
  always busy the worker held 0.66, 0.67 and 0.68–0.73 of a core, the fair 2/3.

So a thread that woke (:data:`BALANCE_AFTER_US` ago at most) is *placed* on the least-loaded
core's queue (the team's threads count one each on their cores, so it joins a team core when
every core has one) and shares that core equally with the threads there; a thread runnable
longer is *balanced*: spread over every core (``b / c`` of a thread on each). Each team
thread holds its core's share; the team advances at its slowest thread's share times the
others' shares to the power ``γ`` (``host.team_stall``): ``s^(1 + γ(T−1))`` when every share is
``s``, the fair pool's form, and ``1/2`` beside one placed worker on 2 cores, whatever ``γ``.
"""
from __future__ import annotations

BALANCE_AFTER_US = 300_000.0
"""Runnable time after which a thread is balanced across the cores, not held to the queue it
woke on (inferred: the worker's share while runnable was 0.48–0.59 for bursts of 10–100 ms of
CPU, 20–200 ms runnable, and the fair 0.66–0.67 for 300 ms and longer; between the two the
measurement does not place it)."""


def least_loaded(loads: list[float]) -> int:
    """The core with the fewest threads on its queue (the first such)."""
    return min(range(len(loads)), key=lambda j: loads[j])


def effective(loads: list[float], balanced: int) -> list[float]:
    """Threads per core: those placed on it plus the balanced ones spread over every core."""
    extra = balanced / len(loads)
    return [m + extra for m in loads]


def placed_share(loads: list[float], balanced: int, core: int) -> float:
    """Share of a core a thread placed on ``core`` holds (the core's queue shared equally)."""
    m = effective(loads, balanced)[core]
    return 1.0 if m <= 1.0 else 1.0 / m


def team_shares(loads: list[float], balanced: int, cores: list[int]) -> list[float]:
    """:func:`placed_share` of each team thread's core (``cores``: one entry a thread), the
    same values, each core's worked out once: a team of 256 threads on 2 cores built the
    cores' loads 256 times a quantum (80 % of a simulation beside 8 workers)."""
    per_core = [1.0 if m <= 1.0 else 1.0 / m for m in effective(loads, balanced)]
    return [per_core[j] for j in cores]


def balanced_share(loads: list[float], balanced: int) -> float:
    """Share of a core each balanced thread holds: the core time the placed threads leave,
    spread over the balanced threads, at most one core each."""
    if balanced <= 0:
        return 1.0
    eff = effective(loads, balanced)
    used = sum(m / e if e > 1.0 else m for m, e in zip(loads, eff))
    return max(0.0, min(1.0, (len(loads) - used) / balanced))


def team_rate(shares: list[float], stall: float) -> float:
    """A team's advance per unit of wall: its slowest thread's share times the others' shares
    to the power ``stall`` (``γ``): every thread holds its core a share of the time, each core
    on its own, and a region ends with its slowest thread."""
    if not shares:
        return 1.0
    lo = min(shares)
    rate = lo
    skipped = False
    for s in shares:
        if s == lo and not skipped:
            skipped = True
            continue
        rate *= s ** stall
    return rate
