"""Launch → GPU-activity linking.

Every GPU activity (kernel, memcpy, memset) is linked to the host runtime/driver call that
enqueued it by the CUPTI/roctracer ``correlation`` id, which the profiler writes on both sides
(Kineto: ``args.correlation`` on ``cuda_runtime``/``cuda_driver`` and on GPU events). The
correlation id is never matched against ``External id`` (that one ties a CPU op to its runtime
calls, a different relation). Correlation ids are unique within one profiled process; if the
same id appears on calls of two processes in one file, the latest call that starts no later
than the activity wins.

One call may enqueue many activities (``cudaGraphLaunch``: one → many); each activity has at
most one launching call. Flow events (``ph`` ``s``/``f``, Kineto ``ac2g``/``async``) are used
only as a fallback, for activities whose correlation finds no call: the ``f`` end bound to the
activity (same lane and ``ts``) names a flow id, whose ``s`` start lies inside the call.
Last comes ``External id``, for traces whose GPU activities carry no usable correlation (some
exporters keep only ``External id``): an activity and a launch call that no other rule linked,
of one kind (a kernel and a kernel or graph launch, a copy and a copy call, a memset and a
memset call), with the same ``External id`` (the CPU op both belong to) are paired in start
order; one call with several activities is a graph launch and takes them all. A warning counts
the activities linked this way.

Coverage: :func:`step_coverage` counts, per step, the launch calls (kernel launches, async
copies/memsets, graph launches) made inside the step window and how many of them have a GPU
activity; :func:`complete_steps` drops steps with missing activity (kernels the profiler
dropped, or a sampled trace) and says how many.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

import numpy as np

from stepsim.calibration.events import EventTable, name_test

__all__ = ["LAUNCH_APIS", "SYNC_APIS", "Links", "link", "step_coverage", "complete_steps",
           "api_kind", "SHARED_IDS"]

LAUNCH_APIS: dict[str, str] = {
    # CUDA runtime
    "cudaLaunchKernel": "kernel", "cudaLaunchKernelExC": "kernel",
    "cudaLaunchCooperativeKernel": "kernel", "cudaLaunchCooperativeKernelMultiDevice": "kernel",
    "cudaMemcpyAsync": "memcpy", "cudaMemcpy": "memcpy", "cudaMemcpy2DAsync": "memcpy",
    "cudaMemcpy2D": "memcpy", "cudaMemcpyPeerAsync": "memcpy", "cudaMemcpyToSymbolAsync": "memcpy",
    "cudaMemcpyFromSymbolAsync": "memcpy",
    "cudaMemsetAsync": "memset", "cudaMemset": "memset", "cudaMemset2DAsync": "memset",
    "cudaGraphLaunch": "graph",
    # CUDA driver
    "cuLaunchKernel": "kernel", "cuLaunchKernelEx": "kernel", "cuLaunchCooperativeKernel": "kernel",
    "cuMemcpyAsync": "memcpy", "cuMemcpyHtoDAsync_v2": "memcpy", "cuMemcpyDtoHAsync_v2": "memcpy",
    "cuMemcpyDtoDAsync_v2": "memcpy", "cuMemsetD8Async": "memset", "cuMemsetD32Async": "memset",
    "cuGraphLaunch": "graph",
    # HIP
    "hipLaunchKernel": "kernel", "hipExtLaunchKernel": "kernel", "hipModuleLaunchKernel": "kernel",
    "hipExtModuleLaunchKernel": "kernel", "hipLaunchCooperativeKernel": "kernel",
    "hipMemcpyAsync": "memcpy", "hipMemcpy": "memcpy", "hipMemcpyWithStream": "memcpy",
    "hipMemcpyDtoDAsync": "memcpy", "hipMemcpyHtoDAsync": "memcpy", "hipMemcpyDtoHAsync": "memcpy",
    "hipMemsetAsync": "memset", "hipMemset": "memset", "hipMemsetD32Async": "memset",
    "hipGraphLaunch": "graph",
}
"""Host API name → what it enqueues (``kernel``, ``memcpy``, ``memset``, ``graph``)."""

SYNC_APIS: dict[str, str] = {
    "cudaStreamSynchronize": "stream", "cudaDeviceSynchronize": "device",
    "cudaEventSynchronize": "event", "cudaMemcpy": "stream", "cudaMemset": "stream",
    "cuStreamSynchronize": "stream", "cuCtxSynchronize": "device", "cuEventSynchronize": "event",
    "hipStreamSynchronize": "stream", "hipDeviceSynchronize": "device",
    "hipEventSynchronize": "event", "hipMemcpy": "stream", "hipMemset": "stream",
}
"""Host API name → what it blocks on (the issuing stream, the whole device, an event)."""


NOOP_COPY_NS = 1_000
"""A copy/memset call that returns in under this many ns and has no GPU activity is taken as
a zero-byte no-op, not a dropped activity (such calls recur in every step of the HTA
``ns_resolution_trace`` and param ``resnet_kineto`` samples, 0–0.9 µs each)."""


def api_kind(name: str) -> str:
    """``kernel``/``memcpy``/``memset``/``graph`` for a launch API, ``sync`` for a blocking
    one that enqueues nothing, else ``other``."""
    k = LAUNCH_APIS.get(name)
    if k is not None:
        return k
    return "sync" if name in SYNC_APIS else "other"


@dataclass
class Links:
    """Result of :func:`link`.

    Attributes:
        gpu_rows: shape (g,), rows of GPU activities (kernel/memcpy/memset), sorted by start.
        launch_row: shape (g,), row of each activity's launching call, −1 if unlinked.
        by_launch: launching call row → its activity rows (start order).
        method: shape (g,), ``"correlation"``, ``"flow"``, ``"external_id"`` or ``""``
            (unlinked).
        warnings: what could not be linked.
    """

    gpu_rows: np.ndarray
    launch_row: np.ndarray
    by_launch: dict[int, list[int]]
    method: np.ndarray
    warnings: list[str] = field(default_factory=list)

    def launch_of(self) -> dict[int, int]:
        """GPU activity row → launching call row (linked activities only)."""
        return {g: l for g, l in zip(self.gpu_rows.tolist(), self.launch_row.tolist()) if l >= 0}


def link(table: EventTable) -> Links:
    """Link every GPU activity of ``table`` to its launching host call.

    Returns:
        :class:`Links`. Never raises for unlinkable events; they are counted in ``warnings``.
    """
    gpu = np.nonzero(table.gpu_mask())[0]
    gpu = gpu[np.argsort(table.ts_ns[gpu], kind="stable")]
    api = np.nonzero(table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X"))[0]
    api_c = api[table.correlation[api] >= 0]
    by_corr: dict[int, list[int]] = {}
    ts = table.ts_ns
    # calls in start order (ties in row order): the latest that starts no later than the
    # activity is found by bisection, not a scan of every call of the id (the param
    # linear_kineto trace with its 14,515 runtime calls given one correlation id took 160 s
    # on 2 loaded cores, 2026-12-05; 1 s so)
    for r in sorted(zip(ts[api_c].tolist(), api_c.tolist())):
        by_corr.setdefault(int(table.correlation[r[1]]), []).append(r[1])
    starts = {c: ts[rows].tolist() for c, rows in by_corr.items() if len(rows) > 1}
    launch = np.full(len(gpu), -1, dtype=np.int64)
    method = np.full(len(gpu), "", dtype=object)
    for k, (g, c) in enumerate(zip(gpu.tolist(), table.correlation[gpu].tolist())):
        cands = by_corr.get(c) if c >= 0 else None
        if not cands:
            continue
        if len(cands) == 1:
            launch[k] = cands[0]
        else:   # the latest call before it (or of all), the first of calls at one instant
            t = starts[c]
            i = bisect_right(t, int(ts[g])) - 1
            launch[k] = cands[bisect_left(t, t[i if i >= 0 else -1])]
        method[k] = "correlation"
    missing = np.nonzero(launch < 0)[0]
    if len(missing):
        _flow_fallback(table, gpu, launch, method, missing, api)
    missing = np.nonzero(launch < 0)[0]
    if len(missing):
        _external_id_fallback(table, gpu, launch, method, missing, api)
    by_launch: dict[int, list[int]] = {}
    for g, l in zip(gpu.tolist(), launch.tolist()):
        if l >= 0:
            by_launch.setdefault(l, []).append(g)
    warnings = _shared_ids(table, api_c)
    n_ext = int((method == "external_id").sum())
    if n_ext:
        warnings.append(f"{n_ext} of {len(gpu)} GPU activities linked to their launch by "
                        "'External id' (no matching correlation id), paired in start order")
    n_un = int((launch < 0).sum())
    if n_un:
        warnings.append(f"{n_un} of {len(gpu)} GPU activities have no launching call in the trace")
    return Links(gpu_rows=gpu, launch_row=launch, by_launch=by_launch, method=method,
                 warnings=warnings)


SHARED_IDS = "share their correlation id"
"""What the warning of runtime calls that share a correlation id in one process says."""


def _shared_ids(table: EventTable, calls: np.ndarray) -> list[str]:
    """A warning counting the runtime calls whose correlation id another call of the same
    process holds too: CUPTI numbers each call of a process once, so these cannot be right;
    their activities are linked by the rule for ids of several processes (the latest call
    before), which may be another call's (the module docstring)."""
    pairs = np.stack([table.pid[calls], table.correlation[calls]], axis=1) if len(calls) else \
        np.zeros((0, 2), dtype=np.int64)
    _, counts = np.unique(pairs, axis=0, return_counts=True)
    shared = int(counts[counts > 1].sum())
    if not shared:
        return []
    return [f"{shared} of {len(calls)} runtime calls {SHARED_IDS} with another "
            "call of their process (each call has its own): their GPU activities are linked to "
            "the latest such call before each, which may not be the one that launched it"]


