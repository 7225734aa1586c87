"""What a roofline needs from a trace: each compute kernel's time, the op that launched it,
that op's FLOPs and bytes (:mod:`calibration.op_costs`), its category and phase, and the GPU.

:func:`kernel_work` walks the kernels launched inside the trace's steps. The op of a kernel is
found through the launch→kernel link (:func:`calibration.linking.link`): the launching call's
``External id`` names its CPU op; when no op carries that id (some traces write different
ids on the two sides), the innermost CPU op on the launching thread that encloses the call is
taken. When that op has no counting family (``aten::empty``, a ``record_function`` region),
its enclosing ops are tried, innermost first. An op instance's cost is shared among the
compute kernels it launched in proportion to their durations, and all of them count in the
*class* of its longest kernel (``KernelWork.klass``), so the helper kernels of one op
(im2col, split-K reductions, Winograd transforms: a 3×3 convolution that cuDNN runs as a
transform plus an ``sgemm``) do not split its work across classes. Copies, memsets and
collectives are not roofline work.

Every row is a :class:`KernelWork`; kernels whose op has no shapes keep ``cost`` None and
count as uncovered time. Times are µs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable, build_table
from stepsim.calibration.gpu_kinds import categorize
from stepsim.calibration.intervals import in_union
from stepsim.calibration.trace_context import phase_intervals
from stepsim.calibration.linking import link
from stepsim.calibration.op_costs import OpCost, op_cost, op_family
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import load_trace

__all__ = ["KernelWork", "TraceWork", "kernel_work", "work_from_table", "device_of", "NOT_ROOFLINE"]

NOT_ROOFLINE = ("memcpy", "memset", "communication")
"""Kernel categories that are not compute on the roofline (copies, memsets, collectives)."""
_NEIGHBOURS = 40
"""How many ops on a thread to look through for a shape an op's own args lack."""


@dataclass(frozen=True)
class KernelWork:
    """One compute kernel of a step.

    Attributes:
        name / category / phase: the kernel's name, its DeviceTask category
            (:func:`calibration.gpu_kinds.categorize`) and phase (forward, backward, optimizer, data).
        klass: the roofline class: the category of the longest kernel its op launched (its
            own category when it has no op).
        dur_us: its duration.
        step: the step number its launch lies in.
        op: the CPU op its cost comes from ("" when none).
        flops / bytes: its share of that op's FLOPs and compulsory bytes (0 without cost).
        dtype: the op's element type (``fp32``, ``bf16``, ...; "" without cost).
        cost: the op instance's :class:`OpCost` (None: uncovered).
    """

    name: str
    category: str
    phase: str
    dur_us: float
    step: int
    op: str
    flops: float
    bytes: float
    dtype: str
    cost: OpCost | None
    klass: str = ""


@dataclass(frozen=True)
class TraceWork:
    """A trace's kernels and its GPU. ``device`` is the ``deviceProperties`` entry of its GPU
    (an empty dict when the trace has none); ``steps`` the step numbers, ``step_us`` their
    walls; ``kernel_sum_us`` the summed duration of the compute kernels (collectives
    excluded) that *start* inside the steps' window, the numerator of kernel-sum ÷ step-wall,
    whose denominator is ``sum(step_us)``."""

    path: Path
    kernels: list[KernelWork]
    device: dict
    steps: list[int]
    step_us: list[float]
    kernel_sum_us: float = 0.0

    @property
    def kernel_ratio(self) -> float:
        """Kernel-sum ÷ step-wall over the steps (0 without steps)."""
        wall = sum(self.step_us)
        return self.kernel_sum_us / wall if wall > 0 else 0.0


def device_of(table: EventTable) -> dict:
    """The trace's ``deviceProperties`` entry of the device its kernels ran on (the first
    entry when the id is not found; {} when the trace has none)."""
    props = table.metadata.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return {}
    dev = table.device[table.is_cat("kernel")]
    want = int(np.bincount(dev[dev >= 0]).argmax()) if (dev >= 0).any() else 0
    for p in props:
        if isinstance(p, dict) and p.get("id") == want:
            return p
    return props[0] if isinstance(props[0], dict) else {}


