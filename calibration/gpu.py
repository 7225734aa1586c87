"""Fit a :class:`models.params.StepModel` from GPU (Kineto) traces: one file, or a directory
of per-rank files.

Entry point: :func:`calibrate_gpu`. The pipeline, each stage in its own module::

    load_trace → build_table → find_steps → link (launch → activity) → usable_steps
              → representative step → host ops + device tasks → (ranks: align, skew) → model

**Representative step.** The measured step times are those of the complete steps (start to
next start, µs; see :mod:`calibration.steps`). The representative step is the median one: the
middle step by time, or, with an even number of steps, the two middle steps, fitted alike and
combined duration by duration (mean of the two) when they have the same structure. Host ops
and device tasks come from it, so replaying the model repeats the median step. A last step
(no next start) is used only if no other step exists: its host part ends with its marker and
is followed by a device-wide ``sync`` (the step ends when its GPU work does).

**Host thread.** The profiled process's threads that issue launches (the main thread and, in
newer PyTorch, the autograd engine's device thread that runs backward) are merged into one
sequence in time order, since the main thread is blocked while backward runs. Between host
API calls the host does CPU work (``cpu`` ops: the gaps, and the calls that enqueue nothing,
such as ``cudaEventRecord``). A launch call becomes a ``launch`` op costing the call's
duration and naming the first device task it enqueues. A blocking call becomes a ``sync`` op
on the device task it waited for: for a blocking copy its own copy, else the latest-ending
activity of this step that ended before the call returned. Blocking calls are ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize``, ``cudaMemcpy``/``cudaMemset`` (and their ``hip*``/``cu*`` forms) and
copies from/to pageable memory (``Memcpy … (Pageable …)``: these block the caller even with
``cudaMemcpyAsync``; ``.item()`` is such a copy followed by a stream sync). A sync that
waited costs 0 µs itself and the time from the awaited activity's end to the call's return is
charged to the following ``cpu`` op; a sync that did not wait costs its duration.
``enumerate(DataLoader)#…__next__`` becomes a ``next_batch`` op; the loader is modelled as
``num_workers=0`` with a constant produce time equal to that call's mean duration in the
representative step (``inferred``: the trace cannot tell how many workers there were, so the
worker count and every other loader setting are ``assumed``, the host's cores
``ASSUMED_HOST_CORES``; a capture sidecar supplies the real settings). Every parameter's
source is a dotted path in ``meta.sources`` (see :func:`_mark_sources`).

**Device tasks.** Every GPU activity launched from the step's host calls, per stream in start
order, with category and phase (see ``CATEGORY_RULES`` and :func:`_phase_of`). A task's
``dur_us`` is its measured duration; one that overlaps the activity before it on its stream
(which a stream cannot run) counts from that one's end, so a stream's busy time is the union
of its activities, never their sum. It is *ready* when its stream predecessor has ended, its
launch call has returned, a host↔device copy's engine (one per direction) is free, and its
cross-stream waits have ended. Cross-stream waits are inferred: a task that started more than
``WAIT_MIN_US`` after the rest allowed waits for the task of the same step on another stream
that ended last, no more than ``WAIT_WINDOW_US`` before it started. The idle from ready to
start that none of these explains (device-side launch latency, a few µs, or a dependency the
trace does not show, such as an event recorded by another thread or in an earlier step) is
the task's ``gap_us``: the simulator idles the stream for it, so replayed busy time and
exposed communication are the measured ones; it is summed in ``meta.notes["device_gap_us"]``
and scaled as one parameter by ``device.gap_scale`` (``inferred``).

**Collectives.** Kernels whose name starts with ``nccl`` or ``rccl`` in any case (including
``ncclDevKernel_*``) are ``collective`` tasks in category ``communication``. Bytes and group
size come from the kernel's own ``Collective name``/``In msg nelems``/``dtype``/``Group size``
args, else from the enclosing ``record_param_comms`` op, else from the enclosing ``nccl:*``
annotation's ``Input Dims``/``Input type``.

**Ranks.** The rank comes from ``distributedInfo.rank`` (a dict, or the Python-repr string
some Kineto versions write; a rank or world size beyond ``MAX_RANK_ID`` is ignored with a
warning), else from a ``rank<N>``/``worker<N>`` in the file name; files with neither take the
lowest free ranks in file-name order (a single file is rank 0), with a warning. Two files that claim the same rank are taken as
separate captures, not ranks of one run: the first by file name is used, the other ignored (a
warning names both). Clocks are aligned on matched collectives (the k-th collective of a name
on every rank ends at the same instant, as a collective finishes only when the last rank
arrives): each rank's offset is the median difference of those ends against
the first rank. Each collective is split into arrival skew (last arrival − this rank's
arrival) and transfer (end − last arrival, i.e. the duration on the last rank to arrive, never
the mean); the model's collective ``dur_us`` is the transfer. The model's host ops and tasks
are those of the rank that arrives first (its own work is never hidden behind waiting). Every
other rank's lateness against it goes into its ``RankParams``: the lateness at the first
collective as ``delay_us``, later increases as ``phase_extra_us`` of the collective's phase;
all of it is scaled down (``meta.notes["skew_scale"]``) when the reference rank's measured
waiting is smaller, i.e. when it hid part of the lateness behind its own host work. The
measured step of a multi-rank model is, per step number, the slowest rank's step.

**Phases** (``forward``, ``backward``, ``optimizer``, ``data``) come from the host side: a
launch inside an ``Optimizer.step#…``/``zero_grad`` annotation is ``optimizer``; inside a
``…Backward…`` op, an ``autograd::engine::evaluate_function`` or on a launching thread other
than the step's (the autograd engine) ``backward``; inside a DataLoader ``__next__`` or an
H2D copy outside backward/optimizer ``data``; else ``forward``. Host ops carry the phase of
their task (launch, sync) or of the instant they start (cpu).

Source of facts: Kineto's trace format as seen in ``../shared/traces`` (see
``SOURCES.md``), the CUDA runtime's documented blocking behaviour of pageable copies
(``cudaMemcpyAsync`` from pageable memory is synchronous with respect to the host), and
PyTorch's profiler annotations (``ProfilerStep#N``, ``Optimizer.step#…``,
``enumerate(DataLoader)#…``, ``record_param_comms``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.calibration.folders import gpu_inputs
from stepsim.calibration.graphs import graph_refusal
from stepsim.calibration.linking import LAUNCH_APIS, SYNC_APIS, Links, link
from stepsim.calibration.steps import DATALOADER_RE, Step, find_steps
from stepsim.calibration.step_fallback import no_step_error
from stepsim.calibration.truncated import usable_steps
from stepsim.calibration.trace_io import rank_of
from stepsim.models.coarsen import coarsen
from stepsim.models.metrics import INPUT_WAIT_SHARE
from stepsim.models.params import (LAUNCH_QUEUE_DEPTH, CommParams, DeviceParams, DeviceTask,
                           DurationSpec, HostOp, HostParams, LoaderParams, Meta, RankParams,
                           ReplayWindow, StepModel)
from stepsim.simcore.errors import InputError

__all__ = ["calibrate_gpu", "fit_rank", "RankFit", "CATEGORY_RULES", "categorize",
           "WAIT_MIN_US", "WAIT_WINDOW_US"]

WAIT_MIN_US = 2.0
"""A task that started less than this after its stream and launch allowed has no inferred
cross-stream wait (µs)."""
WAIT_WINDOW_US = 20.0
"""An inferred wait's producer ended at most this long before the waiting task started (µs)."""
END_OF_STEP_SYNC = "end of step: wait for its GPU work"
"""Name of the sync op that closes a trace's last step (its time runs to its GPU work's end)."""
REPLAY_MAX_STEPS = 200
"""Most steps of a trace kept as the captured window (``StepModel.replay``)."""
STEP_CV_WARN = 0.25
"""Above this coefficient of variation of step times the fit warns that one representative
step cannot stand for all of them."""
ASSUMED_HOST_CORES = 8
"""CPU cores assumed for the DataLoader workers and the main thread when nothing recorded them
(a GPU trace does not; a capture sidecar does). Eight is the smallest share of cores per GPU on
common GPU machines (a one-GPU cloud instance has 8 vCPUs; 8-GPU servers have 10-16 per GPU),
so what-ifs that add workers are not made core-bound by a default of one core; it is marked
``assumed`` (the planner varies it ±50 %). A count derived from the worker count would not do:
a what-if that sets ``loader.num_workers`` leaves ``host_cores`` as calibrated."""
INPUT_STALL_SHARE = INPUT_WAIT_SHARE
"""A step whose DataLoader ``next()`` takes this share of the representative step or more
stalled on input (the share with which the metrics name the input pipeline the bottleneck)."""
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
    ("optimizer", re.compile(r"multi_tensor_apply|adam|sgd|adagrad|lamb(?!da)|fused_optim|"
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
_BACKWARD_RE = re.compile(r"Backward|^autograd::engine::evaluate_function|## backward ##", re.I)
_OPTIM_RE = re.compile(r"^Optimizer\.(step|zero_grad)#|## optimizer ##", re.I)


@functools.lru_cache(maxsize=65536)
def categorize(name: str, cat: str) -> str:
    """The DeviceTask category of a GPU activity from its normalised ``cat`` and name (cached:
    a trace repeats its kernel names once per step)."""
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
        replay: the captured window (per-step values are on ``ops`` and ``streams``).
        peak_pending: the most launches the trace shows pending at a launch.
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
    base_ns: int = 0
    step_us_by_number: dict = field(default_factory=dict)
    rank_from: str = "none"
    replay: ReplayWindow | None = None
    peak_pending: int = 0

    @property
    def median_us(self) -> float:
        return float(np.median(self.measured_us))


def _phase_intervals(table: EventTable, pid: int):
    """The (backward, optimizer, DataLoader) intervals (ns) of process ``pid``'s CPU ops, each
    a union from :func:`_union`."""
    cpu = table.is_cat("cpu_op", "user_annotation") & (table.ph == "X") & (table.pid == pid)
    rows = np.nonzero(cpu)[0]
    nm = table.names[rows]
    ts, te = table.ts_ns, table.end_ns
    out = []
    for rx in (_BACKWARD_RE, _OPTIM_RE, DATALOADER_RE):
        hit = np.fromiter((bool(rx.search(s)) for s in nm), bool, len(nm))
        out.append(_union(ts[rows[hit]], te[rows[hit]]))
    return tuple(out)


def _phase_of(ctx: "_Ctx", host_threads: list[tuple[int, int]], times: np.ndarray,
              launch_tid: np.ndarray, main_tid: int) -> np.ndarray:
    """Phase per launch time: ``optimizer`` inside an optimizer annotation, ``backward`` inside
    a backward op/annotation or on a non-main launching thread (autograd engine), ``data``
    inside a DataLoader ``__next__``, else ``forward``."""
    ivb, ivo, ivd = ctx.phase_intervals(host_threads[0][0])
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
                a = table.args(r)
            except LookupError:
                return None, None, ""
            dims, typ = a.get("Input Dims"), a.get("Input type")
            b = None
            if isinstance(dims, list) and dims and isinstance(dims[0], list) and \
                    isinstance(typ, list) and typ:
                size = _DTYPE_BYTES.get(str(typ[0]).lower())
                if size and all(isinstance(x, int) for x in dims[0]):
                    b = int(np.prod(dims[0], dtype=np.int64)) * size if dims[0] else size
            return b, None, str(table.names[r]).split(":", 1)[-1]
    return None, None, ""


class _Ctx:
    """Per-trace lookups shared by the step fits (plain Python containers for speed)."""

    def __init__(self, table: EventTable, links: Links):
        self.table, self.links = table, links
        self.ts = table.ts_ns
        self.te = table.end_ns
        self.names = table.names
        gpu = links.gpu_rows
        self.multi_dev = len(set(table.device[gpu].tolist())) > 1
        dev, st = table.device[gpu].tolist(), table.stream[gpu].tolist()
        self.stream_of: dict[int, str] = {
            g: (f"{d}:{s}" if self.multi_dev else str(s)) for g, d, s in zip(gpu.tolist(), dev, st)}
        self.prev_end: dict[int, int] = {}
        last: dict[str, int] = {}
        for g, e in zip(gpu.tolist(), self.te[gpu].tolist()):
            sk = self.stream_of[g]
            self.prev_end[g] = last.get(sk, -1)
            last[sk] = max(e, last.get(sk, -1))
        self.comm_rows = np.nonzero((table.names == "record_param_comms") & (table.ph == "X"))[0]
        self.ann_rows = np.nonzero(
            np.fromiter((n.startswith("nccl:") for n in table.names), bool, len(table)) &
            table.is_cat("user_annotation", "cpu_op"))[0]
        self.is_coll = {g: COLLECTIVE_RE.match(table.names[g]) is not None for g in gpu.tolist()}
        self.launch_of = links.launch_of()   # activity row -> launching call row
        self._phases: dict[int, tuple] = {}
        self._acts: dict[tuple[int, int], _StepActs] = {}
        self.steps: list[Step] = []

    def step_acts(self, step: Step) -> "_StepActs":
        """:func:`_step_acts` of ``step``, computed once."""
        key = (step.start_ns, step.number)
        if key not in self._acts:
            self._acts[key] = _step_acts(self, step)
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
        """:func:`_phase_intervals` of ``pid``, computed once."""
        if pid not in self._phases:
            self._phases[pid] = _phase_intervals(self.table, pid)
        return self._phases[pid]


@dataclass
class _StepFit:
    step: Step
    ops: list[HostOp]
    streams: dict[str, list[DeviceTask]]
    kernel_us: dict[str, float]
    idle_us: dict[str, float]
    next_us: list[float]
    colls: list[tuple]
    counts: dict
    warnings: list[str]
    acts: list[int] = field(default_factory=list)   # table rows of the step's own GPU work

    def signature(self) -> tuple:
        """The step's structure: its non-cpu host ops in order (a launch with its task; a
        sync's target is left out, being inferred from timing) and each stream's tasks."""
        return (tuple((o.kind, o.name, o.task if o.kind == "launch" else None)
                      for o in self.ops if o.kind != "cpu"),
                tuple(sorted((s, tuple(t.name for t in ts)) for s, ts in self.streams.items())))


def fit_rank(table: EventTable, step_regex: str | None = None,
             warnings: list[str] | None = None) -> RankFit:
    """Fit the host ops and device tasks of one trace's representative step.

    The representative step is the median step. With an even number of complete steps the
    median lies between the two middle steps, which no single step reproduces: then both are
    fitted and, if they have the same structure (the same launches, syncs and next() calls in
    the same order, the same tasks per stream), every duration is their mean.

    Raises:
        InputError: no step marker, or no complete step (every step lost GPU activity).
    """
    path = table.path or Path("<trace>")
    warnings = list(warnings or [])
    steps = find_steps(table, step_regex=step_regex)
    warnings += [f"{path.name}: {w}" for w in steps.warnings]
    if not steps:
        raise no_step_error(path, steps.warnings)
    links = link(table)
    warnings += [f"{path.name}: {w}" for w in links.warnings if "'External id'" in w]
    unlaunched = [g for g, l in zip(links.gpu_rows.tolist(), links.launch_row.tolist())
                  if l < 0 and COLLECTIVE_RE.match(table.names[g])]
    if unlaunched:
        warnings.append(f"{path.name}: {len(unlaunched)} communication kernel(s) have no "
                        "launching call in the trace: the notes' GPU busy time counts them, the "
                        "simulated model does not hold them (its exposed communication is too "
                        "low)")
    if len(links.gpu_rows) and not (links.launch_row >= 0).any():
        raise InputError(path, f"none of the {len(links.gpu_rows)} GPU activities links to a "
                         "launch call (no correlation id, flow or External id matches one; a "
                         "pre-Kineto autograd-profiler trace records no launch calls): the GPU "
                         "work cannot be placed in the steps; record with torch.profiler")
    kept, cw = usable_steps(table, links, steps)
    warnings += [f"{path.name}: {w}" for w in cw]
    if not kept:
        raise InputError(path, f"no complete step: all {len(steps)} step(s) lack GPU activity "
                         "for some launches (" + (graph_refusal(table, links.by_launch) or
                                                  "a sampled or truncated trace?") + ")")
    measured = [s.dur_us for s in kept]
    med = float(np.median(measured))
    cands = [s for s in kept if not s.last] or kept
    middle = _middle_steps(kept)
    rep = min([s for s in middle if not s.last] or cands,
              key=lambda s: (abs(s.dur_us - med), s.start_ns))
    ctx = _Ctx(table, links)
    ctx.steps = list(steps)
    fit = _fit_step(ctx, rep)
    group = [fit]
    for s in middle:
        if s is rep or s.last:
            continue
        f = _fit_step(ctx, s)
        if f.signature() == fit.signature():
            group.append(f)
    # a last step closes with a wait for its GPU work: compared and assembled without it
    closes = bool(fit.ops) and fit.ops[-1].name == END_OF_STEP_SYNC
    group = [_without_closing_wait(g) for g in group]
    window, wfits = _window(ctx, steps, kept, {g.step.number: g for g in group}, group[0])
    ops, streams, next_us = _assemble(group, wfits)
    if closes:
        ops.append(HostOp(kind="sync", name=END_OF_STEP_SYNC, replay_us=[0.0] * len(window)))
    backlog = _backlog_rows(ctx, window[0].start_ns, window[0].end_ns)
    replay = ReplayWindow(steps=[s.number for s in window],
                          calibrated=[f is not None for f in wfits],
                          measured_step_us=[s.dur_us for s in window],
                          stream_busy_us=_backlog_us(ctx, window[0], streams, backlog),
                          last_gpu_inclusive=window[-1].last)
    n_own = sum(replay.calibrated)
    if n_own < len(window):
        warnings.append(f"{path.name}: {len(window) - n_own} of the {len(window)} steps of the "
                        "captured window replay the representative step's durations (their GPU "
                        "work was incomplete or their structure differs)")
    warnings += [f"{path.name}: {w}" for w in fit.warnings]
    waits = [x for f in wfits if f is not None for x in f.next_us]
    notes, sources, loader, w2 = _notes(ctx, kept, fit, group, waits or next_us)
    warnings += [f"{path.name}: {w}" for w in w2]
    peak = _peak_pending(ctx, window[0], window[-1], backlog)
    notes["launch_queue_peak_pending"] = peak
    notes["step_method"] = steps.method
    rank, world, rank_from = (rank_of(table._raw, warnings) if table._raw is not None
                              else (None, 1, "none"))
    return RankFit(path=path, rank=-1 if rank is None else rank, world_size=world, ops=ops,
                   streams=streams, measured_us=measured, steps_used=[s.number for s in kept],
                   rep=rep, collectives=fit.colls, notes=notes, sources=sources,
                   warnings=warnings, loader=loader, complete_steps=len(kept),
                   base_ns=table.base_ns, step_us_by_number={s.number: s.dur_us for s in kept},
                   rank_from=rank_from, replay=replay, peak_pending=peak)


def _middle_steps(kept: list[Step]) -> list[Step]:
    """The step(s) whose time is the median: the middle one, or the two middle ones."""
    order = sorted(kept, key=lambda s: (s.dur_us, s.start_ns))
    n = len(order)
    return [order[n // 2]] if n % 2 else [order[n // 2 - 1], order[n // 2]]


def _slots(ops: list[HostOp]) -> tuple[list[float], list[str], list[HostOp]]:
    """Split a host sequence into the non-cpu ops and the cpu time before each (plus after the
    last): ``cpu[i]`` precedes ``other[i]``; ``cpu[-1]`` ends the step; ``phase[i]`` is the
    phase of the first cpu op in slot ``i``."""
    cpu, phase, other, acc, ph = [], [], [], 0.0, None
    for op in ops:
        if op.kind == "cpu":
            acc += op.dur_us
            ph = ph or op.phase
        else:
            cpu.append(acc)
            phase.append(ph or "other")
            other.append(op)
            acc, ph = 0.0, None
    cpu.append(acc)
    phase.append(ph or "other")
    return cpu, phase, other


def _window(ctx: _Ctx, steps: list[Step], kept: list[Step], fitted: dict[int, _StepFit],
            rep: _StepFit) -> tuple[list[Step], list[_StepFit | None]]:
    """The captured window: every step from the first complete step with the
    representative's structure to the last complete step (at most ``REPLAY_MAX_STEPS``),
    each with its own fit (without a closing wait) when it is complete and has that
    structure, else None. (A leading step without its own fit, such as a warm-up step, would
    replay the representative's durations and hand the next step a backlog the trace never
    had.) ``fitted``: fits already made (without a closing wait), by step number."""
    first, last = kept[0].number, kept[-1].number
    window = [s for s in steps if first <= s.number <= last][:REPLAY_MAX_STEPS]
    complete = {s.number for s in kept}
    sig = rep.signature()
    out: list[_StepFit | None] = []
    for s in window:
        f = None
        if s.number in complete:
            f = fitted.get(s.number) or _without_closing_wait(_fit_step(ctx, s))
            if f.signature() != sig:
                f = None
        out.append(f)
    i0 = next((i for i, f in enumerate(out) if f is not None), 0)
    return window[i0:], out[i0:]


def _without_closing_wait(f: _StepFit) -> _StepFit:
    """``f`` without the wait for its GPU work that closes a trace's last step."""
    if f.ops and f.ops[-1].name == END_OF_STEP_SYNC:
        return replace(f, ops=f.ops[:-1])
    return f


def _assemble(group: list[_StepFit], window: list[_StepFit | None]):
    """The representative structure (``group[0]``'s) with every duration the median over
    ``group`` and, per op and task, its value in each step of ``window`` (``replay_us``,
    ``replay_gap_us``; a step without a fit takes the median). Returns (host ops, streams,
    per ``next_batch`` op the median ``next()`` time in µs)."""
    base = group[0]
    slots = [_slots(g.ops) for g in group]
    wslots = [None if f is None else _slots(f.ops) for f in window]

    def both(values_of):
        """(median over the group, per window step value) of ``values_of(fit, its slots)``."""
        med = float(np.median([values_of(g, sl) for g, sl in zip(group, slots)]))
        per = [med if f is None else float(values_of(f, fs)) for f, fs in zip(window, wslots)]
        return med, per

    ops: list[HostOp] = []
    n_next = 0
    for i, op in enumerate(slots[0][2] + [None]):
        c, per = both(lambda g, sl: sl[0][i])
        if c > 0 or max(per) > 0:
            ops.append(HostOp(kind="cpu", name="cpu", dur_us=c, phase=slots[0][1][i],
                              replay_us=per))
        if op is None:
            continue
        if op.kind == "next_batch":
            j = n_next
            n_next += 1
            _, per = both(lambda g, sl: g.next_us[j])
            d, _ = both(lambda g, sl: sl[2][i].dur_us)
        else:
            d, per = both(lambda g, sl: sl[2][i].dur_us)
        ops.append(op.model_copy(update={"dur_us": d, "replay_us": per}))
    streams = {}
    ids = {t.id for ts in base.streams.values() for t in ts}
    for s, ts in base.streams.items():
        out = []
        for t in ts:
            d, per = both(lambda g, sl: g.kernel_us[t.id])
            gap, gper = both(lambda g, sl: g.idle_us[t.id])
            out.append(t.model_copy(update={
                "dur_us": d, "gap_us": gap, "replay_us": per, "replay_gap_us": gper,
                # a wait on the previous step's work that this step's structure lacks is dropped
                "prev_waits": [w for w in t.prev_waits if w in ids]}))
        streams[s] = out
    nx = [float(np.median([g.next_us[i] for g in group])) for i in range(len(base.next_us))]
    return ops, streams, nx


def _backlog_rows(ctx: _Ctx, t0: int, t_end: int) -> list[int]:
    """GPU activities still to finish at ``t0`` (ns) that were enqueued before it: launched
    before ``t0``, or launched by no call in the trace (the launch preceded the capture) and
    running ahead of their stream's first activity launched from ``t0`` on (a stream runs in
    order; ``t_end`` when the stream has none)."""
    launch_of = ctx.launch_of
    first_new: dict[str, int] = {}
    for g in ctx.links.gpu_rows.tolist():
        lr = launch_of.get(g)
        if lr is not None and ctx.ts[lr] >= t0:
            s = ctx.stream_of[g]
            first_new[s] = min(first_new.get(s, int(ctx.ts[g])), int(ctx.ts[g]))
    out = []
    for g in ctx.links.gpu_rows.tolist():
        if ctx.te[g] <= t0:
            continue
        lr = launch_of.get(g)
        if ctx.ts[lr] < t0 if lr is not None else \
                ctx.ts[g] < first_new.get(ctx.stream_of[g], t_end):
            out.append(g)
    return out


def _backlog_us(ctx: _Ctx, first: Step, streams: dict[str, list],
                backlog: list[int]) -> dict[str, float]:
    """Per modelled stream, how long (µs) after ``first`` starts it still ran the ``backlog``
    (:func:`_backlog_rows` at ``first``'s start)."""
    t0 = first.start_ns
    busy: dict[str, float] = {}
    for g in backlog:
        s = ctx.stream_of[g]
        if s in streams:
            busy[s] = max(busy.get(s, 0.0), (int(ctx.te[g]) - t0) / 1000.0)
    return busy


def _peak_pending(ctx: _Ctx, first: Step, last: Step, backlog: list[int]) -> int:
    """The most launches pending (issued, their device work unfinished) that any launch call
    from ``first`` to ``last`` found, itself included: the runtime's launch queue held at least
    that many without blocking the host. A call launching several activities (a CUDA graph)
    holds one entry until its last activity ends; the ``backlog`` activities
    (:func:`_backlog_rows` at ``first``'s start) hold one each from that start."""
    t0, t1 = first.start_ns, last.end_ns
    ends: dict[int, int] = {}
    for g, lr in ctx.launch_of.items():
        if t0 <= ctx.ts[lr] < t1:
            ends[lr] = max(ends.get(lr, 0), int(ctx.te[g]))
    events = [(int(ctx.ts[lr]), 1) for lr in ends] + [(e, -1) for e in ends.values()]
    events += [(int(ctx.te[g]), -1) for g in backlog]
    events.sort(key=lambda e: (e[0], e[1]))   # at one instant, ends free slots first
    pending, peak = len(backlog), 0
    for _, d in events:
        pending += d
        if d > 0:
            peak = max(peak, pending)
    return peak


@dataclass
class _StepActs:
    """A step's launching calls and the GPU activities they launched (table rows)."""

    calls: list[int]
    host_threads: list[tuple[int, int]]
    act_launch: dict[int, int]        # activity row -> its launching call row
    acts: list[int]                   # activity rows in start order
    task_of: dict[int, str]           # activity row -> task id (s{stream}.{index})
    end_vals: np.ndarray              # activity ends (ns), sorted
    end_rows: list[int]               # the activities in that order


def _step_acts(ctx: _Ctx, step: Step) -> _StepActs:
    table, links = ctx.table, ctx.links
    ts, te, names = ctx.ts, ctx.te, ctx.names
    pid = step.pid
    t0 = step.start_ns
    # the last step has no next start: its host part ends with its marker, then it waits for
    # the GPU work it launched (its end, see calibration.steps)
    t1 = step.cpu_end_ns if step.last else step.end_ns
    api_rows = np.nonzero(table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X") &
                          (table.pid == pid) & (ts >= t0) & (ts < t1))[0]
    rel = np.fromiter((names[r] in LAUNCH_APIS or names[r] in SYNC_APIS for r in api_rows),
                      bool, len(api_rows))
    threads = set(zip(table.pid[api_rows[rel]].tolist(), table.tid[api_rows[rel]].tolist()))
    threads.add((pid, step.tid))
    host_threads = sorted(threads, key=lambda k: (k != (pid, step.tid), k))
    on_host = np.fromiter(((int(p), int(t)) in threads for p, t in
                           zip(table.pid[api_rows], table.tid[api_rows])), bool, len(api_rows))
    calls = api_rows[on_host]
    calls = calls[np.argsort(ts[calls], kind="stable")].tolist()
    by_launch = links.by_launch
    act_launch: dict[int, int] = {}
    for c in calls:
        for g in by_launch.get(c, ()):
            act_launch[g] = c
    acts = sorted(act_launch, key=lambda g: (ts[g], g))
    task_of: dict[int, str] = {}
    count: dict[str, int] = {}
    for g in acts:
        s = ctx.stream_of[g]
        task_of[g] = f"s{s}.{count.get(s, 0)}"
        count[s] = count.get(s, 0) + 1
    ends_sorted = sorted((int(te[g]), g) for g in acts)
    return _StepActs(calls, host_threads, act_launch, acts, task_of,
                     np.array([e for e, _ in ends_sorted], dtype=np.int64),
                     [g for _, g in ends_sorted])


def _fit_step(ctx: _Ctx, step: Step) -> _StepFit:
    table, links = ctx.table, ctx.links
    ts, te, names = ctx.ts, ctx.te, ctx.names
    warnings: list[str] = []
    pid = step.pid
    t0 = step.start_ns
    t1 = step.cpu_end_ns if step.last else step.end_ns   # see _step_acts
    sa = ctx.step_acts(step)
    calls, host_threads, act_launch, acts = sa.calls, sa.host_threads, sa.act_launch, sa.acts
    task_of, end_vals, end_rows = sa.task_of, sa.end_vals, sa.end_rows
    cpu_rows = np.nonzero(table.is_cat("cpu_op", "user_annotation") & (table.ph == "X") &
                          (table.pid == pid) & (table.tid == step.tid) & (ts >= t0) & (ts < t1))[0]
    nexts = [int(r) for r in cpu_rows if DATALOADER_RE.search(names[r])]
    # ---- device activities launched by this step's calls
    by_launch = links.by_launch
    stream_of = ctx.stream_of
    lt = np.array([ts[act_launch[g]] for g in acts], dtype=np.int64)
    ltid = np.array([table.tid[act_launch[g]] for g in acts], dtype=np.int64)
    phases = _phase_of(ctx, host_threads, lt, ltid, step.tid) if acts else []
    per_stream: dict[str, list[int]] = {}
    for g in acts:
        per_stream.setdefault(stream_of[g], []).append(g)
    prev = ctx.previous(step)
    tasks: dict[int, DeviceTask] = {}
    kernel_us: dict[str, float] = {}
    idle_map: dict[str, float] = {}
    engine_free: dict[str, int] = {}
    colls = []
    n_waits = n_prev_waits = n_overlap = 0
    for k, g in enumerate(acts):
        s = stream_of[g]
        c = act_launch[g]
        start, dur = int(ts[g]), int(table.dur_ns[g])
        if ctx.prev_end.get(g, -1) > start:
            # overlaps the activity before it on its stream, which cannot run at once: only
            # the part after that one's end is this one's (the stream's busy time is the union)
            n_overlap += 1
            start, dur = ctx.prev_end[g], max(0, int(te[g]) - ctx.prev_end[g])
        first = by_launch[c][0] == g
        ready = max(ctx.prev_end.get(g, -1), int(te[c]) if first else -1)
        waits: list[str] = []
        if not first:
            f = by_launch[c][0]
            if stream_of[f] != s:
                waits.append(task_of[f])
                ready = max(ready, int(te[f]))
        name = str(names[g])
        engine = _copy_kind(name, None) if table.cat[g] == "gpu_memcpy" else ""
        if engine in ("h2d", "d2h"):
            # one copy engine per direction: a copy also waits for the one before it
            ready = max(ready, engine_free.get(engine, -1))
            engine_free[engine] = max(engine_free.get(engine, -1), start + dur)
        prev_waits: list[str] = []
        if start - ready > WAIT_MIN_US * 1000:
            lo = start - int(WAIT_WINDOW_US * 1000)
            i = int(np.searchsorted(end_vals, start, side="right")) - 1
            my_launch = ts[c]
            while i >= 0 and end_vals[i] >= lo:
                w = end_rows[i]
                if stream_of[w] != s and ts[act_launch[w]] < my_launch:
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
            b, gs, cname = _coll_info(table, g, c, ctx.comm_rows, ctx.ann_rows)
            extra = dict(bytes=b)
            colls.append((task_of[g], cname or name.split("(")[0], start, start + dur, gs))
        if phase == "optimizer" and cat in ("elementwise", "other", "reduction"):
            cat = "optimizer"
        dur_us = dur / 1000.0
        tid_ = task_of[g]
        kernel_us[tid_] = dur_us
        idle_map[tid_] = idle_us
        tasks[g] = DeviceTask(id=tid_, stream=s, name=name, kind=kind, category=cat, phase=phase,
                              dur_us=dur_us, gap_us=idle_us, waits=waits,
                              prev_waits=prev_waits, **extra)
    streams = {s: [tasks[g] for g in rows] for s, rows in per_stream.items()}
    by_id = {t.id: t for t in tasks.values()}
    stream_pos = {t.id: (s, i) for s, lst in streams.items() for i, t in enumerate(lst)}
    # ---- host ops
    ops: list[HostOp] = []
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

    graph_members = {task_of[g] for g in acts if by_launch[act_launch[g]][0] != g}

    op_t: list[int] = []

    def flush(at: int):
        nonlocal pending
        if pending > 0:
            ops.append(HostOp(kind="cpu", name="cpu", dur_us=pending / 1000.0))
            op_t.append(at - pending)
        pending = 0

    launched_acts: list[int] = []
    evs = sorted([(int(ts[r]), 0, r) for r in nexts] + [(int(ts[r]), 1, r) for r in calls])
    next_until = -1
    next_us: list[float] = []
    n_sync = n_block = n_unres = 0
    for a, kind, r in evs:
        b = int(te[r])
        if kind == 1 and a < next_until:
            continue  # inside DataLoader __next__: part of next_batch
        a_eff = max(a, cursor)
        pending += a_eff - cursor
        if kind == 0:
            flush(a_eff)
            ops.append(HostOp(kind="next_batch", name=str(names[r]), phase="data"))
            op_t.append(a_eff)
            next_us.append((b - a) / 1000.0)
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
                ld = min(max(0, int(ts[g0]) - max(a_eff, ctx.prev_end.get(g0, -1))), b - a_eff)
            else:
                ld = b - a_eff
            flush(a_eff)
            op_t.append(a_eff)
            ops.append(HostOp(kind="launch", name=nm, dur_us=max(0, ld) / 1000.0,
                              task=task_of[g0], category="launch"))
            launched.update(task_of[g] for g in gs)
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
            ops.append(HostOp(kind="sync", name=nm, dur_us=0.0, task=task_of[best], category="sync"))
            # the host resumes when the awaited work ends; the call's return latency (or, for
            # a copy that returned early, the lead it had) is charged to the next cpu op
            cursor = max(cursor, best_end)
        else:
            ops.append(HostOp(kind="sync", name=nm, dur_us=max(0, b - a_after) / 1000.0,
                              task=task_of[best], category="sync"))
            cursor = max(cursor, b)
    if t1 > cursor:
        pending += t1 - cursor
    flush(max(t1, cursor))
    if step.last and step.end_ns > max(t1, cursor) and launched_acts:
        ops.append(HostOp(kind="sync", name=END_OF_STEP_SYNC, dur_us=0.0))
        op_t.append(max(t1, cursor))
    # phases: a launch/sync op has its task's, a cpu op the phase of the time it starts
    tph = {t.id: t.phase for ts_ in streams.values() for t in ts_}
    cph = _phase_of(ctx, host_threads, np.array(op_t, dtype=np.int64),
                    np.full(len(op_t), step.tid, dtype=np.int64), step.tid) if ops else []
    ops = [op.model_copy(update={"phase": tph.get(op.task, "other") if op.task else
                                 (op.phase if op.kind == "next_batch" else str(cph[i]))})
           for i, op in enumerate(ops)]
    if n_overlap:
        warnings.append(f"{n_overlap} GPU activit(ies) in step {step.number} overlap the one "
                        "before them on the same stream (timestamps a stream cannot have): "
                        "each counts from the other's end, so the stream's busy time is the union")
    if n_unres:
        warnings.append(f"{n_unres} blocking call(s) in step {step.number} waited on work whose "
                        "dependencies are launched later; modelled as CPU time")
    counts = {"inferred_waits": n_waits, "inferred_prev_step_waits": n_prev_waits,
              "host_syncs": n_sync, "host_syncs_blocking": n_block,
              "host_threads": ",".join(f"{p}/{t}" for p, t in host_threads),
              "device_tasks": len(acts), "host_ops": len(ops)}
    return _StepFit(step=step, ops=ops, streams=streams, kernel_us=kernel_us, idle_us=idle_map,
                    next_us=next_us, colls=colls, counts=counts, warnings=warnings, acts=acts)


def _step_stats(ctx: _Ctx, step: Step, own: list[int] | None = None) -> dict:
    """Measured GPU busy %, kernel-sum ÷ step-wall and exposed communication (µs) of a step:
    the GPU activity in its window, clipped to [start, end) (what a profiler shows), or with
    ``own`` those rows, the work the step itself launched, wherever it ran, over the step's
    duration (what a replay of that step repeats every step)."""
    t0, t1 = step.start_ns, step.end_ns
    if own is None:
        gr = ctx.links.gpu_rows
        ts, te = ctx.ts[gr], ctx.te[gr]
        m = (te > t0) & (ts < t1)
        rows = gr[m]
        s, e = np.clip(ts[m], t0, t1), np.clip(te[m], t0, t1)
    else:
        rows = np.array(own, dtype=np.int64)
        s, e = ctx.ts[rows], ctx.te[rows]
    wall = (t1 - t0) / 1000.0
    busy = _union_len(s, e) / 1000.0
    ksum = float((e - s).sum()) / 1000.0
    comm = np.array([ctx.is_coll[g] for g in rows.tolist()], dtype=bool)
    exposed = _exposed(_union(s[comm], e[comm]), _union(s[~comm], e[~comm])) / 1000.0
    return {"gpu_busy_pct": 100.0 * busy / wall if wall > 0 else 0.0,
            "kernel_sum_over_step_wall": ksum / wall if wall > 0 else 0.0,
            "exposed_comm_us": exposed}


def _notes(ctx: _Ctx, kept: list[Step], fit: _StepFit, group: list[_StepFit], next_us):
    notes: dict = {}
    sources: dict = {}
    warnings: list[str] = []
    stats = [_step_stats(ctx, s) for s in kept]
    for k in ("gpu_busy_pct", "kernel_sum_over_step_wall", "exposed_comm_us"):
        notes[k] = float(np.median([st[k] for st in stats]))
    rep = fit.step
    own = _step_stats(ctx, rep, fit.acts)
    notes["step_gpu_busy_pct"] = own["gpu_busy_pct"]
    notes["step_exposed_comm_us"] = own["exposed_comm_us"]
    notes.update(fit.counts)
    notes["representative_step"] = rep.number
    notes["representative_step_us"] = rep.dur_us
    notes["median_of_steps"] = ",".join(str(g.step.number) for g in group)
    notes["device_gap_us"] = float(sum(t.gap_us for ts in fit.streams.values() for t in ts))
    notes["kernel_sum_us"] = float(sum(fit.kernel_us.values()))
    # copies: measured rate (GB/s, Kineto's "memory bandwidth (GB/s)") by direction and memory
    table = ctx.table
    tasks = [t for ts in fit.streams.values() for t in ts]
    for kind in ("h2d", "d2h", "d2d"):
        for pinned, label in ((True, "pinned"), (False, "pageable"), (None, "")):
            sel = [t for t in tasks if t.kind == "memcpy" and t.copy_kind == kind
                   and t.pinned is pinned and t.bytes]
            if sel:
                gb = sum(t.bytes for t in sel) / 1e9
                us = sum(fit.kernel_us[t.id] for t in sel)
                key = f"copy_{kind}{'_' + label if label else ''}_gbps"
                notes[key] = gb / (us / 1e6) if us > 0 else None
    rates = table.gbps[np.isin(table.cat, ["gpu_memcpy"]) & ~np.isnan(table.gbps)]
    if len(rates):
        notes["copy_gbps_median_trace"] = float(np.median(rates))
    sizes = sorted({gs for *_, gs in fit.colls if gs})
    if sizes:
        notes["collective_group_sizes"] = ",".join(map(str, sizes))
    if fit.colls:
        with_bytes = sum(1 for t in tasks if t.kind == "collective" and t.bytes is not None)
        notes["collectives_with_bytes"] = f"{with_bytes}/{len(fit.colls)}"
    # a wide spread of step times: one representative step cannot stand for all of them
    non_last = [s.dur_us for s in kept if not s.last]
    if len(non_last) >= 3:
        cv = float(np.std(non_last) / np.mean(non_last))
        notes["step_time_cv"] = cv
        if cv > STEP_CV_WARN:
            warnings.append(f"step times vary widely (coefficient of variation {cv:.2f}, "
                            f"{min(non_last) / 1e3:.1f}-{max(non_last) / 1e3:.1f} ms): the steady "
                            "state repeats the median step (with the measured next() times "
                            "resampled); the window replay reproduces the steps one by one")
    _input_stalls(ctx, kept, rep, notes, warnings)
    if next_us:
        # every next() the captured steps measured, resampled step by step: stalls included
        produce = (DurationSpec.from_samples(next_us) if len(set(next_us)) > 1
                   else DurationSpec.constant(next_us[0]))
        loader = LoaderParams(num_workers=0, produce=produce, host_cores=ASSUMED_HOST_CORES)
        sources["loader.produce"] = "inferred"
        notes["dataloader_next_us"] = produce.mean_us
        names = {str(n) for n in
                 ctx.table.names[ctx.table.is_cat("cpu_op", "user_annotation")][:200000]}
        single = any("_SingleProcessDataLoaderIter" in n for n in names)
        multi = any("_MultiProcessingDataLoaderIter" in n for n in names)
        if single and not multi:
            # the iterator's class says num_workers=0: next() is the main thread's own loading
            sources["loader.num_workers"] = "measured"
        else:
            shows = ("the trace shows a multi-process DataLoader but not its num_workers"
                     if multi else "DataLoader worker count is not in a GPU trace")
            warnings.append(f"{shows}: the loader is modelled as its measured next() time on "
                            "the main thread (num_workers=0 in the model); give a capture "
                            "sidecar for the real settings")
    else:
        loader = LoaderParams(host_cores=ASSUMED_HOST_CORES)
    warnings.append(f"host CPU cores are not in a GPU trace: assumed {ASSUMED_HOST_CORES} for "
                    "the DataLoader workers and the main thread; give a capture sidecar for the "
                    "real count")
    return notes, sources, loader, warnings


def _input_stalls(ctx: _Ctx, kept: list[Step], rep: Step, notes: dict, warnings: list[str]):
    """Note the steps whose DataLoader ``next()`` took ``INPUT_STALL_SHARE`` of the
    representative step or more when the representative step itself did not: the loader could
    not keep up there, and a model of one step (whose loader is its ``next()`` time) replays
    the other regime. ``notes``: ``input_stalled_steps``, ``input_stall_mean_us`` (mean
    ``next()`` of those steps), ``input_stalled_step_mean_us`` (their mean step)."""
    t = ctx.table
    rows = np.nonzero(t.is_cat("cpu_op", "user_annotation") & (t.ph == "X"))[0]
    rows = rows[np.fromiter((bool(DATALOADER_RE.search(n)) for n in t.names[rows]), bool,
                            len(rows))]

    def next_us(s: Step) -> float:
        m = (t.tid[rows] == s.tid) & (t.ts_ns[rows] >= s.start_ns) & (t.ts_ns[rows] < s.end_ns)
        return float(t.dur_ns[rows[m]].sum()) / 1000.0

    limit = INPUT_STALL_SHARE * rep.dur_us
    if next_us(rep) >= limit:
        return
    stalled = [(s, w) for s in kept if not s.last for w in (next_us(s),) if w >= limit]
    if not stalled:
        return
    wait = float(np.mean([w for _, w in stalled]))
    step = float(np.mean([s.dur_us for s, _ in stalled]))
    notes.update(input_stalled_steps=len(stalled), input_stall_mean_us=wait,
                 input_stalled_step_mean_us=step)
    warnings.append(f"{len(stalled)} of {len(kept)} steps waited {wait / 1e3:.1f} ms on average "
                    f"for the DataLoader (those steps: {step / 1e3:.1f} ms on average): the "
                    "workers could not keep up there; the steady state draws such waits as "
                    "often as they were measured, and a capture sidecar (the workers' count and "
                    "produce time) would model why")


def _exposed(comm_iv, other_iv) -> float:
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


# ------------------------------------------------------------------------------ the model
def _single_model(fit: RankFit, paths: list[Path]) -> StepModel:
    meta = Meta(name=fit.path.name, sources=fit.sources, traces=[str(p) for p in paths],
                steps_used=fit.steps_used, measured_step_us=fit.measured_us,
                warnings=fit.warnings, notes=dict(fit.notes))
    meta.notes["measured_median_step_us"] = fit.median_us
    meta.notes["rank_source"] = fit.rank_from
    model = StepModel(loader=fit.loader, host=HostParams(ops=fit.ops),
                      device=DeviceParams(streams=fit.streams,
                                          launch_queue_depth=_queue_depth([fit])),
                      comm=CommParams(world_size=max(1, fit.world_size)),
                      ranks=[RankParams(rank=max(0, fit.rank))], meta=meta, replay=fit.replay)
    _mark_sources(model, "measured" if fit.rank_from == "distributedInfo" else "assumed",
                  ref_rank=model.ranks[0].rank)
    return model


def _queue_depth(fits: list[RankFit]) -> int:
    """The launch queue's depth: ``LAUNCH_QUEUE_DEPTH``, or more when a trace shows more
    launches pending without the host blocking."""
    return max([LAUNCH_QUEUE_DEPTH] + [f.peak_pending for f in fits])


def _mark_sources(model: StepModel, world_size: str, ref_rank: int) -> None:
    """Give every parameter of ``model`` a source in ``meta.sources`` (in place), each key a
    dotted path that :mod:`scenarios.paths` resolves; sources the fit already set (the
    loader's produce time) are kept.

    Measured: the host ops and the device tasks (durations, order, bytes; their inferred
    cross-stream waits are structure, counted in ``notes["inferred_waits"]``), and the
    reference rank's skew (zero by definition). Inferred: ``device.launch_queue_depth`` when a
    trace showed more than ``LAUNCH_QUEUE_DEPTH`` launches pending (else assumed),
    ``device.gap_scale`` when the tasks have gaps (idle the trace does not explain), the
    other ranks' skew. Assumed: every loader
    and comm setting a GPU trace does not record, ``host.uses_core``; ``comm.world_size`` is
    ``world_size``. Rank numbers are identifiers, not quantities: where each came from is in
    ``notes["rank_source"]`` and the warnings."""
    src: dict[str, str] = {"host.ops": "measured", "host.uses_core": "assumed",
                           "device.streams": "measured"}
    has_gap = any(t.gap_us > 0 for ts in model.device.streams.values() for t in ts)
    src["device.gap_scale"] = "inferred" if has_gap else "measured"
    src["device.launch_queue_depth"] = ("inferred" if model.device.launch_queue_depth
                                        > LAUNCH_QUEUE_DEPTH else "assumed")
    src.update({f"loader.{k}": "assumed" for k in LoaderParams.model_fields})
    src.update({f"comm.{k}": "assumed" for k in CommParams.model_fields})
    src["comm.world_size"] = world_size
    for r in model.ranks:
        how = "measured" if r.rank == ref_rank else "inferred"
        src[f"ranks.{r.rank}.delay_us"] = how
        src[f"ranks.{r.rank}.phase_extra_us"] = how
    src.update({k: v for k, v in model.meta.sources.items() if k in src})
    model.meta.sources = src


def calibrate_gpu(paths, step_regex: str | None = None, coarse: bool = True) -> StepModel:
    """Calibrate a StepModel from a GPU trace file or a directory of per-rank trace files.

    Args:
        paths: a ``.json``/``.json.gz`` Kineto trace, a directory of per-rank traces, a
            list of trace files, or an already built :class:`~calibration.events.EventTable`
            (so a trace read from a pipe is read once).
        step_regex: optional regular expression naming the step marker (see
            :func:`calibration.steps.find_steps`).
        coarse: return the model coarsened by :func:`models.coarsen.coarsen` (default: it
            replays the same step with far fewer tasks, which is what the planner's many
            simulations need); False for the fine, kernel-level model.

    Returns:
        the StepModel. ``meta`` holds the sources, steps used, measured step times (µs),
        warnings and notes: ``gpu_busy_pct``, ``kernel_sum_over_step_wall`` and
        ``exposed_comm_us`` (µs per step) as a profiler reads them, the median over the steps
        of their windows; ``step_gpu_busy_pct`` and ``step_exposed_comm_us``, the same for the
        representative step's own GPU work over its duration, which is what a replay repeats
        every step (the two differ when the device's backlog changes from step to step);
        ``coarsened_tasks``, ….

    Raises:
        InputError: unreadable or malformed trace, no GPU activity, no step, no complete step.
    """
    tables, plist, notes, folder = gpu_inputs(paths)
    fits: list[RankFit] = []
    for table in tables:
        if not table.gpu_mask().any():
            raise InputError(table.path, "trace has no GPU activity (kernel/memcpy/memset); use "
                             "the CPU calibration for host-only traces")
        try:
            fits.append(fit_rank(table, step_regex=step_regex, warnings=list(table.warnings)))
        except InputError as e:
            if folder is None:
                raise
            folder.skipped.append(f"{table.path.name}: {e.problem}")   # named, not fatal
    if folder is not None:
        if not fits:
            raise InputError(folder.path, "no trace in the folder could be calibrated: "
                             + "; ".join(folder.skipped))
        plist = [f.path for f in fits]
        notes += folder.skip_note()
    if len(fits) == 1:
        f = fits[0]
        if f.rank < 0:
            f.warnings.append(f"{f.path.name}: no rank in distributedInfo or file name; taken as rank 0")
            f.rank = 0
        model = _single_model(f, plist)
    else:
        model = _combine_ranks(fits, plist)
    model.meta.warnings[:0] = notes
    return coarsen(model) if coarse else model


def _number_unranked(fits: list[RankFit], warnings: list[str]) -> None:
    """Files with no rank (no ``distributedInfo``, none in the name) become the lowest free
    ranks in file-name order, with a warning naming them: several files of one job, never
    one of them silently dropped."""
    taken = {f.rank for f in fits}
    unranked = sorted((f for f in fits if f.rank < 0), key=lambda f: f.path.name)
    rank = 0
    for f in unranked:
        while rank in taken:
            rank += 1
        f.rank = rank
        taken.add(rank)
    if unranked:
        warnings.append(f"{', '.join(f.path.name for f in unranked)}: no rank in "
                        "distributedInfo or file name; taken as rank(s) "
                        f"{', '.join(str(f.rank) for f in unranked)} of one job, in file-name "
                        "order")


def _combine_ranks(fits: list[RankFit], paths: list[Path]) -> StepModel:
    """One StepModel for several ranks: the structure of the rank that arrives first at the
    collectives (its work is never hidden behind waiting), collective durations from the last
    rank to arrive, and every other rank's lateness as its ``RankParams`` skew."""
    warnings: list[str] = []
    for f in fits:
        warnings += f.warnings
    by_rank: dict[int, RankFit] = {}
    _number_unranked(fits, warnings)
    for f in sorted(fits, key=lambda f: f.path.name):
        if f.rank in by_rank:
            used = by_rank[f.rank].path.name
            warnings.append(f"{f.path.name} and {used} both claim rank {f.rank}: taken as two "
                            f"separate captures, not two ranks of one run; using {used} (first "
                            f"by file name) and ignoring {f.path.name}")
            continue
        by_rank[f.rank] = f
    ranks = sorted(by_rank)
    if len(ranks) == 1:
        f = by_rank[ranks[0]]
        f.warnings = warnings
        return _single_model(f, paths)
    # --- match collectives by (name, occurrence) and align clocks on their ends
    def keyed(f: RankFit):
        seen: dict[str, int] = {}
        out = {}
        for tid_, name, s0, e0, _gs in f.collectives:
            k = seen.get(name, 0)
            seen[name] = k + 1
            out[(name, k)] = (tid_, f.base_ns + s0, f.base_ns + e0)
        return out

    colls = {r: keyed(by_rank[r]) for r in ranks}
    common = set.intersection(*(set(c) for c in colls.values())) if colls else set()
    if not common:
        warnings.append("no collective matches across ranks: clocks not aligned, no skew fitted")
    first = ranks[0]
    offset = {r: 0 for r in ranks}
    for r in ranks[1:]:
        d = [colls[r][k][2] - colls[first][k][2] for k in common]
        offset[r] = int(np.median(d)) if d else 0
    order = sorted(common, key=lambda k: colls[first][k][1])
    arrive = {r: [colls[r][k][1] - offset[r] for k in order] for r in ranks}
    # the reference: the rank that arrives first (median lateness against the earliest)
    if order:
        earliest = np.min(np.array([arrive[r] for r in ranks]), axis=0)
        late_med = {r: float(np.median(np.array(arrive[r]) - earliest)) for r in ranks}
        ref_rank = min(ranks, key=lambda r: (late_med[r], r))
    else:
        ref_rank = first
    ref = by_rank[ref_rank]
    # transfer time of each collective: its duration on the last rank to arrive
    transfer: dict[str, float] = {}
    skew_us: dict[int, list[float]] = {r: [] for r in ranks}
    for i, k in enumerate(order):
        arr = {r: arrive[r][i] for r in ranks}
        last_r = max(ranks, key=lambda r: (arr[r], r))
        _, s_l, e_l = colls[last_r][k]
        transfer[colls[ref_rank][k][0]] = (e_l - s_l) / 1000.0
        for r in ranks:
            skew_us[r].append((arr[last_r] - arr[r]) / 1000.0)
    streams = {}
    for sname, ts in ref.streams.items():
        out = []
        for t in ts:
            if t.id in transfer:
                out.append(t.model_copy(update={"dur_us": transfer[t.id], "breakdown_us": {}}))
            else:
                out.append(t)
        streams[sname] = out
    phase_of = {t.id: t.phase for ts in ref.streams.values() for t in ts}
    # each rank's lateness against the reference, by collective: the first goes to delay_us,
    # later increases to the phase of the collective where they show
    rank_params = []
    for r in ranks:
        if r == ref_rank or not order:
            rank_params.append(RankParams(rank=r))
            continue
        late = [(arrive[r][i] - arrive[ref_rank][i]) / 1000.0 for i in range(len(order))]
        delay = max(0.0, late[0])
        extra: dict[str, float] = {}
        prev = late[0]
        for i in range(1, len(order)):
            inc = late[i] - max(prev, 0.0)
            if inc > 0:
                ph = phase_of.get(colls[ref_rank][order[i]][0], "forward")
                if ph == "data":
                    ph = "forward"
                extra[ph] = extra.get(ph, 0.0) + inc
            prev = late[i]
        has_phase = {t.phase for ts in streams.values() for t in ts if t.kind != "collective"}
        extra = {k: v for k, v in extra.items() if k in has_phase and v > 0}
        rank_params.append(RankParams(rank=r, delay_us=delay, phase_extra_us=extra))
    # measured: the job pays the slowest rank in each step
    numbers = set.intersection(*(set(by_rank[r].step_us_by_number) for r in ranks))
    if numbers:
        nums = sorted(numbers)
        job = [max(by_rank[r].step_us_by_number[n] for r in ranks) for n in nums]
    else:
        nums = ref.steps_used
        job = ref.measured_us
        warnings.append("ranks share no step number; measured step times are the reference rank's")
    notes = dict(ref.notes)
    notes.update({
        "reference_rank": ref_rank,
        "ranks": ",".join(map(str, ranks)),
        "clock_offsets_us": ",".join(f"{r}:{offset[r] / 1000.0:.1f}" for r in ranks),
        "collectives_matched": len(order),
        "arrival_skew_us_median": ",".join(
            f"{r}:{float(np.median(skew_us[r])) if skew_us[r] else 0.0:.1f}" for r in ranks),
        "measured_median_step_us": float(np.median(job)),
        "per_rank_median_step_us": ",".join(f"{r}:{by_rank[r].median_us:.1f}" for r in ranks),
    })
    notes["rank_source"] = ",".join(f"{r}:{by_rank[r].rank_from}" for r in ranks)
    world = max([f.world_size for f in by_rank.values()] + [len(ranks)])
    meta = Meta(name=f"{len(ranks)} ranks", sources=dict(ref.sources),
                traces=[str(p) for p in paths], steps_used=nums, measured_step_us=job,
                warnings=warnings, notes=notes)
    # a window replay is of one rank: the reference rank's captured values are dropped
    ops = [op.model_copy(update={"replay_us": None}) for op in ref.ops]
    streams = {s: [t.model_copy(update={"replay_us": None, "replay_gap_us": None}) for t in ts]
               for s, ts in streams.items()}
    model = StepModel(loader=ref.loader, host=HostParams(ops=ops),
                      device=DeviceParams(streams=streams, launch_queue_depth=_queue_depth(fits)),
                      comm=CommParams(world_size=world),
                      ranks=rank_params, meta=meta)
    from_info = any(f.rank_from == "distributedInfo" for f in by_rank.values())
    _mark_sources(model, "measured" if from_info else "inferred", ref_rank)
    return _cap_skew(model, ref_rank, ref.median_us)


def _cap_skew(model: StepModel, ref_rank: int, ref_step_us: float) -> StepModel:
    """Scale every rank's lateness so the reference rank waits in the model no longer than it
    waited in the trace.

    Lateness at a collective is charged as extra time on the late rank; the part of it the
    reference rank hid behind its own host work (it kept launching while the collective
    waited) would otherwise be charged twice. The reference's own time without skew is its
    simulated step alone; its measured step minus that is the waiting budget."""
    from stepsim.models.simulate import simulate

    worst = max((r.delay_us + sum(r.phase_extra_us.values()) for r in model.ranks), default=0.0)
    if worst <= 0:
        return model
    alone = model.model_copy(update={"ranks": [RankParams(rank=ref_rank)]})
    step_alone = simulate(alone, steps=2, warmup=1).median_step_us
    budget = max(0.0, ref_step_us - step_alone)
    model.meta.notes["reference_alone_step_us"] = step_alone
    if worst <= budget:
        model.meta.notes["skew_scale"] = 1.0
        return model
    f = budget / worst
    model.meta.notes["skew_scale"] = f
    ranks = [r.model_copy(update={"delay_us": r.delay_us * f,
                                  "phase_extra_us": {k: v * f for k, v in r.phase_extra_us.items()}})
             for r in model.ranks]
    return model.model_copy(update={"ranks": ranks})
