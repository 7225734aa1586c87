"""Device memory over the step from a ``profile_memory=True`` trace's ``[memory]`` events.

Each ``[memory]`` instant event (``ph`` ``i``) records one allocation (``Bytes`` > 0) or free
(``Bytes`` < 0) of the caching allocator on ``Device Type`` 1 (CUDA; 0 is the host) and, since
PyTorch 1.10, the allocator's ``Total Allocated`` and ``Total Reserved`` after it. Older traces
(1.9) carry ``Bytes`` only: the allocated curve is then known up to its starting level
(``absolute`` False) and reserved memory not at all.

:func:`memory_profile` gives, for the trace's device, per step: allocated at the step's start,
its peak and where, reserved at the peak; and the largest allocations of the window by the op
that made them (the innermost CPU op on the allocating thread that encloses the event). Bytes
throughout.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.roofline_inputs import device_of
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import load_trace

__all__ = ["StepMemory", "MemoryProfile", "memory_profile", "memory_from_table"]

CUDA_DEVICE_TYPE = 1
"""``Device Type`` of GPU memory in Kineto's memory events (c10::DeviceType::CUDA; HIP
builds record their GPU as CUDA too)."""


@dataclass(frozen=True)
class StepMemory:
    """One step's device memory (bytes): ``start`` allocated at its start, ``peak`` the most
    allocated inside it, ``end`` at its end, ``reserved_at_peak`` the allocator's reserved
    bytes then (NaN when not recorded), ``peak_at_us`` the peak's instant from the step's
    start."""

    step: int
    start: float
    peak: float
    end: float
    reserved_at_peak: float
    peak_at_us: float


@dataclass(frozen=True)
class MemoryProfile:
    """Device memory of a trace.

    Attributes:
        steps: per step, :class:`StepMemory`.
        absolute: whether levels are the allocator's own totals (else relative to the trace's
            first memory event, which is taken as 0).
        device_bytes: the GPU's memory (``deviceProperties.totalGlobalMem``; 0 unknown).
        largest: (op name, bytes, count) of the window's allocations, largest total first.
        curve_us / curve_bytes: allocated bytes after each event, µs from the first step's
            start (for a plot).
        events: memory events of the device inside the steps.
    """

    steps: list[StepMemory]
    absolute: bool
    device_bytes: float
    largest: list[tuple[str, float, int]] = field(default_factory=list)
    curve_us: np.ndarray = field(default_factory=lambda: np.zeros(0))
    curve_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    events: int = 0


def memory_profile(trace: str | Path, step_regex: str | None = None) -> MemoryProfile | None:
    """:func:`memory_from_table` of a trace file."""
    return memory_from_table(build_table(load_trace(trace)), step_regex)


def _num(v, default=np.nan) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def memory_from_table(table: EventTable, step_regex: str | None = None) -> MemoryProfile | None:
    """The device memory profile of ``table``; None when it has no device memory events (the
    trace was not recorded with ``profile_memory=True``) or no steps."""
    rows = np.nonzero((table.names == "[memory]") & (table.ph == "i"))[0]
    if not len(rows):
        return None
    args = [table.event(r).get("args") or {} for r in rows.tolist()]
    dev = np.array([_num(a.get("Device Type"), -1) == CUDA_DEVICE_TYPE for a in args])
    rows = rows[dev]
    args = [a for a, d in zip(args, dev) if d]
    steps = find_steps(table, step_regex)
    if not len(rows) or not steps:
        return None
    ids = np.array([_num(a.get("Device Id"), -1) for a in args])
    want = np.bincount(ids[ids >= 0].astype(int)).argmax() if (ids >= 0).any() else -1
    keep = ids == want
    rows, args = rows[keep], [a for a, k in zip(args, keep) if k]
    order = np.argsort(table.ts_ns[rows], kind="stable")
    rows, args = rows[order], [args[i] for i in order]
    ts = table.ts_ns[rows]
    delta = np.array([_num(a.get("Bytes"), 0.0) for a in args])
    total = np.array([_num(a.get("Total Allocated")) for a in args])
    reserved = np.array([_num(a.get("Total Reserved")) for a in args])
    absolute = bool(np.isfinite(total).all())
    alloc = total if absolute else np.cumsum(delta)
    out = []
    for s in steps:
        i0, i1 = np.searchsorted(ts, [s.start_ns, s.end_ns])
        if i1 <= i0:
            continue
        start = alloc[i0 - 1] if i0 > 0 else alloc[i0] - delta[i0]
        seg = alloc[i0:i1]
        k = int(np.argmax(seg))
        out.append(StepMemory(s.number, float(start), float(max(seg[k], start)),
                              float(seg[-1]), float(reserved[i0 + k]),
                              (int(ts[i0 + k]) - s.start_ns) / 1000.0))
    if not out:
        return None
    w0, w1 = steps[0].start_ns, steps[-1].end_ns
    inside = (ts >= w0) & (ts < w1)
    return MemoryProfile(out, absolute, float(device_of(table).get("totalGlobalMem") or 0),
                         _largest(table, rows[inside & (delta > 0)], delta[inside & (delta > 0)]),
                         (ts[inside] - w0) / 1000.0, alloc[inside], int(inside.sum()))


_ALLOC_OPS = re.compile(r"^aten::(empty|empty_strided|empty_like|zeros|zeros_like|ones|"
                        r"ones_like|new_empty|new_empty_strided|new_zeros|resize_|to|_to_copy|"
                        r"clone|contiguous)$")
"""Allocation primitives: an allocation is charged to the op that called them."""


def _largest(table: EventTable, rows: np.ndarray, nbytes: np.ndarray, top: int = 8):
    """(op, total bytes, count) of allocations by the innermost enclosing CPU op that is not
    an allocation primitive (:data:`_ALLOC_OPS`)."""
    ops = np.nonzero(table.is_cat("cpu_op") & (table.ph == "X"))[0]
    by: dict[str, list] = {}
    threads: dict[tuple, np.ndarray] = {}
    for r, b in zip(rows.tolist(), nbytes.tolist()):
        key = (int(table.pid[r]), int(table.tid[r]))
        if key not in threads:
            sel = ops[(table.pid[ops] == key[0]) & (table.tid[ops] == key[1])]
            threads[key] = sel[np.argsort(table.ts_ns[sel], kind="stable")]
        th = threads[key]
        t = int(table.ts_ns[r])
        i = int(np.searchsorted(table.ts_ns[th], t, side="right"))
        name = "(no op)"
        for q in th[max(0, i - 200):i][::-1].tolist():
            if table.end_ns[q] >= t and not _ALLOC_OPS.match(str(table.names[q])):
                name = str(table.names[q])
                break
        acc = by.setdefault(name, [0.0, 0])
        acc[0] += b
        acc[1] += 1
    return sorted(((n, v[0], v[1]) for n, v in by.items()), key=lambda x: -x[1])[:top]