class _Ops:
    """CPU-op lookups: by external id, enclosing ops of an instant on a thread, neighbours."""

    def __init__(self, table: EventTable):
        self.t = table
        self.ts, self.end = table.ts_ns, table.end_ns
        rows = np.nonzero(table.is_cat("cpu_op") & (table.ph == "X"))[0]
        o = np.lexsort((-table.dur_ns[rows], table.ts_ns[rows], table.tid[rows], table.pid[rows]))
        self.rows = rows[o]
        self.pos = {int(r): i for i, r in enumerate(self.rows.tolist())}
        self.by_ext: dict[int, list[int]] = {}
        for r, e in zip(rows.tolist(), table.external_id[rows].tolist()):
            if e >= 0:
                self.by_ext.setdefault(e, []).append(r)
        self.threads: dict[tuple[int, int], np.ndarray] = {}
        keys = np.stack([table.pid[self.rows], table.tid[self.rows]], axis=1)
        for k in {tuple(x) for x in keys.tolist()}:
            sel = (keys[:, 0] == k[0]) & (keys[:, 1] == k[1])
            self.threads[k] = self.rows[sel]
        self._args: dict[int, dict] = {}
        self._cost: dict[int, OpCost | None] = {}

    def args(self, r: int) -> dict:
        if r not in self._args:
            a = self.t.event(r).get("args")
            self._args[r] = a if isinstance(a, dict) else {}
        return self._args[r]

    def enclosing(self, launch: int) -> list[int]:
        """CPU ops enclosing the call ``launch`` on its thread, innermost first (the thread's
        ops are in start order, longer first at one start)."""
        t = self.t
        th = self.threads.get((int(t.pid[launch]), int(t.tid[launch])))
        if th is None:
            return []
        ts = int(t.ts_ns[launch])
        i = int(np.searchsorted(self.ts[th], ts, side="right"))
        near = th[max(0, i - 400):i]
        return near[self.end[near] >= ts][::-1].tolist()

    def op_of(self, launch: int) -> int:
        """The op row whose cost a kernel launched by ``launch`` shares (−1: none)."""
        t = self.t
        ts = int(t.ts_ns[launch])
        outer = self.enclosing(launch)
        ext = int(t.external_id[launch])
        own = [r for r in self.by_ext.get(ext, ()) if self.ts[r] <= ts <= self.end[r]] \
            if ext >= 0 else []
        own.sort(key=lambda r: -int(t.ts_ns[r]))
        cands = own + [r for r in outer if r not in own
                       and (not own or int(t.ts_ns[r]) <= int(t.ts_ns[own[0]]))]
        for r in cands:
            if op_family(t.names[r]) is not None:
                return r
        return -1

    def _dims(self, r: int):
        a = self.args(r)
        return a.get("Input Dims", a.get("Input dims")), a.get("Input type")

    def _near(self, r: int, after: bool):
        """Up to ``_NEIGHBOURS`` ops after (or before, nearest first) op ``r`` on its thread."""
        th = self.threads[(int(self.t.pid[r]), int(self.t.tid[r]))]
        i = int(np.nonzero(th == r)[0][0])
        return th[i + 1:i + 1 + _NEIGHBOURS] if after else th[max(0, i - _NEIGHBOURS):i][::-1]

    def related(self, r: int) -> list[int] | None:
        """A shape op ``r``'s own args lack (see :func:`calibration.op_costs.op_cost`)."""
        name = self.t.names[r]
        dims, _ = self._dims(r)
        fam = op_family(name)
        if not isinstance(dims, list) or len(dims) < 2:
            return None
        if fam == "conv" and isinstance(dims[0], list) and isinstance(dims[1], list) \
                and len(dims[0]) >= 3 and dims[1]:
            n, cout, end = dims[0][0], dims[1][0], int(self.end[r])
            for q in self._near(r, after=True):
                if int(self.ts[q]) < end:
                    continue
                d, _ = self._dims(int(q))
                if isinstance(d, list) and d and isinstance(d[0], list) and \
                        len(d[0]) == len(dims[0]) and d[0][:2] == [n, cout]:
                    return list(d[0][2:])
            return None
        if fam == "conv_backward" and name.endswith("_weight"):
            go = dims[1]
            for after in (False, True):
                for q in self._near(r, after):
                    q = int(q)
                    if self.t.names[q].endswith("_backward_input"):
                        d, _ = self._dims(q)
                        if isinstance(d, list) and len(d) > 2 and d[1] == go:
                            return d[2]
        return None

    def cost(self, r: int) -> OpCost | None:
        if r not in self._cost:
            a = self.args(r)
            dims, types = self._dims(r)
            rel = self.related(r)
            name = self.t.names[r]
            self._cost[r] = op_cost(name, dims, types, a.get("Concrete Inputs"),
                                    a.get("flops"), rel)
        return self._cost[r]


