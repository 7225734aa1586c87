"""The device tasks of one step: every GPU activity its host calls launched, per stream in
start order, with its duration, gap and inferred waits (:func:`fit_device_tasks`).

**Device tasks.** Every GPU activity launched from the step's host calls, per stream in start
order, with category and phase (see :data:`calibration.gpu_kinds.CATEGORY_RULES` and
:func:`calibration.trace_context.phase_of`). A task's ``dur_us`` is its measured duration;
one that overlaps the activity before it on its stream (which a stream cannot run) counts
from that one's end, so a stream's busy time is the union of its activities, never their sum.
It is *ready* when its stream predecessor has ended, its launch call has returned, a
host↔device copy's engine (one per direction) is free, and its cross-stream waits have ended.
Cross-stream waits are inferred: a task that started more than ``WAIT_MIN_US`` after the rest
allowed waits for the task of the same step on another stream that ended last, no more than
``WAIT_WINDOW_US`` before it started. A communication kernel that no recorded call launched
(:func:`calibration.trace_context.unlaunched_comm`) is a task like the others but without a
host launch (no host op names it, so the simulator runs it when its stream and waits allow):
it waits for the step's activity on another stream that ended last before it started, however
long before, and its phase is that of the instant it started. The idle from ready to start
that none of these explains (device-side launch latency, a few µs, or a dependency the trace
does not show, such as an event recorded by another thread or in an earlier step) is the
task's ``gap_us``: the simulator idles the stream for it, so replayed busy time and exposed
communication are the measured ones; it is summed in ``meta.notes["device_gap_us"]`` and
scaled as one parameter by ``device.gap_scale`` (``inferred``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stepsim.calibration.gpu_kinds import categorize, collective_info, copy_kind_of, is_pinned
from stepsim.calibration.steps import Step
from stepsim.calibration.trace_context import StepActs, TraceContext, phase_of
from stepsim.calibration.fit_records import Task

__all__ = ["DeviceFit", "fit_device_tasks", "WAIT_MIN_US", "WAIT_WINDOW_US"]

WAIT_MIN_US = 2.0
"""A task that started less than this after its stream and launch allowed has no inferred
cross-stream wait (µs)."""
WAIT_WINDOW_US = 20.0
"""An inferred wait's producer ended at most this long before the waiting task started (µs)."""


@dataclass
class DeviceFit:
    """The device tasks of one step.

    Attributes:
        tasks: activity row → its task. streams: stream → its tasks in start order.
        kernel_us, idle_us: task id → measured duration and gap (µs).
        colls: per collective task in stream order, (task id, collective name, start_ns,
            end_ns, group size or None).
        n_waits, n_prev_waits: inferred cross-stream waits within the step and on the
            previous step's work. n_overlap: activities that overlapped their stream
            predecessor.
        bad_sizes: the names of the collectives whose record gives a size that cannot be
            right (:func:`calibration.gpu_kinds.size_bytes`), their bytes taken as unknown.
    """

    tasks: dict[int, Task]
    streams: dict[str, list[Task]]
    kernel_us: dict[str, float]
    idle_us: dict[str, float]
    colls: list[tuple]
    n_waits: int
    n_prev_waits: int
    n_overlap: int
    bad_sizes: list[str] = field(default_factory=list)