def _flow_fallback(table: EventTable, gpu, launch, method, missing, api) -> None:
    """Fill ``launch`` for activities without a correlation match from ``s``/``f`` flows."""
    flows = np.nonzero(table.is_cat("ac2g") & (table.flow_id >= 0))[0]
    if not len(flows):
        return
    ends: dict[tuple[int, int, int], int] = {}
    starts: dict[int, tuple[int, int, int]] = {}
    for r in flows.tolist():
        p = table.ph[r]
        key = (int(table.pid[r]), int(table.tid[r]), int(table.ts_ns[r]))
        if p == "f":
            ends[key] = int(table.flow_id[r])
        elif p == "s":
            starts[int(table.flow_id[r])] = key
    # host calls per thread, sorted by start, for the enclosing-call search
    per_thread: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    for r in api.tolist():
        per_thread.setdefault((int(table.pid[r]), int(table.tid[r])), []).append(r)
    for k, rows in list(per_thread.items()):
        rows = np.array(rows)
        rows = rows[np.argsort(table.ts_ns[rows])]
        per_thread[k] = (rows, table.ts_ns[rows])
    for k in missing.tolist():
        g = int(gpu[k])
        fid = ends.get((int(table.pid[g]), int(table.tid[g]), int(table.ts_ns[g])))
        if fid is None:
            continue
        s = starts.get(fid)
        if s is None:
            continue
        cand = per_thread.get((s[0], s[1]))
        if cand is None:
            continue
        rows, tss = cand
        i = int(np.searchsorted(tss, s[2], side="right")) - 1
        if i >= 0 and table.end_ns[rows[i]] >= s[2]:
            launch[k] = rows[i]
            method[k] = "flow"


