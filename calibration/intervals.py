"""Interval arithmetic on numpy arrays of start and end instants (any one unit, ns in the
calibration): the union of intervals, membership of instants, covered length, and the part of
one union that another leaves uncovered (exposed communication)."""
from __future__ import annotations

import numpy as np

__all__ = ["union", "in_union", "union_len", "exposed_ns"]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals [starts, ends) as (starts, ends) sorted and disjoint."""
    if not len(starts):
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    emax = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > emax[:-1]
    idx = np.nonzero(new)[0]
    us = s[idx]
    ue = np.maximum.reduceat(e, idx)
    return us, ue


def in_union(t: np.ndarray, iv: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per instant of ``t``, whether it lies in the union ``iv`` (from :func:`union`)."""
    s, e = iv
    if not len(s):
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(s, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < e[i[ok]]
    return out


def union_len(s: np.ndarray, e: np.ndarray) -> int:
    """Total length of the union of [s, e)."""
    us, ue = union(s, e)
    return int((ue - us).sum()) if len(us) else 0


def exposed_ns(comm_iv, other_iv) -> float:
    """Length (ns) of the union ``comm_iv`` not covered by the union ``other_iv``."""
    cs, ce = comm_iv
    os_, oe = other_iv
    total = 0
    for s, e in zip(cs.tolist(), ce.tolist()):
        covered = 0
        i = int(np.searchsorted(oe, s, side="right"))
        while i < len(os_) and os_[i] < e:
            covered += min(e, oe[i]) - max(s, os_[i])
            i += 1
        total += (e - s) - covered
    return float(total)
