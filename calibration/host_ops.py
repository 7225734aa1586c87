"""The host ops of one step: the launching threads' calls and the CPU time between them, in
time order (:func:`fit_host_ops`).

**Host thread.** The profiled process's threads that issue launches (the main thread and, in
newer PyTorch, the autograd engine's device thread that runs backward) are merged into one
sequence in time order, since the main thread is blocked while backward runs. Between host
API calls the host does CPU work (``cpu`` ops: the gaps, and the calls that enqueue nothing,
such as ``cudaEventRecord``). A launch call becomes a ``launch`` op costing the call's
duration and naming the first device task it enqueues. A blocking call becomes a ``sync`` op
on the device task it waited for: for a blocking copy its own copy, else the latest-ending
activity of this step that ended before the call returned. Blocking calls are
``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, ``cudaEventSynchronize``,
``cudaMemcpy``/``cudaMemset`` (and their ``hip*``/``cu*`` forms) and copies from/to pageable
memory (``Memcpy … (Pageable …)``: these block the caller even with ``cudaMemcpyAsync``;
``.item()`` is such a copy followed by a stream sync). A sync that waited costs 0 µs itself
and the time from the awaited activity's end to the call's return is charged to the following
``cpu`` op; a sync that did not wait costs its duration. ``enumerate(DataLoader)#…__next__``
becomes a ``next_batch`` op (its measured ``next()`` time is returned beside the ops). A trace's
last step (no next start) ends with a ``sync`` named ``END_OF_STEP_SYNC``: the step ends when
its GPU work does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.device_tasks import DeviceFit
from stepsim.calibration.events import name_mask
from stepsim.calibration.fit_records import Op
from stepsim.calibration.gpu_kinds import is_pinned
from stepsim.calibration.linking import SYNC_APIS
from stepsim.calibration.steps import DATALOADER_RE, Step
from stepsim.calibration.trace_context import StepActs, TraceContext, phase_of

__all__ = ["HostFit", "fit_host_ops", "END_OF_STEP_SYNC", "SYNC_TOLERANCE_US"]

END_OF_STEP_SYNC = "end of step: wait for its GPU work"
"""Name of the sync op that closes a trace's last step (its time runs to its GPU work's end)."""
SYNC_TOLERANCE_US = 5.0
"""An activity ending up to this long after a blocking call returned may still be the one the
call waited for (clock granularity of the two CUPTI record kinds, µs)."""


@dataclass
class HostFit:
    """The host ops of one step, the measured ``next()`` time (µs) of each ``next_batch`` op,
    and counts: syncs, syncs that waited, blocking calls modelled as CPU time (n_unres)."""

    ops: list[Op]
    next_us: list[float]
    n_sync: int
    n_block: int
    n_unres: int


def fit_host_ops(ctx: TraceContext, step: Step, sa: StepActs, dev: DeviceFit) -> HostFit:
    """The host ops of ``step`` (calls and activities ``sa``, device tasks ``dev``)."""
    table, links = ctx.table, ctx.links
    ts, te, names = ctx.ts, ctx.te, ctx.names
    pid = step.pid
    t0 = step.start_ns
    t1 = step.cpu_end_ns if step.last else step.end_ns   # see step_acts
    calls, host_threads, act_launch, acts = sa.calls, sa.host_threads, sa.act_launch, sa.acts
    task_of = sa.task_of
    tasks, streams = dev.tasks, dev.streams
    by_launch = links.by_launch
    cpu_rows = np.nonzero(ctx.cpu_x & (table.pid == pid) & (table.tid == step.tid) &
                          (ts >= t0) & (ts < t1))[0]
    nexts = cpu_rows[name_mask(names[cpu_rows], DATALOADER_RE)].tolist()
    by_id = {t.id: t for t in tasks.values()}
    stream_pos = {t.id: (s, i) for s, lst in streams.items() for i, t in enumerate(lst)}
    # ---- host ops
    ops: list[tuple] = []   # (kind, name, dur_us, task, category): HostOps at the end
    cursor = t0
    pending = 0
    launched: set[str] = set()
    runnable: set[str] = set()

    def can_finish(tid_: str) -> bool:
        """Every dependency of task ``tid_`` (stream predecessors, waits) is launched."""
        stack, seen = [tid_], set()
        while stack:
            x = stack.pop()
            if x in runnable or x in seen:
                continue
            seen.add(x)
            if x not in launched and x not in graph_members:
                return False
            s, i = stream_pos[x]
            if i > 0:
                stack.append(streams[s][i - 1].id)
            stack.extend(by_id[x].waits)
        runnable.update(seen)
        return True

    # tasks that run without a launch op of their own: a graph's later members, and the
    # communication kernels no recorded call launched
    graph_members = {task_of[g] for g in acts
                     if g not in act_launch or by_launch[act_launch[g]][0] != g}

    op_t: list[int] = []

    def flush(at: int):
        nonlocal pending
        if pending > 0:
            ops.append(("cpu", "cpu", pending / 1000.0, None, "other"))
            op_t.append(at - pending)
        pending = 0

    launched_acts: list[int] = []
    evs = sorted([*zip(ts[nexts].tolist(), [0] * len(nexts), nexts),
                  *zip(ts[calls].tolist(), [1] * len(calls), calls)])
    te_of = dict(zip(calls, te[calls].tolist()))
    te_of.update(zip(nexts, te[nexts].tolist()))
    next_until = -1
    next_us: list[float] = []
    n_sync = n_block = n_unres = 0
    for a, kind, r in evs:
        b = te_of[r]
        if kind == 1 and a < next_until:
            continue  # inside DataLoader __next__: part of next_batch
        a_eff = max(a, cursor)
        pending += a_eff - cursor
        if kind == 0:
            flush(a_eff)
            ops.append(("next_batch", str(names[r]), 0.0, None, "other"))
            op_t.append(a_eff)
            next_us.append((b - a) / 1000.0)
            next_until = b
            cursor = max(cursor, b)
            continue
        nm = str(names[r])
        gs = [g for g in by_launch.get(r, ()) if g in tasks]
        blocking = nm in SYNC_APIS or any(
            table.cat[g] == "gpu_memcpy" and is_pinned(str(names[g])) is False for g in gs)
        if gs:
            g0 = gs[0]
            if blocking:
                ld = min(max(0, int(ts[g0]) - max(a_eff, ctx.prev_end.get(g0, -1))), b - a_eff)
            else:
                ld = b - a_eff
            flush(a_eff)
            op_t.append(a_eff)
            ops.append(("launch", nm, max(0, ld) / 1000.0, task_of[g0], "launch"))
            for g in gs:
                launched.add(task_of[g])
            launched_acts.extend(gs)
            if not blocking:
                cursor = max(cursor, b)
                continue
            a_after = a_eff + max(0, ld)
        elif not blocking:
            pending += max(0, b - a_eff)
            cursor = max(cursor, b)
            continue
        else:
            a_after = a_eff
        # a blocking call: the activity of this step it waited for (a blocking copy waits
        # for itself, even when the call returns before the copy's last chunk lands)
        best, best_end = None, -1
        if gs:
            best = max(gs, key=lambda x: int(te[x]))
            best_end = int(te[best])
        else:
            lim = b + SYNC_TOLERANCE_US * 1000
            for g in launched_acts:
                e = int(te[g])
                if best_end < e <= lim:
                    best, best_end = g, e
        if best is None or not can_finish(task_of[best]):
            if best is not None:
                n_unres += 1
            pending += max(0, b - a_after)
            cursor = max(cursor, b)
            continue
        flush(a_eff)
        op_t.append(a_after)
        n_sync += 1
        if best_end > a_after:
            n_block += 1
            ops.append(("sync", nm, 0.0, task_of[best], "sync"))
            # the host resumes when the awaited work ends; the call's return latency (or, for
            # a copy that returned early, the lead it had) is charged to the next cpu op
            cursor = max(cursor, best_end)
        else:
            ops.append(("sync", nm, max(0, b - a_after) / 1000.0, task_of[best], "sync"))
            cursor = max(cursor, b)
    if t1 > cursor:
        pending += t1 - cursor
    flush(max(t1, cursor))
    if step.last and step.end_ns > max(t1, cursor) and launched_acts:
        ops.append(("sync", END_OF_STEP_SYNC, 0.0, None, "other"))
        op_t.append(max(t1, cursor))
    # phases: a launch/sync op has its task's, a cpu op the phase of the time it starts
    tph = {t.id: t.phase for ts_ in streams.values() for t in ts_}
    cph = phase_of(ctx, host_threads, np.array(op_t, dtype=np.int64),
                   np.full(len(op_t), step.tid, dtype=np.int64), step.tid) if ops else []
    out = [Op(k, nm, d, task, cat, tph.get(task, "other") if task else
              ("data" if k == "next_batch" else str(cph[i])))
           for i, (k, nm, d, task, cat) in enumerate(ops)]
    return HostFit(ops=out, next_us=next_us, n_sync=n_sync, n_block=n_block, n_unres=n_unres)