_ACT_KIND = {"kernel": ("kernel", "graph"), "gpu_memcpy": ("memcpy",), "gpu_memset": ("memset",)}


def _external_id_fallback(table: EventTable, gpu, launch, method, missing, api) -> None:
    """Fill ``launch`` for activities still unlinked by pairing them, in start order, with the
    unlinked launch calls of the same kind and ``External id``."""
    used = set(launch[launch >= 0].tolist())
    calls: dict[tuple[int, str], list[int]] = {}
    for r in api[np.argsort(table.ts_ns[api], kind="stable")].tolist():
        e, kind = int(table.external_id[r]), LAUNCH_APIS.get(table.names[r])
        if e >= 0 and kind is not None and r not in used:
            calls.setdefault((e, kind), []).append(r)
    acts: dict[tuple[int, str], list[int]] = {}
    for k in missing.tolist():   # gpu is in start order
        if table.external_id[gpu[k]] >= 0:
            acts.setdefault((int(table.external_id[gpu[k]]), table.cat[gpu[k]]), []).append(k)
    for (e, cat), ks in acts.items():
        cand = [r for kind in _ACT_KIND[cat] for r in calls.get((e, kind), [])]
        cand.sort(key=lambda r: table.ts_ns[r])
        if not cand:
            continue
        pairs = [(k, cand[0]) for k in ks] if len(cand) == 1 else zip(ks, cand)
        for k, r in pairs:
            launch[k], method[k] = r, "external_id"