def fit_device_tasks(ctx: TraceContext, step: Step, sa: StepActs) -> DeviceFit:
    """The device tasks of ``step``, whose calls and activities are ``sa``."""
    table, links = ctx.table, ctx.links
    ts, te, names = ctx.ts, ctx.te, ctx.names
    act_launch, acts = sa.act_launch, sa.acts
    task_of, end_vals, end_rows = sa.task_of, sa.end_vals, sa.end_rows
    by_launch = links.by_launch
    stream_of = ctx.stream_of
    # the phase of a task is that of its launch; of an unlaunched one, that of its start
    lt = np.array([ts[act_launch.get(g, g)] for g in acts], dtype=np.int64)
    ltid = np.array([table.tid[act_launch[g]] if g in act_launch else step.tid for g in acts],
                    dtype=np.int64)
    phases = phase_of(ctx, sa.host_threads, lt, ltid, step.tid) if acts else []
    per_stream: dict[str, list[int]] = {}
    for g in acts:
        per_stream.setdefault(stream_of[g], []).append(g)
    prev = ctx.previous(step)
    tasks: dict[int, Task] = {}
    kernel_us: dict[str, float] = {}
    idle_map: dict[str, float] = {}
    engine_free: dict[str, int] = {}
    colls = []
    bad_sizes: list[str] = []
    n_waits = n_prev_waits = n_overlap = 0
    # the activities' columns as Python values, read once (a numpy scalar costs more)
    rows = np.array(acts, dtype=np.int64)
    a_ts, a_dur, a_te = ts[rows].tolist(), table.dur_ns[rows].tolist(), te[rows].tolist()
    a_name, a_cat, a_bytes = names[rows].tolist(), table.cat[rows].tolist(), \
        table.bytes[rows].tolist()
    for k, g in enumerate(acts):
        s = stream_of[g]
        c = act_launch.get(g, -1)   # -1: a communication kernel no recorded call launched
        start, dur = a_ts[k], a_dur[k]
        if ctx.prev_end.get(g, -1) > start:
            # overlaps the activity before it on its stream, which cannot run at once: only
            # the part after that one's end is this one's (the stream's busy time is the union)
            n_overlap += 1
            start, dur = ctx.prev_end[g], max(0, a_te[k] - ctx.prev_end[g])
        first = c < 0 or by_launch[c][0] == g
        ready = max(ctx.prev_end.get(g, -1), int(te[c]) if first and c >= 0 else -1)
        waits: list[str] = []
        if not first:
            f = by_launch[c][0]
            if stream_of[f] != s:
                waits.append(task_of[f])
                ready = max(ready, int(te[f]))
        name, rcat = str(a_name[k]), str(a_cat[k])
        engine = copy_kind_of(name, None) if rcat == "gpu_memcpy" else ""
        if engine in ("h2d", "d2h"):
            # one copy engine per direction: a copy also waits for the one before it
            ready = max(ready, engine_free.get(engine, -1))
            engine_free[engine] = max(engine_free.get(engine, -1), start + dur)
        prev_waits: list[str] = []
        if start - ready > WAIT_MIN_US * 1000:
            # an unlaunched task has no launch to order it: it waits for the activity on
            # another stream that ended last before it started, however long before
            lo = start - int(WAIT_WINDOW_US * 1000) if c >= 0 else -1
            i = int(np.searchsorted(end_vals, start, side="right")) - 1
            while i >= 0 and end_vals[i] >= lo:
                w = end_rows[i]
                if stream_of[w] != s and (c < 0 or w not in act_launch
                                          or ts[act_launch[w]] < ts[c]):
                    if task_of[w] not in waits:
                        waits.append(task_of[w])
                        n_waits += 1
                    ready = max(ready, int(end_vals[i]))
                    break
                i -= 1
        if start - ready > WAIT_MIN_US * 1000 and prev is not None:
            # still unexplained: an event wait on the previous step's work (a pipelined input
            # copy or embedding lookup waiting for the last step's optimizer, say)
            pa = ctx.step_acts(prev)
            lo = start - int(WAIT_WINDOW_US * 1000)
            i = int(np.searchsorted(pa.end_vals, start, side="right")) - 1
            while i >= 0 and pa.end_vals[i] >= lo:
                w = pa.end_rows[i]
                if stream_of[w] != s:
                    prev_waits.append(pa.task_of[w])
                    n_prev_waits += 1
                    ready = max(ready, int(pa.end_vals[i]))
                    break
                i -= 1
        idle_us = max(0, start - ready) / 1000.0 if ready >= 0 else 0.0
        cat = categorize(name, rcat)
        phase = str(phases[k]) if len(phases) else "other"
        kind = "kernel"
        extra: dict = {}
        if cat == "memcpy":
            kind = "memcpy"
            ck = copy_kind_of(name, None)
            extra = dict(bytes=a_bytes[k] if a_bytes[k] >= 0 else None,
                         copy_kind=ck, pinned=is_pinned(name))
            if ck == "h2d" and phase == "forward":
                phase = "data"
        elif cat == "memset":
            kind = "memset"
            if a_bytes[k] >= 0:
                extra = dict(bytes=a_bytes[k])
        elif cat == "communication":
            kind = "collective"
            b, gs, cname, bad = collective_info(table, g, c, ctx.comm_rows, ctx.ann_rows)
            extra = dict(bytes=b)
            if bad:
                bad_sizes.append(cname or name.split("(")[0])
            colls.append((task_of[g], cname or name.split("(")[0], start, start + dur, gs))
        if phase == "optimizer" and cat in ("elementwise", "other", "reduction"):
            cat = "optimizer"
        dur_us = dur / 1000.0
        tid_ = task_of[g]
        kernel_us[tid_] = dur_us
        idle_map[tid_] = idle_us
        tasks[g] = Task(id=tid_, stream=s, name=name, kind=kind, category=cat, phase=phase,
                        dur_us=dur_us, gap_us=idle_us, waits=waits, prev_waits=prev_waits,
                        **extra)
    streams = {s: [tasks[g] for g in rows] for s, rows in per_stream.items()}
    return DeviceFit(tasks=tasks, streams=streams, kernel_us=kernel_us, idle_us=idle_map,
                     colls=colls, n_waits=n_waits, n_prev_waits=n_prev_waits,
                     n_overlap=n_overlap, bad_sizes=bad_sizes)
