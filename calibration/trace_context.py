"""Per-trace lookups shared by the step fits (:class:`TraceContext`), each step's launching
calls and the GPU activities they launched (:func:`step_acts`), and the phase of an instant.

**Phases** (``forward``, ``backward``, ``optimizer``, ``data``) come from the host side: a
launch inside an ``Optimizer.step#…``/``zero_grad`` annotation is ``optimizer``; inside a
``…Backward…`` op, an ``autograd::engine::evaluate_function`` or on a launching thread other
than the step's (the autograd engine) ``backward``; inside a DataLoader ``__next__`` or an
H2D copy outside backward/optimizer ``data``; else ``forward``. Host ops carry the phase of
their task (launch, sync) or of the instant they start (cpu).

**Communication kernels without a launching call.** A collective kernel that no recorded call
launched either was launched before the trace's first recorded launch call (it runs ahead of
its stream's first recorded launch, and its correlation id, when it has one, is below every
recorded launch's: CUPTI numbers launches in order; the runtime calls of the first moments of
a capture are often missing), and is then work queued before the steps, or was launched by
a thread the profiler did not record (a stream with no recorded launch, or a correlation id
among the recorded ones), and is then the own work of the step whose window holds its start
(:func:`unlaunched_comm`; :func:`step_acts` adds it to that step's activities).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepsim.calibration.events import EventTable, name_mask, name_test
from stepsim.calibration.gpu_kinds import COLLECTIVE_RE, ThreadRows
from stepsim.calibration.intervals import in_union, union
from stepsim.calibration.linking import LAUNCH_APIS, SYNC_APIS, Links
from stepsim.calibration.steps import DATALOADER_RE, Step

__all__ = ["TraceContext", "StepActs", "step_acts", "phase_intervals", "phase_of",
           "unlaunched_comm", "BACKWARD_RE", "OPTIMIZER_RE"]

BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function|## backward ##", re.I)
OPTIMIZER_RE = re.compile(r"^Optimizer\.(step|zero_grad)#|## optimizer ##", re.I)


def phase_intervals(table: EventTable, pid: int):
    """The (backward, optimizer, DataLoader) intervals (ns) of process ``pid``'s CPU ops, each
    a union from :func:`union`."""
    cpu = table.is_cat("cpu_op", "user_annotation") & (table.ph == "X") & (table.pid == pid)
    rows = np.nonzero(cpu)[0]
    nm = table.names[rows]
    ts, te = table.ts_ns, table.end_ns
    out = []
    for rx in (BACKWARD_RE, OPTIMIZER_RE, DATALOADER_RE):
        hit = name_mask(nm, rx)
        out.append(union(ts[rows[hit]], te[rows[hit]]))
    return tuple(out)


def phase_of(ctx: "TraceContext", host_threads: list[tuple[int, int]], times: np.ndarray,
             launch_tid: np.ndarray, main_tid: int) -> np.ndarray:
    """Phase per launch time: ``optimizer`` inside an optimizer annotation, ``backward`` inside
    a backward op/annotation or on a non-main launching thread (autograd engine), ``data``
    inside a DataLoader ``__next__``, else ``forward``."""
    ivb, ivo, ivd = ctx.phase_intervals(host_threads[0][0])
    out = np.full(len(times), "forward", dtype=object)
    out[in_union(times, ivd)] = "data"
    out[(launch_tid != main_tid) | in_union(times, ivb)] = "backward"
    out[in_union(times, ivo)] = "optimizer"
    return out


class TraceContext:
    """Per-trace lookups shared by the step fits (plain Python containers for speed)."""

    def __init__(self, table: EventTable, links: Links):
        self.table, self.links = table, links
        self.ts = table.ts_ns
        self.te = table.end_ns
        self.names = table.names
        x = table.ph == "X"
        self.cpu_x = table.is_cat("cpu_op", "user_annotation") & x    # CPU ops, annotations
        self.api_x = table.is_cat("cuda_runtime", "cuda_driver") & x  # runtime/driver calls
        gpu = links.gpu_rows
        self.multi_dev = len(set(table.device[gpu].tolist())) > 1
        dev, st = table.device[gpu].tolist(), table.stream[gpu].tolist()
        label = {k: (f"{k[0]}:{k[1]}" if self.multi_dev else str(k[1])) for k in set(zip(dev, st))}
        self.stream_of: dict[int, str] = dict(zip(gpu.tolist(),
                                                  map(label.__getitem__, zip(dev, st))))
        self.prev_end: dict[int, int] = {}
        last: dict[str, int] = {}
        for g, e in zip(gpu.tolist(), self.te[gpu].tolist()):
            sk = self.stream_of[g]
            self.prev_end[g] = last.get(sk, -1)
            last[sk] = max(e, last.get(sk, -1))
        self.comm_rows = ThreadRows(table, np.nonzero(
            (table.names == "record_param_comms") & (table.ph == "X"))[0])
        self.ann_rows = ThreadRows(table, np.nonzero(
            name_test(table.names, lambda n: n.startswith("nccl:")) &
            table.is_cat("user_annotation", "cpu_op"))[0])
        gnames = table.names[gpu].tolist()
        coll = {n: COLLECTIVE_RE.match(n) is not None for n in set(gnames)}   # once a name
        self.is_coll = dict(zip(gpu.tolist(), map(coll.__getitem__, gnames)))
        self.launch_of = links.launch_of()   # activity row -> launching call row
        # communication kernels without a launching call: the steps' own (rows), and the
        # number launched before the first recorded launch call
        self.unlaunched_comm, self.comm_before_first_launch = unlaunched_comm(
            table, links, self.stream_of)
        self._phases: dict[int, tuple] = {}
        self._acts: dict[tuple[int, int], StepActs] = {}
        self.steps: list[Step] = []

    def step_acts(self, step: Step) -> "StepActs":
        """:func:`step_acts` of ``step``, computed once."""
        key = (step.start_ns, step.number)
        if key not in self._acts:
            self._acts[key] = step_acts(self, step)
        return self._acts[key]

    def previous(self, step: Step) -> Step | None:
        """The step just before ``step`` (ending where it starts), if the trace has it."""
        for i, s in enumerate(self.steps):
            if s is step or (s.start_ns == step.start_ns and s.number == step.number):
                if i > 0 and self.steps[i - 1].end_ns == step.start_ns:
                    return self.steps[i - 1]
                return None
        return None

    def phase_intervals(self, pid: int) -> tuple:
        """:func:`phase_intervals` of ``pid``, computed once."""
        if pid not in self._phases:
            self._phases[pid] = phase_intervals(self.table, pid)
        return self._phases[pid]


def unlaunched_comm(table: EventTable, links: Links,
                    stream_of: dict[int, str]) -> tuple[list[int], int]:
    """The communication kernels no recorded call launched that are the steps' own work (rows,
    in start order), and how many others were launched before the first recorded launch call
    (see the module docstring)."""
    gpu, lr = links.gpu_rows.tolist(), links.launch_row.tolist()
    ts, corr = table.ts_ns, table.correlation
    rec = corr[links.launch_row[links.launch_row >= 0]]
    rec = rec[rec >= 0]
    min_corr = int(rec.min()) if len(rec) else None
    first: dict[str, int] = {}   # stream -> start of its first activity a recorded call launched
    for g, l, t in zip(gpu, lr, ts[links.gpu_rows].tolist()):
        if l >= 0:
            first.setdefault(stream_of[g], t)   # gpu rows are in start order
    own, before = [], 0
    for g, l in zip(gpu, lr):
        if l >= 0 or not COLLECTIVE_RE.match(table.names[g]):
            continue
        s = stream_of[g]
        ahead = s not in first or ts[g] < first[s]
        c = int(corr[g])
        if ahead and (c < min_corr if c >= 0 and min_corr is not None else s in first):
            before += 1
        else:
            own.append(g)
    return own, before


@dataclass
class StepActs:
    """A step's launching calls and the GPU activities they launched (table rows), with the
    communication kernels no recorded call launched that ran in it (not in ``act_launch``)."""

    calls: list[int]
    host_threads: list[tuple[int, int]]
    act_launch: dict[int, int]        # activity row -> its launching call row
    acts: list[int]                   # activity rows in start order
    task_of: dict[int, str]           # activity row -> task id (s{stream}.{index})
    end_vals: np.ndarray              # activity ends (ns), sorted
    end_rows: list[int]               # the activities in that order


def step_acts(ctx: TraceContext, step: Step) -> StepActs:
    """The host API calls of ``step`` on its launching threads (the step's own thread first)
    and the GPU activities they launched, plus the unlaunched communication kernels of the
    step (:func:`unlaunched_comm`) that start in it, each with its task id
    ``s{stream}.{index}``."""
    table, links = ctx.table, ctx.links
    ts, te, names = ctx.ts, ctx.te, ctx.names
    pid = step.pid
    t0 = step.start_ns
    # the last step has no next start: its host part ends with its marker, then it waits for
    # the GPU work it launched (its end, see calibration.steps)
    t1 = step.cpu_end_ns if step.last else step.end_ns
    api_rows = np.nonzero(ctx.api_x & (table.pid == pid) & (ts >= t0) & (ts < t1))[0]
    rel = name_test(names[api_rows], lambda n: n in LAUNCH_APIS or n in SYNC_APIS)
    threads = set(zip(table.pid[api_rows[rel]].tolist(), table.tid[api_rows[rel]].tolist()))
    threads.add((pid, step.tid))
    host_threads = sorted(threads, key=lambda k: (k != (pid, step.tid), k))
    on_host = np.fromiter(((p, t) in threads for p, t in
                           zip(table.pid[api_rows].tolist(), table.tid[api_rows].tolist())),
                          bool, len(api_rows))
    calls = api_rows[on_host]
    calls = calls[np.argsort(ts[calls], kind="stable")].tolist()
    by_launch = links.by_launch
    act_launch: dict[int, int] = {}
    for c in calls:
        for g in by_launch.get(c, ()):
            act_launch[g] = c
    own = [g for g in ctx.unlaunched_comm if t0 <= ts[g] < step.end_ns]
    rows = list(act_launch) + own
    acts = [g for _, g in sorted(zip(ts[np.asarray(rows, np.int64)].tolist(), rows))]
    task_of: dict[int, str] = {}
    count: dict[str, int] = {}
    for g in acts:
        s = ctx.stream_of[g]
        task_of[g] = f"s{s}.{count.get(s, 0)}"
        count[s] = count.get(s, 0) + 1
    ends_sorted = sorted(zip(te[np.asarray(acts, np.int64)].tolist(), acts))
    return StepActs(calls, host_threads, act_launch, acts, task_of,
                    np.array([e for e, _ in ends_sorted], dtype=np.int64),
                    [g for _, g in ends_sorted])
