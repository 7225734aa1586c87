"""Fit a :class:`models.params.StepModel` from GPU (Kineto) traces: one file, or a directory
of per-rank files.

Entry point: :func:`calibrate_gpu`. The pipeline, each stage in its own module::

    load_trace → build_table → find_steps → link (launch → activity) → complete_steps
              → representative step → host ops + device tasks → (ranks: align, skew) → model

**Representative step.** The measured step times are those of the complete steps (start to
next start, µs; see :mod:`calibration.steps`). The representative step is the complete step
whose time is closest to their median, preferring one that is not the last step (the last
step ends at its drain, not at a next start). Host ops and device tasks come from it alone, so
replaying the model repeats that step.

**Host thread.** The profiled process's threads that issue launches (the main thread and, in
newer PyTorch, the autograd engine's device thread that runs backward) are merged into one
sequence in time order, since the main thread is blocked while backward runs. Between host
API calls the host does CPU work (``cpu`` ops: the gaps, and the calls that enqueue nothing,
such as ``cudaEventRecord``). A launch call becomes a ``launch`` op costing the call's
duration and naming the first device task it enqueues. A blocking call becomes a ``sync`` op
on the device task it waited for, which is inferred as the latest-ending activity of this step
that ended before the call returned: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize``, ``cudaMemcpy``/``cudaMemset`` (and their ``hip*``/``cu*`` forms) and
copies from/to pageable memory (``Memcpy … (Pageable …)``: these block the caller even with
``cudaMemcpyAsync``; ``.item()`` is such a copy followed by a stream sync). A sync that
waited costs 0 µs itself and the time from the awaited activity's end to the call's return is
charged to the following ``cpu`` op; a sync that did not wait costs its duration.
``enumerate(DataLoader)#…__next__`` becomes a ``next_batch`` op; the loader is modelled as
``num_workers=0`` with a constant produce time equal to that call's duration in the
representative step (the trace cannot tell how many workers there were: ``inferred``).

**Device tasks.** Every GPU activity launched from the step's host calls, per stream in start
order, with category and phase (see ``CATEGORY_RULES`` and :func:`_phase_of`). A task's
``dur_us`` is its measured duration plus the idle time before it that neither its stream,
its launch nor a cross-stream wait explains (device-side launch latency, tens of µs at most
per task); that part is kept in ``breakdown_us["idle"]``. Cross-stream waits are inferred: a
task that started more than ``WAIT_MIN_US`` after its stream and its launch allowed waits for
the task of the same step on another stream that ended last, no more than ``WAIT_WINDOW_US``
before it started.

**Collectives.** Kernels whose name starts with ``nccl`` or ``rccl`` in any case (including
``ncclDevKernel_*``) are ``collective`` tasks in category ``communication``. Bytes and group
size come from the kernel's own ``Collective name``/``In msg nelems``/``dtype``/``Group size``
args, else from the enclosing ``record_param_comms`` op, else from the enclosing ``nccl:*``
annotation's ``Input Dims``/``Input type``.

**Ranks.** The rank comes from ``distributedInfo.rank``, else from a ``rank<N>``/``worker<N>``
in the file name; one file without either is rank 0 (with a warning). Two files that claim the
same rank are two captures of it (a warning; the first by file name is used). Clocks are
aligned on matched collectives (the k-th collective of a name on every rank ends at the same
instant, as a collective finishes only when the last rank arrives): each rank's offset is the
median difference of those ends against the reference rank. Each collective is split into
arrival skew (last arrival − this rank's arrival) and transfer (end − last arrival, i.e. the
duration on the last rank to arrive, never the mean); the model's collective ``dur_us`` is the
transfer, and every rank's extra device time per phase (relative to the reference rank, the
one with the least non-collective device time) goes into its ``RankParams.phase_extra_us``.

Source of facts: Kineto's trace format as seen in ``../shared/traces`` (see
``SOURCES.md``), the CUDA runtime's documented blocking behaviour of pageable copies
(``cudaMemcpyAsync`` from pageable memory is synchronous with respect to the host), and
PyTorch's profiler annotations (``ProfilerStep#N``, ``Optimizer.step#…``,
``enumerate(DataLoader)#…``, ``record_param_comms``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calibration.events import EventTable, build_table
from calibration.linking import LAUNCH_APIS, SYNC_APIS, Links, complete_steps, link
from calibration.steps import DATALOADER_RE, Step, find_steps
from calibration.trace_io import RawTrace, load_rank_traces, load_trace
from models.params import (CommParams, DeviceParams, DeviceTask, DurationSpec, HostOp,
                           HostParams, LoaderParams, Meta, RankParams, StepModel)
from simcore.errors import InputError

__all__ = ["calibrate_gpu", "fit_rank", "RankFit", "CATEGORY_RULES", "categorize",
           "WAIT_MIN_US", "WAIT_WINDOW_US"]

WAIT_MIN_US = 2.0
"""A task that started less than this after its stream and launch allowed has no inferred
cross-stream wait (µs)."""
WAIT_WINDOW_US = 20.0
"""An inferred wait's producer ended at most this long before the waiting task started (µs)."""
SYNC_TOLERANCE_US = 5.0
"""An activity ending up to this long after a blocking call returned may still be the one the
call waited for (clock granularity of the two CUPTI record kinds, µs)."""

