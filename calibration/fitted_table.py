"""A rank file read and fitted in one worker (:func:`read_and_fit`), and what comes back of its
table (:class:`FittedTable`).

A folder of GPU ranks was read in one pool of processes, each slimmed table (about 0.5 MB a
DLRM rank) pickled back to the parent, then fitted in a second pool forked from it: the two
pools' tails and the tables' round trip cost about a second of 256 ranks. A worker that reads
a file with GPU activity now fits it at once (:func:`calibration.gpu.fit_one`, the same call
the second pool made) and sends back only what the parent reads of the table before the fits
are used (its path, metadata, rank, bounds, warnings) with the fit. The fit is speculative: a
table the folder's checks leave out (another job's world size, a host-only file among GPU
ranks is never fitted) has its fit dropped unread, as its table was never fitted before.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["FittedTable", "read_and_fit"]


@dataclass
class FittedTable:
    """What the parent reads of a fitted rank's :class:`~calibration.events.EventTable` (the
    same names), and ``fit``: its :class:`~calibration.rank_fit.RankFit` or the
    :class:`~calibration.rank_pool.Problem` its fit raised."""

    path: Path | None
    metadata: dict
    base_ns: int
    ts_ns: np.ndarray      # the table's first and last ``ts_ns`` (its bounds), or empty
    n: int                 # the table's rows
    warnings: list[str] = field(default_factory=list)
    _raw: Any = None       # the RawTrace without its events (its metadata and path: the rank)
    fit: Any = None

    def __len__(self) -> int:
        return self.n

    def gpu_mask(self) -> np.ndarray:
        """A fitted table has GPU activity (only those are fitted)."""
        return np.ones(1, dtype=bool)

    @classmethod
    def of(cls, table, fit) -> "FittedTable":
        ts = table.ts_ns
        bounds = np.array([ts.min(), ts.max()], dtype=ts.dtype) if len(ts) else ts[:0].copy()
        raw = None if table._raw is None else replace(table._raw, events={})
        return cls(table.path, table.metadata, table.base_ns, bounds, len(table),
                   list(table.warnings), raw, fit)


def read_and_fit(read: Callable, fit: Callable, f: Path):
    """``read(f)``, and where the table has GPU activity, a :class:`FittedTable` holding
    ``fit(table)`` (an InputError it raises as its :class:`~calibration.rank_pool.Problem`)."""
    from stepsim.calibration.events import EventTable
    from stepsim.calibration.rank_pool import guarded

    table = read(f)
    if not isinstance(table, EventTable) or not table.gpu_mask().any():
        return table
    return FittedTable.of(table, guarded(fit, table))
