"""Interval arithmetic on ``[start_us, end_us)`` pairs (µs): union, its length, the length of
one union minus another, and exposed communication (communication not under compute).
"""
from __future__ import annotations

from itertools import chain

import numpy as np

EPS_US = 1e-6
"""Tolerance (µs): a length at most this counts as zero."""


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length (µs) of the union of ``[start, end)`` intervals."""
    return sum(e - s for s, e in merge(intervals))


def merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals as a sorted list of disjoint ``(start, end)`` pairs (intervals
    that touch are joined)."""
    if len(intervals) < 64:
        out: list[list[float]] = []
        for s, e in sorted(intervals):
            if out and s <= out[-1][1]:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return [(s, e) for s, e in out]
    a = np.fromiter(chain.from_iterable(intervals), float, 2 * len(intervals)).reshape(-1, 2)
    return merge_arrays(a[:, 0], a[:, 1])


def merge_arrays(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """:func:`merge` of intervals given as two arrays (µs), the same pairs."""
    s, e = merged_arrays(starts, ends)
    return list(zip(s.tolist(), e.tolist()))


def merged_arrays(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merge_arrays` as two arrays: the merged intervals' starts and ends (µs)."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((ends, starts))
    s, reach = starts[order], np.maximum.accumulate(ends[order])   # the furthest end so far
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def subtract_length(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Length (µs) of the union of ``a`` minus the union of ``b``."""
    return subtract_merged(merge(a), merge(b))


def subtract_merged(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """:func:`subtract_length` of two unions (outputs of :func:`merge`)."""
    total, j = 0.0, 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                total += b[k][0] - cur
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            total += e - cur
    return total


def exposed_us(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> float:
    """Exposed communication (µs): the union of communication intervals minus the union of
    compute intervals (``[start, end)`` pairs in µs)."""
    return subtract_length(comm, compute)
