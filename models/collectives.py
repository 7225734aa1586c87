"""Collectives seen across ranks (µs): a collective's time split into arrival skew and
transfer (:func:`split_collective`), and per collective task of one rank, observed vs skew vs
transfer with the bus bandwidth read from each (:func:`collective_stats`), and the straggler.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from stepsim.models.ddp import ring_bus_bytes
from stepsim.models.device import TaskRun
from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.simulate import SimResult
from stepsim.simcore.errors import ModelError


@dataclass(frozen=True)
class CollectiveSplit:
    """One collective seen from every rank (µs).

    Attributes:
        transfer_us: the last rank's time in it (from its entry to its exit): the transfer.
        skew_us: per rank, the time it waited in the collective for the last rank to enter.
        straggler: the rank that entered last.
    """

    transfer_us: float
    skew_us: dict[int, float]
    straggler: int


def split_collective(enter_us: dict[int, float], exit_us: dict[int, float]) -> CollectiveSplit:
    """Split a collective's time on each rank into arrival skew and transfer: it cannot finish
    before the last rank enters, so transfer is read from that rank, never from the mean.

    Args:
        enter_us / exit_us: per rank, the instants (µs) it entered and left the collective.

    Raises:
        ModelError: no ranks, the two maps name different ranks, or a rank leaves before it
            enters.
    """
    if not enter_us or set(enter_us) != set(exit_us):
        raise ModelError(f"enter_us and exit_us must name the same ranks, got "
                         f"{sorted(enter_us)} and {sorted(exit_us)}")
    for r in enter_us:
        if exit_us[r] < enter_us[r]:
            raise ModelError(f"rank {r} leaves the collective ({exit_us[r]}) before it enters "
                             f"({enter_us[r]})")
    last = max(enter_us, key=lambda r: (enter_us[r], r))
    t_last = enter_us[last]
    return CollectiveSplit(exit_us[last] - t_last, {r: t_last - t for r, t in enter_us.items()},
                           last)


@dataclass(frozen=True)
class CollectiveStat:
    """One collective task of the summarised rank, per step (µs).

    ``observed_us`` is what a profiler shows as the kernel (entry to exit, skew included);
    ``apparent_busbw_gbps`` the bus bandwidth read naively from it; ``busbw_gbps`` the one
    from the transfer alone (0 without bytes).
    """

    task: str
    name: str
    bytes: int
    observed_us: float
    skew_us: float
    transfer_us: float
    apparent_busbw_gbps: float
    busbw_gbps: float


def collective_stats(result: SimResult, rank: int, w0: float, w1: float, steps: int
                     ) -> tuple[list[CollectiveStat], int | None]:
    """Each collective task of ``rank`` entered in ``[w0, w1)``: its :class:`CollectiveStat`
    per step (of ``steps``); and the straggler, the rank whose late entries caused the most skew
    (None: one rank or no skew)."""
    model = result.model
    if model is None:
        return [], None
    tasks = model.task_map()
    n = model.comm.world_size
    mine: dict[str, list[TaskRun]] = defaultdict(list)
    entries: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    for r in result.runs:
        t = tasks.get(r.task)
        if t is None or t.kind != "collective":
            continue
        entries[(r.step, r.task)][r.rank] = r.ready_us + r.gap_us   # entered
        if r.rank == rank and w0 <= r.ready_us < w1:
            mine[r.task].append(r)
    stats = []
    for tid, rs in mine.items():
        t = tasks[tid]
        obs = sum(r.end_us - r.ready_us - r.gap_us for r in rs) / steps
        skew = sum(r.start_us - r.ready_us - r.gap_us for r in rs) / steps
        xfer = sum(r.end_us - r.start_us for r in rs) / steps
        moved = ring_bus_bytes(t.bytes or 0, n) * len(rs) / steps
        stats.append(CollectiveStat(tid, t.name or tid, t.bytes or 0, obs, skew, xfer,
                                    moved / obs / 1e3 if obs > 0 else 0.0,
                                    moved / xfer / 1e3 if xfer > 0 else 0.0))
    lateness: dict[int, float] = defaultdict(float)   # rank -> skew it caused, summed
    for ent in entries.values():
        late = max(ent, key=lambda r: (ent[r], r))
        if len(ent) > 1 and ent[late] - min(ent.values()) > _EPS:
            lateness[late] += ent[late] - min(ent.values())
    straggler = max(lateness, key=lambda r: lateness[r]) if lateness else None
    return stats, straggler
