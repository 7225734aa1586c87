"""The device's backlog at the start of the captured window and the launch queue's depth the
trace shows: GPU work still running when the window starts (:func:`backlog_rows`,
:func:`backlog_us`) and the most launches pending at any launch (:func:`peak_pending`)."""
from __future__ import annotations

import numpy as np

from stepsim.calibration.steps import Step
from stepsim.calibration.trace_context import TraceContext

__all__ = ["backlog_rows", "backlog_us", "peak_pending"]


def backlog_rows(ctx: TraceContext, t0: int, t_end: int) -> list[int]:
    """GPU activities still to finish at ``t0`` (ns) that were enqueued before it: launched
    before ``t0``, or launched by no call in the trace (the launch preceded the capture) and
    running ahead of their stream's first activity launched from ``t0`` on (a stream runs in
    order; ``t_end`` when the stream has none). A communication kernel of a step whose launch
    the trace lacks (:func:`calibration.trace_context.unlaunched_comm`) is enqueued before
    ``t0`` if it started before it."""
    gpu = ctx.links.gpu_rows
    rows = gpu.tolist()
    n = len(rows)
    launch = np.fromiter(map(ctx.launch_of.get, rows, [-1] * n), np.int64, n)
    linked = launch >= 0
    launched_at = ctx.ts[np.where(linked, launch, 0)]
    starts = ctx.ts[gpu]
    keys = list(map(ctx.stream_of.__getitem__, rows))
    code = {k: c for c, k in enumerate(dict.fromkeys(keys))}
    stream = np.fromiter(map(code.__getitem__, keys), np.int64, n)
    # each stream's first activity launched from t0 on (t_end where it has none)
    new = linked & (launched_at >= t0)
    first_new = np.full(len(code), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_new, stream[new], starts[new])
    first_new[~np.isin(np.arange(len(code)), stream[new])] = t_end
    own = np.isin(gpu, np.asarray(ctx.unlaunched_comm, np.int64))
    queued = np.where(linked, launched_at < t0,
                      np.where(own, starts < t0, starts < first_new[stream]))
    return gpu[(ctx.te[gpu] > t0) & queued].tolist()


def backlog_us(ctx: TraceContext, first: Step, streams: dict[str, list],
                backlog: list[int]) -> dict[str, float]:
    """Per modelled stream, how long (µs) after ``first`` starts it still ran the ``backlog``
    (:func:`backlog_rows` at ``first``'s start)."""
    t0 = first.start_ns
    busy: dict[str, float] = {}
    for g in backlog:
        s = ctx.stream_of[g]
        if s in streams:
            busy[s] = max(busy.get(s, 0.0), (int(ctx.te[g]) - t0) / 1000.0)
    return busy


def peak_pending(ctx: TraceContext, first: Step, last: Step, backlog: list[int]) -> int:
    """The most launches pending (issued, their device work unfinished) that any launch call
    from ``first`` to ``last`` found, itself included: the runtime's launch queue held at least
    that many without blocking the host. A call launching several activities (a CUDA graph)
    holds one entry until its last activity ends; the ``backlog`` activities
    (:func:`backlog_rows` at ``first``'s start) hold one each from that start."""
    t0, t1 = first.start_ns, last.end_ns
    n = len(ctx.launch_of)
    g = np.fromiter(ctx.launch_of.keys(), np.int64, n)
    lr = np.fromiter(ctx.launch_of.values(), np.int64, n)
    sel = (ctx.ts[lr] >= t0) & (ctx.ts[lr] < t1)
    calls, which = np.unique(lr[sel], return_inverse=True)
    ends = np.zeros(len(calls), np.int64)          # each call: its last activity's end
    np.maximum.at(ends, which, ctx.te[g[sel]])
    back = np.asarray(ctx.te[np.asarray(backlog, np.int64)], np.int64)
    times = np.concatenate([ctx.ts[calls].astype(np.int64), ends, back])
    step = np.concatenate([np.ones(len(calls), np.int64), -np.ones(len(ends) + len(back),
                                                                   np.int64)])
    order = np.lexsort((step, times))   # at one instant, ends free slots first
    pending = len(backlog) + np.cumsum(step[order])
    starts = pending[step[order] > 0]
    return int(starts.max()) if len(starts) else 0