def kernel_work(trace: str | Path, step_regex: str | None = None) -> TraceWork:
    """:func:`work_from_table` of a trace file.

    Raises:
        InputError: the file cannot be read as a trace (see :func:`load_trace`).
    """
    return work_from_table(build_table(load_trace(trace)), step_regex)


def work_from_table(table: EventTable, step_regex: str | None = None) -> TraceWork:
    """The compute kernels of every step of ``table`` with their ops' costs."""
    steps = find_steps(table, step_regex)
    links = link(table)
    ops = _Ops(table)
    gpu, launch = links.gpu_rows, links.launch_row
    kern = table.cat[gpu] == "kernel"
    gpu, launch = gpu[kern], launch[kern]
    t0 = np.where(launch >= 0, table.ts_ns[np.maximum(launch, 0)], table.ts_ns[gpu])
    rows: list[tuple] = []
    phases: dict[int, tuple] = {}
    for s in steps:
        inside = (t0 >= s.start_ns) & (t0 < s.end_ns)
        if not inside.any():
            continue
        if s.pid not in phases:
            phases[s.pid] = phase_intervals(table, s.pid)
        ivb, ivo, ivd = phases[s.pid]
        g, l, tt = gpu[inside], launch[inside], t0[inside]
        phase = np.full(len(g), "forward", dtype=object)
        phase[in_union(tt, ivd)] = "data"
        lt = np.where(l >= 0, table.tid[np.maximum(l, 0)], s.tid)
        phase[(lt != s.tid) | in_union(tt, ivb)] = "backward"
        phase[in_union(tt, ivo)] = "optimizer"
        for gi, li, ph in zip(g.tolist(), l.tolist(), phase.tolist()):
            cat = categorize(table.names[gi], "kernel")
            if cat in NOT_ROOFLINE:
                continue
            op = ops.op_of(li) if li >= 0 else -1
            rows.append((gi, cat, ph, s.number, op))
    share: dict[int, float] = {}
    longest: dict[int, tuple[float, str]] = {}
    for gi, cat, _, _, op in rows:
        if op >= 0:
            d = float(table.dur_ns[gi])
            share[op] = share.get(op, 0.0) + d
            if d > longest.get(op, (-1.0, ""))[0]:
                longest[op] = (d, cat)
    out = []
    for gi, cat, ph, num, op in rows:
        dur = float(table.dur_ns[gi])
        cost = ops.cost(op) if op >= 0 else None
        f = dur / share[op] if cost is not None and share[op] > 0 else 0.0
        out.append(KernelWork(str(table.names[gi]), cat, ph, dur / 1000.0, num,
                              str(table.names[op]) if op >= 0 else "",
                              cost.flops * f if cost else 0.0, cost.bytes * f if cost else 0.0,
                              cost.dtype if cost else "", cost,
                              longest[op][1] if op >= 0 else cat))
    ksum = 0.0
    if steps:
        ks = np.nonzero(table.is_cat("kernel") & (table.ph == "X") &
                        (table.ts_ns >= steps[0].start_ns) & (table.ts_ns < steps[-1].end_ns))[0]
        ksum = sum(float(table.dur_ns[r]) for r in ks.tolist()
                   if categorize(table.names[r], "kernel") not in NOT_ROOFLINE) / 1000.0
    return TraceWork(Path(table.path), out, device_of(table), [s.number for s in steps],
                     [s.dur_us for s in steps], ksum)