COLLECTIVE_RE = re.compile(r"^(nccl|rccl)", re.IGNORECASE)
CATEGORY_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("attention", re.compile(r"flash|fmha|attn|attention|sdpa|mha_", re.I)),
    ("conv", re.compile(r"conv|cudnn::(?!bn_)|scudnn|hcudnn|wgrad|dgrad|fprop|winograd|"
                        r"implicit_gemm|miopen|igemm|naive_conv", re.I)),
    ("gemm", re.compile(r"gemm|gemv|cublas|cutlass|matmul|xmma|Cijk_|magma|_nn_|_nt_|_tn_|"
                        r"hipblas|rocblas", re.I)),
    ("normalization", re.compile(r"batch_?norm|bn_fw|bn_bw|layer_?norm|group_?norm|rms_?norm|"
                                 r"instance_?norm|cudnn::bn_|welford", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|adam|sgd|adagrad|lamb|fused_optim|"
                             r"optimizer", re.I)),
    ("reduction", re.compile(r"reduce|reduction|softmax|cross_entropy|nll_loss|argmax|topk|"
                             r"sort|scan|cub::|norm_kernel|sum_kernel|mean_kernel", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|fill|copy|index|"
                               r"gather|scatter|cat|embedding|relu|gelu|silu|dropout|add|mul|"
                               r"div|triton_poi|transpose|where|clamp|sigmoid|tanh|pool", re.I)),
)
"""Kernel name patterns → category, first match wins (memcpy/memset/communication are decided
before these, by event category and the ``nccl``/``rccl`` prefix)."""

_DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8, "half": 2,
    "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "int64": 8,
    "int": 4, "int32": 4, "short": 2, "int16": 2, "char": 1, "int8": 1, "byte": 1, "uint8": 1,
    "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function|## backward ##", re.I)
_OPTIM_RE = re.compile(r"^Optimizer\.(step|zero_grad)#|## optimizer ##", re.I)


def categorize(name: str, cat: str) -> str:
    """The DeviceTask category of a GPU activity from its normalised ``cat`` and name."""
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if COLLECTIVE_RE.match(name):
        return "communication"
    for label, rx in CATEGORY_RULES:
        if rx.search(name):
            return label
    return "other"


def _copy_kind(name: str, raw_kind) -> str:
    s = f"{name} {raw_kind or ''}"
    for k, v in (("HtoD", "h2d"), ("DtoH", "d2h"), ("DtoD", "d2d"), ("PtoP", "d2d")):
        if k in s:
            return v
    return ""


def _pinned(name: str) -> bool | None:
    if "Pageable" in name:
        return False
    if "Pinned" in name:
        return True
    return None