@dataclass(frozen=True)
class StepCoverage:
    """Launch calls in one step window and how many have GPU activity.

    ``memsets_unrecorded``: memset calls without a GPU memset record (the profiler does not
    always record memsets; such a call does not make the step incomplete). ``in_capture``:
    launches made while their thread captured a CUDA/HIP graph (recorded into the graph, not
    run; see :mod:`calibration.graphs`)."""

    number: int
    launches: int
    covered: int
    memsets_unrecorded: int = 0
    in_capture: int = 0

    @property
    def fraction(self) -> float:
        ok = self.covered + self.memsets_unrecorded + self.in_capture
        return ok / self.launches if self.launches else 1.0


def step_coverage(table: EventTable, links: Links, steps) -> list[StepCoverage]:
    """Per step, the launch calls (see :data:`LAUNCH_APIS`; copies and memsets shorter than
    :data:`NOOP_COPY_NS` are not counted) of the step's process started in [start_ns, end_ns)
    and how many of them enqueued a GPU activity in the trace."""
    from stepsim.calibration.graphs import in_capture

    api = np.nonzero(table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X"))[0]
    nm = table.names[api]   # (each distinct name looked up once)
    is_launch = name_test(nm, lambda n: LAUNCH_APIS.get(n) in ("kernel", "graph")) | (
        name_test(nm, LAUNCH_APIS.__contains__) & (table.dur_ns[api] >= NOOP_COPY_NS))
    api = api[is_launch]
    covered = np.fromiter(map(links.by_launch.__contains__, api.tolist()), dtype=bool,
                          count=len(api))
    memset = name_test(table.names[api], lambda n: LAUNCH_APIS[n] == "memset") & ~covered
    captured = in_capture(table, api) & ~covered & ~memset
    out = []
    for s in steps:
        m = (table.pid[api] == s.pid) & (table.ts_ns[api] >= s.start_ns) & \
            (table.ts_ns[api] < s.end_ns)
        out.append(StepCoverage(s.number, int(m.sum()), int((m & covered).sum()),
                                int((m & memset).sum()), int((m & captured).sum())))
    return out


def complete_steps(table: EventTable, links: Links, steps, min_fraction: float = 1.0,
                   cov: list[StepCoverage] | None = None):
    """The steps whose launch coverage is at least ``min_fraction``, and warnings (``cov``:
    their :func:`step_coverage` when already made).

    Returns:
        (kept steps, list of warnings). A warning says how many steps were excluded and how
        many launches had no GPU activity, and how many memset calls and graph-capture
        launches lacked it without making a step incomplete.
    """
    cov = step_coverage(table, links, steps) if cov is None else cov
    kept, dropped, missing = [], [], 0
    for s, c in zip(steps, cov):
        if c.fraction >= min_fraction:
            kept.append(s)
        else:
            dropped.append(s.number)
            missing += c.launches - c.covered - c.memsets_unrecorded - c.in_capture
    warnings = []
    if dropped:
        warnings.append(f"excluded {len(dropped)} of {len(steps)} steps ({dropped}) whose GPU "
                        f"activity is incomplete: {missing} launch call(s) without a kernel/copy "
                        f"in the trace")
    n_memset = sum(c.memsets_unrecorded for s, c in zip(steps, cov) if s in kept)
    if n_memset:
        warnings.append(f"{n_memset} memset call(s) in the steps used have no GPU memset record "
                        "(the profiler does not always record memsets): they do not make a step "
                        "incomplete, and their device time (usually a few µs) is not modelled")
    n_cap = sum(c.in_capture for s, c in zip(steps, cov) if s in kept)
    if n_cap:
        from stepsim.calibration.graphs import CAPTURE_NOTE
        warnings.append(f"{n_cap} launch call(s) in the steps used were made while a CUDA/HIP "
                        f"graph was being captured: {CAPTURE_NOTE}")
    return kept, warnings