# --------------------------------------------------------------------------------- intervals
def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def _inside(t: np.ndarray, iv: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    s, e = iv
    if not len(s):
        return np.zeros(len(t), dtype=bool)
    i = np.searchsorted(s, t, side="right") - 1
    ok = i >= 0
    out = np.zeros(len(t), dtype=bool)
    out[ok] = t[ok] < e[i[ok]]
    return out


def _union_len(s: np.ndarray, e: np.ndarray) -> int:
    us, ue = _union(s, e)
    return int((ue - us).sum()) if len(us) else 0


# ----------------------------------------------------------------------------------- fitting
@dataclass
class RankFit:
    """What one trace yields before the ranks are combined (internal, but documented).

    Attributes:
        path: the trace file. rank: its rank. world_size: from ``distributedInfo`` (1 if none).
        ops: the host ops of the representative step. streams: stream → tasks.
        measured_us: measured step times (µs) of the complete steps; steps_used: their numbers.
        rep: the representative step.
        collectives: per collective task in stream order, (task id, match key, start_ns,
            end_ns) in the trace's absolute clock (ns since the epoch).
        notes, sources, warnings: for ``Meta``.
        loader: the LoaderParams.
    """

    path: Path
    rank: int
    world_size: int
    ops: list[HostOp]
    streams: dict[str, list[DeviceTask]]
    measured_us: list[float]
    steps_used: list[int]
    rep: Step
    collectives: list[tuple[str, str, int, int]]
    notes: dict
    sources: dict
    warnings: list[str]
    loader: LoaderParams
    complete_steps: int = 0

    @property
    def median_us(self) -> float:
        return float(np.median(self.measured_us))


def _rank_of(raw: RawTrace, warnings: list[str]) -> tuple[int | None, int]:
    info = raw.metadata.get("distributedInfo")
    if isinstance(info, str):
        # some Kineto versions write it as a Python-repr string
        m = re.search(r"'rank':\s*(\d+)", info)
        w = re.search(r"'world_size':\s*(\d+)", info)
        if m:
            return int(m.group(1)), int(w.group(1)) if w else 1
    elif isinstance(info, dict) and "rank" in info:
        try:
            return int(info["rank"]), int(info.get("world_size", 1) or 1)
        except (TypeError, ValueError):
            pass
    m = _RANK_IN_NAME.search(raw.path.name)
    if m:
        warnings.append(f"{raw.path.name}: no distributedInfo; rank {m.group(1)} taken from the file name")
        return int(m.group(1)), 1
    return None, 1


def _phase_of(table: EventTable, host_threads: list[tuple[int, int]], times: np.ndarray,
              launch_tid: np.ndarray, main_tid: int) -> np.ndarray:
    """Phase per launch time: ``optimizer`` inside an optimizer annotation, ``backward`` inside
    a backward op/annotation or on a non-main launching thread (autograd engine), ``data``
    inside a DataLoader ``__next__``, else ``forward``."""
    cpu = table.is_cat("cpu_op", "user_annotation") & (table.ph == "X")
    pid = host_threads[0][0]
    cpu &= table.pid == pid
    names = table.names
    rows = np.nonzero(cpu)[0]
    nm = names[rows]
    isb = np.fromiter((bool(_BACKWARD_RE.search(s)) for s in nm), bool, len(nm))
    iso = np.fromiter((bool(_OPTIM_RE.search(s)) for s in nm), bool, len(nm))
    isd = np.fromiter((bool(DATALOADER_RE.search(s)) for s in nm), bool, len(nm))
    ts, te = table.ts_ns, table.end_ns
    ivb = _union(ts[rows[isb]], te[rows[isb]])
    ivo = _union(ts[rows[iso]], te[rows[iso]])
    ivd = _union(ts[rows[isd]], te[rows[isd]])
    out = np.full(len(times), "forward", dtype=object)
    out[_inside(times, ivd)] = "data"
    out[(launch_tid != main_tid) | _inside(times, ivb)] = "backward"
    out[_inside(times, ivo)] = "optimizer"
    return out


def _coll_info(table: EventTable, g: int, launch: int, comm_rows: np.ndarray,
               ann_rows: np.ndarray) -> tuple[int | None, int | None, str]:
    """(bytes, group size, collective name) of collective kernel row ``g``."""

    def from_row(r):
        n = table.in_nelems[r]
        if n < 0:
            n = table.out_nelems[r]
        size = _DTYPE_BYTES.get(str(table.dtype[r]).lower())
        b = int(n * size) if n >= 0 and size else None
        gs = int(table.group_size[r]) if table.group_size[r] > 0 else None
        return b, gs, str(table.coll_name[r])

    if table.coll_name[g]:
        return from_row(g)
    if launch < 0:
        return None, None, ""
    t, p, th = table.ts_ns[launch], table.pid[launch], table.tid[launch]
    for rows in (comm_rows, ann_rows):
        if not len(rows):
            continue
        m = (table.pid[rows] == p) & (table.tid[rows] == th) & (table.ts_ns[rows] <= t) & \
            (table.end_ns[rows] >= t)
        if not m.any():
            continue
        r = rows[m][np.argmax(table.ts_ns[rows[m]])]
        if rows is comm_rows and table.coll_name[r]:
            return from_row(r)
        if rows is ann_rows:
            try:
                ev = table.event(r)
            except LookupError:
                return None, None, ""
            a = ev.get("args") or {}
            dims, typ = a.get("Input Dims"), a.get("Input type")
            b = None
            if isinstance(dims, list) and dims and isinstance(dims[0], list) and \
                    isinstance(typ, list) and typ:
                size = _DTYPE_BYTES.get(str(typ[0]).lower())
                if size and all(isinstance(x, int) for x in dims[0]):
                    b = int(np.prod(dims[0], dtype=np.int64)) * size if dims[0] else size
            return b, None, str(table.names[r]).split(":", 1)[-1]
    return None, None, ""


def fit_rank(table: EventTable, step_regex: str | None = None,
             warnings: list[str] | None = None) -> RankFit:
    """Fit the host ops and device tasks of one trace's representative step.

    Raises:
        InputError: no step marker, or no complete step (every step lost GPU activity).
    """
    path = table.path or Path("<trace>")
    warnings = list(warnings or [])
    steps = find_steps(table, step_regex=step_regex)
    warnings += [f"{path.name}: {w}" for w in steps.warnings]
    if not steps:
        raise InputError(path, "no training step found: no ProfilerStep#N and no repeating "
                         "DataLoader/optimizer marker; pass a step regex")
    links = link(table)
    kept, cw = complete_steps(table, links, steps)
    warnings += [f"{path.name}: {w}" for w in cw]
    if not kept:
        raise InputError(path, f"no complete step: all {len(steps)} step(s) lack GPU activity "
                         "for some launches (a sampled or truncated trace?)")
    measured = [s.dur_us for s in kept]
    med = float(np.median(measured))
    cands = [s for s in kept if not s.last] or kept
    rep = min(cands, key=lambda s: (abs(s.dur_us - med), s.start_ns))
    ops, streams, colls, notes, sources, w2, loader = _fit_step(table, links, rep, kept)
    warnings += [f"{path.name}: {w}" for w in w2]
    rank, world = _rank_of(table._raw, warnings) if table._raw is not None else (None, 1)
    return RankFit(path=path, rank=-1 if rank is None else rank, world_size=world, ops=ops,
                   streams=streams, measured_us=measured, steps_used=[s.number for s in kept],
                   rep=rep, collectives=colls, notes=notes, sources=sources, warnings=warnings,
                   loader=loader, complete_steps=len(kept))


def _fit_step(table: EventTable, links: Links, rep: Step, kept: list[Step]):
    warnings: list[str] = []
    notes: dict = {}
    sources: dict = {}
    pid = rep.pid
    t0, t1 = rep.start_ns, rep.end_ns
    api_mask = table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X") & (table.pid == pid)
    api_rows = np.nonzero(api_mask)[0]
    in_win = (table.ts_ns[api_rows] >= t0) & (table.ts_ns[api_rows] < t1)
    win_rows = api_rows[in_win]
    names = table.names
    launches = np.fromiter((names[r] in LAUNCH_APIS for r in win_rows), bool, len(win_rows))
    syncs = np.fromiter((names[r] in SYNC_APIS for r in win_rows), bool, len(win_rows))
    launch_threads = set(zip(table.pid[win_rows[launches | syncs]].tolist(),
                             table.tid[win_rows[launches | syncs]].tolist()))
    launch_threads.add((pid, rep.tid))
    host_threads = sorted(launch_threads, key=lambda k: (k != (pid, rep.tid), k))
    on_host = np.fromiter(((int(table.pid[r]), int(table.tid[r])) in launch_threads
                           for r in win_rows), bool, len(win_rows))
    calls = win_rows[on_host]
    calls = calls[np.argsort(table.ts_ns[calls], kind="stable")]
    # DataLoader __next__ on the step thread
    cpu_rows = np.nonzero(table.is_cat("cpu_op", "user_annotation") & (table.ph == "X") &
                          (table.pid == pid) & (table.tid == rep.tid) & (table.ts_ns >= t0) &
                          (table.ts_ns < t1))[0]
    nexts = [int(r) for r in cpu_rows if DATALOADER_RE.search(names[r])]
    # ---- device tasks of this step: activities launched by these calls
    by_launch = links.by_launch
    acts: list[int] = []
    act_launch: dict[int, int] = {}
    for c in calls.tolist():
        for g in by_launch.get(c, ()):
            acts.append(g)
            act_launch[g] = c
    acts_arr = np.array(sorted(acts, key=lambda g: (table.ts_ns[g], g)), dtype=np.int64)
    devices = set(table.device[acts_arr].tolist()) if len(acts_arr) else set()
    multi_dev = len(devices) > 1

    def stream_name(g: int) -> str:
        s = int(table.stream[g])
        return f"{int(table.device[g])}:{s}" if multi_dev else str(s)

    # phase by launch time
    lt = np.array([table.ts_ns[act_launch[g]] for g in acts_arr], dtype=np.int64)
    ltid = np.array([table.tid[act_launch[g]] for g in acts_arr], dtype=np.int64)
    phases = _phase_of(table, host_threads, lt, ltid, rep.tid) if len(acts_arr) else np.zeros(0)
    comm_rows = np.nonzero((table.names == "record_param_comms") & (table.ph == "X"))[0]
    ann_rows = np.nonzero(np.fromiter((n.startswith("nccl:") for n in names), bool, len(names)) &
                          table.is_cat("user_annotation", "cpu_op"))[0]
    # previous activity end per stream in the real timeline (any step)
    gpu_all = links.gpu_rows
    stream_key_all = np.array([stream_name(g) for g in gpu_all], dtype=object) if len(gpu_all) else np.zeros(0, object)
    prev_end: dict[int, int] = {}
    last_end_by_stream: dict[str, int] = {}
    for g, sk in zip(gpu_all.tolist(), stream_key_all.tolist()):
        prev_end[g] = last_end_by_stream.get(sk, -1)
        e = int(table.end_ns[g])
        last_end_by_stream[sk] = max(e, last_end_by_stream.get(sk, -1))
    # build tasks
    tasks: dict[int, DeviceTask] = {}
    per_stream: dict[str, list[int]] = {}
    gap_total = 0.0
    idle_per_task: dict[int, float] = {}
    task_of: dict[int, str] = {}
    for k, g in enumerate(acts_arr.tolist()):
        s = stream_name(g)
        per_stream.setdefault(s, []).append(g)
        task_of[g] = f"s{s}.{len(per_stream[s]) - 1}"
    # inferred cross-stream waits: ends of this step's tasks, by stream
    ends_sorted = sorted(((int(table.end_ns[g]), g) for g in acts_arr.tolist()))
    end_vals = np.array([e for e, _ in ends_sorted], dtype=np.int64)
    end_rows = [g for _, g in ends_sorted]
    n_waits = 0
    coll_list = []
    graph_first: dict[int, int] = {}
    for k, g in enumerate(acts_arr.tolist()):
        s = stream_name(g)
        c = act_launch[g]
        start = int(table.ts_ns[g])
        dur = int(table.dur_ns[g])
        launch_end = int(table.end_ns[c])
        pe = prev_end.get(g, -1)
        first_of_call = by_launch[c][0] == g
        ready = max(pe, launch_end if first_of_call else -1)
        waits: list[str] = []
        if not first_of_call:
            f = by_launch[c][0]
            if stream_name(f) != s:
                waits.append(task_of[f])
                ready = max(ready, int(table.end_ns[f]))
        if start - ready > WAIT_MIN_US * 1000:
            lo = start - int(WAIT_WINDOW_US * 1000)
            i = int(np.searchsorted(end_vals, start, side="right")) - 1
            while i >= 0 and end_vals[i] >= lo:
                w = end_rows[i]
                if stream_name(w) != s and w != g:
                    if task_of[w] not in waits:
                        waits.append(task_of[w])
                        n_waits += 1
                    ready = max(ready, int(end_vals[i]))
                    break
                i -= 1
        idle = max(0, start - ready) if ready >= 0 else 0
        idle_us = idle / 1000.0
        gap_total += idle_us
        name = str(names[g])
        cat = categorize(name, str(table.cat[g]))
        phase = str(phases[k]) if len(phases) else "other"
        kind = "kernel"
        extra: dict = {}
        if cat == "memcpy":
            kind = "memcpy"
            ck = _copy_kind(name, None)
            extra = dict(bytes=int(table.bytes[g]) if table.bytes[g] >= 0 else None,
                         copy_kind=ck, pinned=_pinned(name))
            if ck == "h2d" and phase == "forward":
                phase = "data"
        elif cat == "memset":
            kind = "memset"
            if table.bytes[g] >= 0:
                extra = dict(bytes=int(table.bytes[g]))
        elif cat == "communication":
            kind = "collective"
            b, gs, cname = _coll_info(table, g, c, comm_rows, ann_rows)
            extra = dict(bytes=b)
            coll_list.append((task_of[g], cname or name.split("(")[0], start, start + dur, gs))
        if phase == "optimizer" and cat in ("elementwise", "other", "reduction"):
            cat = "optimizer"
        dur_us = dur / 1000.0
        bd = {cat: dur_us, "idle": idle_us} if idle_us > 0 else {}
        tasks[g] = DeviceTask(id=task_of[g], stream=s, name=name, kind=kind, category=cat,
                              phase=phase, dur_us=dur_us + idle_us, breakdown_us=bd,
                              waits=waits, **extra)
        idle_per_task[g] = idle_us
    streams = {s: [tasks[g] for g in rows] for s, rows in per_stream.items()}
    # ---- host ops
    ops: list[HostOp] = []
    cursor = t0
    pending_cpu = 0.0

    def flush_cpu(name="cpu"):
        nonlocal pending_cpu
        if pending_cpu > 0:
            ops.append(HostOp(kind="cpu", name=name, dur_us=pending_cpu / 1000.0))
        pending_cpu = 0.0

    launched_acts: list[int] = []
    events: list[tuple[int, int, str]] = [(int(table.ts_ns[r]), int(r), "next") for r in nexts]
    events += [(int(table.ts_ns[r]), int(r), "api") for r in calls.tolist()]
    events.sort()
    next_until = -1
    next_durs = []
    n_sync = n_block = 0
    for ts, r, kind in events:
        a, b = int(table.ts_ns[r]), int(table.end_ns[r])
        if kind == "api" and a < next_until:
            continue  # inside DataLoader __next__: part of next_batch
        a_eff = max(a, cursor)
        if a_eff > cursor:
            pending_cpu += a_eff - cursor
        if kind == "next":
            flush_cpu()
            ops.append(HostOp(kind="next_batch", name=str(names[r])))
            next_durs.append((b - a) / 1000.0)
            next_until = b
            cursor = max(cursor, b)
            continue
        nm = str(names[r])
        gs = [g for g in by_launch.get(r, ()) if g in tasks]
        blocking = nm in SYNC_APIS or any(
            table.cat[g] == "gpu_memcpy" and _pinned(str(names[g])) is False for g in gs)
        if gs:
            g0 = gs[0]
            if blocking:
                # CPU cost before the copy could start
                pe = prev_end.get(g0, -1)
                ld = min(max(0, int(table.ts_ns[g0]) - max(a, pe)), b - a)
            else:
                ld = b - a
            flush_cpu()
            ops.append(HostOp(kind="launch", name=nm, dur_us=max(0, ld) / 1000.0,
                              task=task_of[g0], category="launch"))
            launched_acts.extend(gs)
            if not blocking:
                cursor = max(cursor, b)
                continue
            a_after = a + ld
        elif not blocking:
            pending_cpu += max(0, b - a_eff)
            cursor = max(cursor, b)
            continue
        else:
            a_after = a_eff
        # blocking call: which activity of this step did it wait for?
        cand = [g for g in launched_acts if table.end_ns[g] <= b + SYNC_TOLERANCE_US * 1000]
        if not cand:
            pending_cpu += max(0, b - a_eff)
            cursor = max(cursor, b)
            continue
        g = max(cand, key=lambda x: (table.end_ns[x], x))
        ge = int(table.end_ns[g])
        flush_cpu()
        n_sync += 1
        if ge > a_after:
            n_block += 1
            ops.append(HostOp(kind="sync", name=nm, dur_us=0.0, task=task_of[g], category="sync"))
            cursor = max(cursor, min(b, ge))
            if b > ge:
                pending_cpu += b - ge
                cursor = b
        else:
            ops.append(HostOp(kind="sync", name=nm, dur_us=max(0, b - a_after) / 1000.0,
                              task=task_of[g], category="sync"))
            cursor = max(cursor, b)
    if t1 > cursor:
        pending_cpu += t1 - cursor
    flush_cpu()
    # ---- loader
    if next_durs:
        loader = LoaderParams(num_workers=0, produce=DurationSpec.constant(sum(next_durs) / len(next_durs)))
        sources["loader.produce"] = "inferred"
        sources["loader.num_workers"] = "assumed"
        all_next = [(table.end_ns[r] - table.ts_ns[r]) / 1000.0 for r in np.nonzero(
            table.is_cat("cpu_op", "user_annotation") & (table.pid == pid) & (table.tid == rep.tid))[0]
            if DATALOADER_RE.search(names[r]) and any(s.start_ns <= table.ts_ns[r] < s.end_ns for s in kept)]
        notes["dataloader_next_us_median"] = float(np.median(all_next)) if all_next else None
        warnings.append("DataLoader worker count is not in a GPU trace: the loader is modelled as "
                        "its measured next() time on the main thread (num_workers=0); give a "
                        "capture sidecar for the real settings")
    else:
        loader = LoaderParams()
        sources["loader"] = "assumed"
    # ---- notes
    gpu_in = acts_arr
    step_wall = (t1 - t0) / 1000.0
    ksum = float(table.dur_ns[gpu_in].sum()) / 1000.0 if len(gpu_in) else 0.0
    # busy: union of all GPU activity within the step window
    gw = links.gpu_rows[(table.end_ns[links.gpu_rows] > t0) & (table.ts_ns[links.gpu_rows] < t1)]
    busy = _union_len(np.clip(table.ts_ns[gw], t0, t1), np.clip(table.end_ns[gw], t0, t1)) / 1000.0
    comm = np.array([COLLECTIVE_RE.match(str(names[g])) is not None for g in gw], dtype=bool)
    other_iv = _union(np.clip(table.ts_ns[gw[~comm]], t0, t1), np.clip(table.end_ns[gw[~comm]], t0, t1))
    comm_iv = _union(np.clip(table.ts_ns[gw[comm]], t0, t1), np.clip(table.end_ns[gw[comm]], t0, t1))
    exposed = _exposed(comm_iv, other_iv) / 1000.0
    notes.update({
        "representative_step": rep.number,
        "representative_step_us": step_wall,
        "gpu_busy_pct": 100.0 * busy / step_wall if step_wall > 0 else 0.0,
        "kernel_sum_over_step_wall": ksum / step_wall if step_wall > 0 else 0.0,
        "kernel_sum_us": ksum,
        "exposed_comm_us": exposed,
        "device_idle_added_us": gap_total,
        "inferred_waits": n_waits,
        "host_syncs": n_sync,
        "host_syncs_blocking": n_block,
        "host_threads": ",".join(f"{p}/{t}" for p, t in host_threads),
        "device_tasks": len(acts_arr),
        "host_ops": len(ops),
    })
    sources.update({"host.ops": "measured", "device.streams": "measured",
                    "device.waits": "inferred", "device.idle": "inferred"})
    return ops, streams, coll_list, notes, sources, warnings, loader


def _exposed(comm_iv, other_iv) -> float:
    """Length (ns) of comm intervals not covered by other intervals."""
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


# ------------------------------------------------------------------------------ the model
def _single_model(fit: RankFit, paths: list[Path]) -> StepModel:
    meta = Meta(name=fit.path.name, sources=fit.sources, traces=[str(p) for p in paths],
                steps_used=fit.steps_used, measured_step_us=fit.measured_us,
                warnings=fit.warnings, notes=dict(fit.notes))
    meta.notes["measured_median_step_us"] = fit.median_us
    comm = CommParams(world_size=max(1, fit.world_size))
    return StepModel(loader=fit.loader, host=HostParams(ops=fit.ops),
                     device=DeviceParams(streams=fit.streams), comm=comm,
                     ranks=[RankParams(rank=max(0, fit.rank))], meta=meta)


def calibrate_gpu(paths, step_regex: str | None = None) -> StepModel:
    """Calibrate a StepModel from a GPU trace file or a directory of per-rank trace files.

    Args:
        paths: a ``.json``/``.json.gz`` Kineto trace, a directory of per-rank traces, or a
            list of trace files.
        step_regex: optional regular expression naming the step marker (see
            :func:`calibration.steps.find_steps`).

    Returns:
        the fine (kernel-level) StepModel; coarsen it with :func:`models.coarsen.coarsen`
        before long simulations. ``meta`` holds the sources, steps used, measured step times
        (µs), warnings and notes (``gpu_busy_pct``, ``kernel_sum_over_step_wall``,
        ``exposed_comm_us``, …).

    Raises:
        InputError: unreadable or malformed trace, no GPU activity, no step, no complete step.
    """
    if isinstance(paths, (list, tuple)):
        raws = [load_trace(p) for p in paths]
        plist = [Path(p) for p in paths]
    else:
        p = Path(paths)
        raws = load_rank_traces(p)
        plist = [r.path for r in raws]
    fits: list[RankFit] = []
    for raw in raws:
        table = build_table(raw)
        if not table.gpu_mask().any():
            raise InputError(raw.path, "trace has no GPU activity (kernel/memcpy/memset); use "
                             "the CPU calibration for host-only traces")
        fits.append(fit_rank(table, step_regex=step_regex, warnings=list(raw.warnings)))
    if len(fits) == 1:
        f = fits[0]
        if f.rank < 0:
            f.warnings.append(f"{f.path.name}: no rank in distributedInfo or file name; taken as rank 0")
            f.rank = 0
        return _single_model(f, plist)
    from calibration.ranks import combine_ranks

    return combine_ranks(fits, plist)
