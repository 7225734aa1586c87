"""The StepModel: one calibrated (or hand-written) model of a rank's training step.

It is the single intermediate representation between calibration, the what-if planner and the
simulator. It round-trips through JSON (``model_dump_json`` / :func:`load_model`) and can be
hand-written in YAML. Every time is in **µs**, every size in **bytes**, every rate in **GB/s**.

Structure (see ``../shared/DESIGN.md``)::

    StepModel
      loader   LoaderParams     DataLoader settings and costs (torch/utils/data/dataloader.py)
      host     HostParams       the host thread's per-step sequence of HostOps
      device   DeviceParams     per stream, the ordered DeviceTasks
      comm     CommParams       collective cost model and DDP buckets
      ranks    [RankParams]     the ranks simulated, with their skew
      meta     Meta             sources, steps used, measured step times, warnings

``meta.sources`` maps a dotted parameter path (``loader.produce``) to how it was obtained:
``measured`` (read from a trace or the capture sidecar), ``inferred`` (derived from measured
values by a stated rule) or ``assumed`` (a default nobody measured).
"""
from __future__ import annotations

import copy
from pathlib import Path
from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stepsim.simcore.dists import Constant, Duration, Empirical, LogNormal
from stepsim.simcore.errors import InputError, ModelError, printable
from stepsim.simcore.files import read_input

Source = Literal["measured", "inferred", "assumed"]
CATEGORIES = (
    "gemm", "conv", "elementwise", "reduction", "normalization", "attention",
    "memcpy", "memset", "communication", "optimizer", "other",
)
Category = Literal[
    "gemm", "conv", "elementwise", "reduction", "normalization", "attention",
    "memcpy", "memset", "communication", "optimizer", "other",
]
PHASES = ("forward", "backward", "optimizer", "data", "other")
Phase = Literal["forward", "backward", "optimizer", "data", "other"]
SCHEMA_VERSION = 1
MAX_WORKERS, MAX_PREFETCH, MAX_THREADS, MAX_CORES = 1024, 1024, 256, 4096
"""Bounds on loader settings: far beyond any real DataLoader or host, and small enough that a
typo (``num_workers=1000000``) is an error rather than a simulation that never ends."""
MAX_OUTSTANDING = 16384
"""Most batches ``num_workers × prefetch_factor`` may keep outstanding in a simulation."""
MAX_RANKS = 512
"""Most ranks one model simulates."""
MAX_RANK_ID = 2**31 - 1
"""Largest rank number (and world size) accepted: what c10d's int rank holds."""


LAUNCH_QUEUE_DEPTH = 1024
"""Pending launches CUDA's launch queue holds before a launch blocks the host: about 1024, an
undocumented figure consistent with traces where the host stalls inside ``cudaLaunchKernel``
(assumed; a calibrated model raises it when its trace shows more pending)."""
MAX_LAUNCH_QUEUE_DEPTH = 1 << 24
"""Largest ``device.launch_queue_depth`` accepted (a bound on typos, not a hardware figure)."""


MAX_DURATION_US = 1e12
"""Longest duration (µs, about 11.6 days) any one field may hold: beyond any real step, and
small enough that sums of them stay finite."""
Micros = Annotated[float, Field(ge=0, le=MAX_DURATION_US)]
"""A duration in µs, 0 to ``MAX_DURATION_US``."""
StepMicros = Annotated[float, Field(gt=0, le=MAX_DURATION_US)]
"""A measured step time in µs: a step always takes some time."""


def _non_empty(obj, *names: str) -> None:
    """Raise ValueError if a list field among ``names`` of ``obj`` is given but empty."""
    for name in names:
        if getattr(obj, name) == []:
            raise ValueError(f"{name} must not be empty")


def _scalar_kind(annotation) -> str | None:
    """``"int"``, ``"float"`` or ``"bool"`` for a field of that type (or that type or None)."""
    origin = get_origin(annotation)
    if origin is None:
        args = [annotation]
    elif origin in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
    else:
        return None
    if len(args) == 1 and args[0] in (int, float, bool):
        return args[0].__name__
    return None


_SCALAR_KINDS: dict[type, dict[str, str]] = {}


def _scalar_fields(cls) -> dict[str, str]:
    """Field name → :func:`_scalar_kind` of model class ``cls``, computed once per class (the
    check runs on every object built, and ``model_fields`` is slow to read)."""
    kinds = _SCALAR_KINDS.get(cls)
    if kinds is None:
        kinds = _SCALAR_KINDS[cls] = {
            name: k for name, f in cls.model_fields.items()
            if (k := _scalar_kind(f.annotation)) is not None}
    return kinds


_SCALAR_OK = {"bool": lambda v: isinstance(v, bool),
              "int": lambda v: not isinstance(v, (bool, str, float)),
              "float": lambda v: not isinstance(v, (bool, str))}


class _Strict(BaseModel):
    # infinities and NaNs are refused everywhere: no real duration, size or rate is one
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _strict_scalars(cls, data):
        """A number, a count or a switch must be written as one: pydantic's lax mode would read
        ``"4"`` as 4, ``true`` as 1 and ``"yes"`` as True."""
        if isinstance(data, dict):
            kinds = _scalar_fields(cls)
            for name, value in data.items():
                kind = kinds.get(name) if isinstance(name, str) else None
                if kind and value is not None and not _SCALAR_OK[kind](value):
                    what = {"int": "an integer", "float": "a number", "bool": "true or false"}
                    raise ValueError(f"{name} must be {what[kind]}, not "
                                     f"{type(value).__name__} {value!r}")
        return data


class DurationSpec(_Strict):
    """A duration distribution in µs, hand-writable as ``{mean_us: 900, cv: 0.1}`` or
    ``{samples_us: [...]}`` (resampled with replacement; ``mean_us`` is then their mean)."""

    mean_us: Micros
    cv: float = Field(default=0.0, ge=0)
    samples_us: list[Micros] | None = None

    @model_validator(mode="after")
    def _check_samples(self):
        _non_empty(self, "samples_us")
        return self

    @classmethod
    def constant(cls, us: float) -> "DurationSpec":
        return cls(mean_us=us)

    @classmethod
    def from_samples(cls, samples_us: list[float]) -> "DurationSpec":
        s = [float(v) for v in samples_us]
        return cls(mean_us=sum(s) / len(s), samples_us=s)

    def build(self) -> Duration:
        """The simcore distribution: Empirical if samples are given, else LogNormal (cv > 0)
        or Constant."""
        if self.samples_us:
            return Empirical(tuple(self.samples_us))
        if self.cv > 0:
            return LogNormal(self.mean_us, self.cv)
        return Constant(self.mean_us)

    def scaled(self, factor: float) -> "DurationSpec":
        """Every value multiplied by ``factor`` (≥ 0)."""
        if factor < 0:
            raise ModelError(f"scale factor must be >= 0, got {factor}")
        return DurationSpec(
            mean_us=self.mean_us * factor, cv=self.cv,
            samples_us=None if self.samples_us is None else [v * factor for v in self.samples_us],
        )


class LoaderParams(_Strict):
    """DataLoader settings and costs, named as in ``torch.utils.data.DataLoader``.

    Semantics follow ``torch/utils/data/dataloader.py``: at most ``num_workers ×
    prefetch_factor`` batches outstanding, indices sent to workers round-robin, one new index
    sent per batch returned, in-order delivery unless ``in_order`` is False; ``num_workers=0``
    loads on the main thread.
    """

    num_workers: int = Field(default=0, ge=0, le=MAX_WORKERS)
    prefetch_factor: int = Field(default=2, ge=1, le=MAX_PREFETCH)
    pin_memory: bool = False
    in_order: bool = True
    persistent_workers: bool = False
    batch_size: int | None = Field(default=None, ge=1)
    produce: DurationSpec = Field(default_factory=lambda: DurationSpec(mean_us=0.0))
    """CPU time (µs) one thread needs to produce one batch (fetch, decode, augment, collate) on
    an uncontended core."""
    threads_per_worker: int = Field(default=1, ge=1, le=MAX_THREADS)
    host_cores: int = Field(default=1, ge=1, le=MAX_CORES)
    """Cores shared by the workers, the main thread and the pin-memory thread
    (``len(os.sched_getaffinity(0))``)."""
    unpickle_us: Micros = 0.0
    """Main-thread cost (µs) of receiving one batch from a worker."""
    corun_ref: float = Field(default=0.0, ge=0, le=MAX_THREADS)
    """Other runnable threads per core beside a worker while it produced, on average, in the
    capture the ``produce`` times come from (``HostParams.interference`` is relative to it)."""
    batch_bytes: int = Field(default=0, ge=0)
    """Bytes of one collated batch (what the pin-memory thread copies)."""
    pin_gbps: float = Field(default=8.0, gt=0)
    """Rate (GB/s) at which the pin-memory thread copies a batch into page-locked memory."""
    worker_startup_us: Micros = 0.0
    """Time (µs) to start the workers at the beginning of an epoch (paid per epoch unless
    ``persistent_workers``)."""
    batches_per_epoch: int | None = Field(default=None, ge=1)
    produce_by_worker: list[DurationSpec] | None = None
    """Per-worker production time (index = worker id), overriding ``produce`` (a slow worker,
    a worker pinned to a busy core); must list ``num_workers`` entries."""

    @model_validator(mode="after")
    def _check_by_worker(self):
        if self.produce_by_worker is not None and len(self.produce_by_worker) != self.num_workers:
            raise ValueError(f"produce_by_worker lists {len(self.produce_by_worker)} workers, "
                             f"num_workers is {self.num_workers}")
        if self.num_workers * self.prefetch_factor > MAX_OUTSTANDING:
            raise ValueError(f"num_workers x prefetch_factor = "
                             f"{self.num_workers * self.prefetch_factor} batches outstanding; "
                             f"at most {MAX_OUTSTANDING} are simulated")
        return self


HostKind = Literal["cpu", "launch", "sync", "next_batch"]


class HostOp(_Strict):
    """One item of the host thread's per-step sequence.

    kind:
      * ``cpu``: CPU work of ``dur_us`` µs on the host thread (Python, framework overhead).
      * ``launch``: a launch API call costing ``dur_us`` µs that enqueues device task ``task``.
      * ``sync``: the host blocks until device task ``task`` finishes (``task=None``: until
        every device task launched so far finishes, as ``cudaDeviceSynchronize``); ``dur_us``
        is the call's own CPU cost.
      * ``next_batch``: ``next()`` on the DataLoader; waits for the next batch in order.
    """

    kind: HostKind
    name: str = ""
    dur_us: Micros = 0.0
    samples_us: list[Micros] | None = None
    """For ``cpu`` ops: measured per-step durations (µs); each simulated step draws one of
    them (with replacement) instead of ``dur_us``, so step-to-step variation is kept."""
    task: str | None = None
    category: str = "other"
    phase: Phase = "other"
    """Training phase the op belongs to (what-ifs scale a phase; under DDP's ``no_sync`` the
    ``optimizer`` phase is skipped)."""
    threads: int = Field(default=1, ge=1, le=MAX_THREADS)
    """For ``cpu`` ops: the intra-op threads its parallel part runs on
    (``torch.get_num_threads()`` in the capture)."""
    parallel_fraction: float = Field(default=0.0, ge=0, le=1)
    """For ``cpu`` ops: the share of ``dur_us`` (wall, every thread with a core) during which
    ``threads`` threads each do CPU work; the rest is one thread's work, then blocking."""
    block_fraction: float = Field(default=0.0, ge=0, le=1)
    """For ``cpu`` ops: the share of ``dur_us`` that waits without using a core (a sleep, a
    CUDA synchronisation, I/O): it does not compete with DataLoader workers for cores."""
    corun_ref: float = Field(default=0.0, ge=0, le=MAX_THREADS)
    """For ``cpu`` ops: other runnable threads per core beside this op, on average, in the
    capture its durations come from (``HostParams.interference`` is relative to it)."""
    replay_us: list[Micros] | None = None
    """One value (µs) per step of the captured window (:class:`ReplayWindow`), in order: what
    this op took in that step (for ``next_batch``, the measured ``next()`` time). Only a
    window replay (``models.simulate.simulate(..., replay=True)``) reads it."""

    @model_validator(mode="after")
    def _check_samples(self):
        _non_empty(self, "samples_us", "replay_us")
        if self.parallel_fraction + self.block_fraction > 1 + 1e-9:
            raise ValueError("parallel_fraction + block_fraction must be <= 1")
        return self


class HostParams(_Strict):
    """The host thread: one step is ``ops`` in order, repeated every step."""

    ops: list[HostOp] = Field(default_factory=list)
    uses_core: bool = True
    """Whether the host thread's CPU work takes a core from the shared pool (it competes with
    DataLoader workers for ``loader.host_cores``)."""
    cpu_scale: float = Field(default=1.0, gt=0, le=1e3)
    """Factor on every CPU duration of the host (host thread, workers, pin-memory thread):
    the machine's speed in this run relative to the capture (1: as calibrated). One number
    for the host's run-to-run noise, so a prediction interval can vary it."""
    interference: float = Field(default=0.0, ge=0, le=100)
    """Co-run interference: CPU work runs ``1 + interference × o`` times slower with ``o``
    other runnable threads per core beside it (shared caches and memory bandwidth), relative
    to the load its durations were captured under (``corun_ref``)."""
    interference_range: tuple[float, float] | None = None
    """Uncertainty of ``interference`` (low, high), drawn uniformly by prediction intervals:
    calibrated from a probe, or a stated prior without one."""


TaskKind = Literal["kernel", "memcpy", "memset", "collective"]


class DeviceTask(_Strict):
    """One task on a device lane (a CUDA stream, a copy engine, the communication stream).

    Tasks on one stream run in list order. A task is ready when its stream is free, its launch
    (the host op naming it, if any) has been issued, and every task in ``waits`` has finished;
    it starts ``gap_us`` (× ``DeviceParams.gap_scale``) later.
    For ``collective`` tasks ``dur_us`` is the transfer time (taken from the last rank to
    arrive); the simulated collective also waits for every rank to arrive.
    """

    id: str
    stream: str
    name: str = ""
    kind: TaskKind = "kernel"
    category: Category = "other"
    phase: Phase = "other"
    dur_us: Micros
    breakdown_us: dict[str, Micros] = Field(default_factory=dict)
    """After coarsening: µs per category of the merged tasks (sums to ``dur_us``)."""
    waits: list[str] = Field(default_factory=list)
    prev_waits: list[str] = Field(default_factory=list)
    """Tasks whose run in the *previous* step this task also waits for: a cross-step event
    wait (``cudaStreamWaitEvent`` on an event the previous step recorded), as when a pipelined
    input copy waits for the last step's optimizer. Ignored in the first simulated step."""
    bytes: int | None = Field(default=None, ge=0)
    copy_kind: Literal["", "h2d", "d2h", "d2d"] = ""
    pinned: bool | None = None
    launches: int = Field(default=1, ge=1)
    """Fine launches this task stands for after coarsening: its host launch takes that many
    slots of the launch queue until it finishes."""
    gap_us: Micros = 0.0
    """Idle time (µs) between the task becoming ready and starting that nothing in the model
    explains (device-side launch latency, a dependency the trace does not show). The stream
    waits it out before the task's busy ``dur_us``; it is not busy time. After coarsening, the
    gaps inside a merged chain, summed."""
    replay_us: list[Micros] | None = None
    """Busy time (µs) in each step of the captured window (:class:`ReplayWindow`), in order."""
    replay_gap_us: list[Micros] | None = None
    """Unexplained idle (µs, as ``gap_us``) in each step of the captured window."""

    @model_validator(mode="after")
    def _check_replay(self):
        _non_empty(self, "replay_us", "replay_gap_us")
        return self

    def category_us(self) -> dict[str, float]:
        """µs per category: ``breakdown_us`` when coarsened, else ``{category: dur_us}``."""
        return dict(self.breakdown_us) if self.breakdown_us else {self.category: self.dur_us}


class DeviceParams(_Strict):
    """Per stream, the ordered tasks. Stream names are free-form (Kineto stream ids as
    strings, or ``h2d``, ``comm`` in hand-written models)."""

    streams: dict[str, list[DeviceTask]] = Field(default_factory=dict)
    launch_queue_depth: int = Field(default=LAUNCH_QUEUE_DEPTH, ge=1, le=MAX_LAUNCH_QUEUE_DEPTH)
    """Launched, unfinished device tasks the runtime holds before a launch blocks the host
    (``LAUNCH_QUEUE_DEPTH`` unless a trace showed more pending; see
    ``models.device.LaunchQueue``)."""
    gap_scale: float = Field(default=1.0, ge=0, le=1e6)
    """Factor on every task's ``gap_us`` when simulated (1: as calibrated). One number for
    all of the device's unexplained idle, so a what-if or a prediction interval can vary it."""

    def tasks(self) -> dict[str, DeviceTask]:
        return {t.id: t for ts in self.streams.values() for t in ts}


class GradParam(_Strict):
    """One model parameter as DDP sees it: its gradient's size and the task that makes it."""

    name: str
    bytes: int = Field(ge=0)
    ready_task: str | None = None
    """The backward device task after which this gradient is ready (None: end of backward)."""
    dtype: str = "float32"
    """Gradient dtype: DDP never mixes dtypes in one bucket (reducer.cpp ``BucketKey``)."""


class CommParams(_Strict):
    """Collective cost and DDP settings (``torch/nn/parallel/distributed.py``).

    A ring all-reduce of ``b`` bytes on ``n`` ranks costs
    ``latency_us + 2(n-1)/n × b / bus_gbps`` (µs, with b/bus_gbps converted to µs).
    """

    world_size: int = Field(default=1, ge=1, le=MAX_RANK_ID + 1)
    bus_gbps: float | None = Field(default=None, gt=0)
    """Bus bandwidth (GB/s); None keeps each collective's measured transfer time."""
    latency_us: Micros = 0.0
    bucket_cap_mb: float = Field(default=25.0, gt=0)
    first_bucket_cap_mb: float = Field(default=1.0, gt=0)
    grad_params: list[GradParam] = Field(default_factory=list)
    """Parameters in registration order (DDP walks them in reverse)."""
    comm_stream: str = "comm"
    host_cpu_us: Micros = 0.0
    host_cpu_us_per_mb: Micros = 0.0
    """A collective's CPU work on its rank's host cores: ``host_cpu_us + host_cpu_us_per_mb ×
    bytes / 2**20`` (gloo on CPU tensors: its worker and TCP loop threads copy and reduce the
    data; both 0 for NCCL, whose work runs on the GPU). It competes with the training threads
    for the cores the rank's host shares; the collective ends when its transfer and that work
    are done (:func:`models.device.stream_process`)."""
    grad_accum_steps: int = Field(default=1, ge=1)
    """Gradient accumulation: each optimizer step spans this many simulated steps, all but the
    last under ``DistributedDataParallel.no_sync()`` (no collectives, no optimizer phase)."""


class RankParams(_Strict):
    """One simulated rank and its skew relative to the calibrated rank."""

    rank: int = Field(ge=0, le=MAX_RANK_ID)
    delay_us: Micros = 0.0
    """Extra host CPU time at the start of every step (a slow data path, a noisy neighbour)."""
    phase_extra_us: dict[str, Micros] = Field(default_factory=dict)
    """Extra time per phase per step (``{"forward": 18000}`` = forward 18 ms longer): on the
    phase's device tasks, or, for a phase with none (a CPU training step), on its host ``cpu``
    ops, in proportion to their duration."""
    host: str = ""
    """The machine the rank runs on: ranks with the same (non-empty) host share its
    ``loader.host_cores``, so a rank that waits frees a core for the others."""


class Meta(_Strict):
    """Where the model came from and what it could not calibrate."""

    name: str = ""
    sources: dict[str, Source] = Field(default_factory=dict)
    traces: list[str] = Field(default_factory=list)
    steps_used: list[int] = Field(default_factory=list)
    measured_step_us: list[StepMicros] = Field(default_factory=list)
    """Measured step times (start to next start, µs) of the steps used."""
    warnings: list[str] = Field(default_factory=list)
    notes: dict[str, str | float | int | bool | None] = Field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Optional uncertainty of parameters, as ``path -> (low, high)`` *factors* applied to the
    value at that dotted path (``loader.produce: [0.7, 1.4]``). Paths in ``sources`` marked
    ``inferred`` or ``assumed`` without an entry here get the planner's defaults (±20 %,
    ±50 %); see :mod:`scenarios.predict`."""

    @field_validator("name", "traces", "warnings", mode="before")
    @classmethod
    def _printable(cls, v):
        """File names become printable UTF-8 (see :func:`simcore.errors.shown`)."""
        return printable(v)

    @model_validator(mode="after")
    def _check_ranges(self):
        for path, (lo, hi) in self.ranges.items():
            if not (0 <= lo <= hi):
                raise ValueError(f"ranges[{path!r}] must satisfy 0 <= low <= high, got ({lo}, {hi})")
        return self


class ReplayWindow(_Strict):
    """The captured window of a trace, kept so the calibrated baseline can be replayed step
    by step from the state the profiler found (``simulate(..., replay=True)``): the check that
    the simulator reproduces what was measured, including a transient (a device backlog, a run
    of input stalls) that a steady-state simulation of the representative step does not show.

    Attributes:
        steps: the captured step numbers, in order, without holes (``ProfilerStep#N``).
        calibrated: per step, whether it had its own fit (a complete step with the
            representative's structure); the others replay the representative's durations and
            are left out of the comparison.
        measured_step_us: per step, its measured time (µs, start to next start; the last
            step's tail is GPU-inclusive, see ``calibration.steps``).
        stream_busy_us: per stream, how long (µs) after the first step's start the stream was
            still running work launched before it (the backlog the window starts with).
        last_gpu_inclusive: the window's last step was the trace's last, so its measured time
            runs to the end of its GPU work (else to the next step's start).
    """

    steps: list[int]
    calibrated: list[bool]
    measured_step_us: list[StepMicros]
    stream_busy_us: dict[str, Micros] = Field(default_factory=dict)
    last_gpu_inclusive: bool = False

    @model_validator(mode="after")
    def _check_lengths(self):
        n = len(self.steps)
        if n == 0 or len(self.calibrated) != n or len(self.measured_step_us) != n:
            raise ValueError("replay: steps, calibrated and measured_step_us must be non-empty "
                             "and of one length")
        if any(v < 0 for v in self.measured_step_us) or any(
                v < 0 for v in self.stream_busy_us.values()):
            raise ValueError("replay: times must be >= 0")
        return self


class StepModel(_Strict):
    """A rank's training step. See the module docstring for the structure and units.

    Raises (on construction): pydantic ``ValidationError`` for bad values; ``ModelError`` is
    raised by :func:`load_model` for files.
    """

    schema_version: int = Field(default=SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    loader: LoaderParams = Field(default_factory=LoaderParams)
    host: HostParams = Field(default_factory=HostParams)
    device: DeviceParams = Field(default_factory=DeviceParams)
    comm: CommParams = Field(default_factory=CommParams)
    ranks: list[RankParams] = Field(default_factory=lambda: [RankParams(rank=0)])
    meta: Meta = Field(default_factory=Meta)
    replay: ReplayWindow | None = None
    """The captured window, for a step-by-step replay of the baseline (trace calibration of a
    single rank only; what-if transforms drop it, see :meth:`without_replay`)."""

    @model_validator(mode="before")
    @classmethod
    def _incomplete_window(cls, data):
        """A captured window whose section or per-step values were (partly) deleted is
        dropped, with a warning in ``meta.warnings``: it is optional, the steady state does
        not need it."""
        if not isinstance(data, dict):
            return data
        have = [h.get(k) is not None for h, keys in _window_holders(data) for k in keys]
        window = data.get("replay") is not None
        if not any(have) or (window and all(have)):
            return data
        why = ("the captured window's section is missing" if not window
               else "some ops or tasks lack their captured per-step values")
        data = copy.deepcopy(data)   # the caller's dict stays as it was
        data["replay"] = None
        for h, keys in _window_holders(data):
            for k in keys:
                h.pop(k, None)
        meta = dict(data.get("meta") or {})
        meta["warnings"] = list(meta.get("warnings") or []) + [
            f"captured window dropped ({why}): no window replay; the steady state is unchanged"]
        data["meta"] = meta
        return data

    @model_validator(mode="after")
    def _check_refs(self):
        tasks: dict[str, DeviceTask] = {}
        for stream, ts in self.device.streams.items():
            for t in ts:
                if t.stream != stream:
                    raise ValueError(f"task {t.id!r} lists stream {t.stream!r} but is under {stream!r}")
                if t.id in tasks:
                    raise ValueError(f"device task id {t.id!r} repeats")
                tasks[t.id] = t
        for t in tasks.values():
            for w in t.waits + t.prev_waits:
                if w not in tasks:
                    raise ValueError(f"task {t.id!r} waits for unknown task {w!r}")
        _check_no_wait_cycle(self.device.streams)
        launched: set[str] = set()
        for i, op in enumerate(self.host.ops):
            if op.kind in ("launch", "sync") and op.task is not None and op.task not in tasks:
                raise ValueError(f"host op {i} ({op.kind}) names unknown task {op.task!r}")
            if op.kind == "launch":
                if op.task is None:
                    raise ValueError(f"host op {i} is a launch without a task")
                if op.task in launched:
                    raise ValueError(f"task {op.task!r} is launched twice")
                launched.add(op.task)
        if not self.ranks:
            raise ValueError("ranks must list at least one rank")
        if len(self.ranks) > MAX_RANKS:
            raise ValueError(f"{len(self.ranks)} ranks to simulate; at most {MAX_RANKS} (a large "
                             "job is modelled by a few representative ranks)")

        if len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("rank numbers repeat")
        self._check_replay_lengths(tasks)
        return self

    def _check_replay_lengths(self, tasks: dict[str, DeviceTask]) -> None:
        arrays = [(f"host op {i}", op.replay_us) for i, op in enumerate(self.host.ops)]
        arrays += [(f"task {t.id!r}", v) for t in tasks.values()
                   for v in (t.replay_us, t.replay_gap_us)]
        given = [(where, v) for where, v in arrays if v is not None]
        if self.replay is None:
            if given:
                raise ValueError(f"{given[0][0]} has replay values but the model has no replay "
                                 "window")
            return
        n = len(self.replay.steps)
        for where, v in given:
            if len(v) != n:
                raise ValueError(f"{where}: {len(v)} replay values for a window of {n} steps")
        if len(given) != len(arrays):
            missing = next(where for where, v in arrays if v is None)
            raise ValueError(f"{missing} has no replay values but the model has a replay window")
        for s in self.replay.stream_busy_us:
            if s not in self.device.streams:
                raise ValueError(f"replay.stream_busy_us names unknown stream {s!r}")

    def task_map(self) -> dict[str, DeviceTask]:
        return self.device.tasks()

    def without_replay(self) -> "StepModel":
        """This model without its captured window (what a what-if changes no longer matches
        the capture). Pure."""
        if self.replay is None:
            return self
        streams = {s: [t.model_copy(update={"replay_us": None, "replay_gap_us": None})
                       for t in ts] for s, ts in self.device.streams.items()}
        ops = [op.model_copy(update={"replay_us": None}) for op in self.host.ops]
        return self.model_copy(update={
            "replay": None, "host": self.host.model_copy(update={"ops": ops}),
            "device": self.device.model_copy(update={"streams": streams})})


def _window_holders(data: dict) -> list[tuple[dict, tuple[str, ...]]]:
    """In a StepModel given as a dict, every host op and device task (as dicts) with the keys
    that hold its captured per-step values."""
    host, device = data.get("host"), data.get("device")
    ops = host.get("ops") if isinstance(host, dict) else None
    streams = device.get("streams") if isinstance(device, dict) else None
    out = [(o, ("replay_us",)) for o in (ops if isinstance(ops, list) else [])
           if isinstance(o, dict)]
    for ts in streams.values() if isinstance(streams, dict) else []:
        out += [(t, ("replay_us", "replay_gap_us")) for t in (ts if isinstance(ts, list) else [])
                if isinstance(t, dict)]
    return out


def _check_no_wait_cycle(streams: dict[str, list[DeviceTask]]) -> None:
    """Raise ValueError if the tasks of one step can never all run: a task that (through its
    waits and the in-order rule of its stream) waits for itself."""
    deps: dict[str, list[str]] = {}
    for ts in streams.values():
        for i, t in enumerate(ts):
            deps[t.id] = list(t.waits) + ([ts[i - 1].id] if i else [])
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for root in deps:
        if root in state:
            continue
        stack = [(root, iter(deps[root]))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise ValueError(f"task {nxt!r} waits, through {node!r}, for itself: the step "
                                 "can never finish (a wait on a later task of the same stream?)")
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))


def load_model(path: str | Path) -> StepModel:
    """Read a StepModel from JSON or YAML (by suffix ``.yaml``/``.yml``).

    Raises:
        InputError: missing/unreadable file, a device, a file over
            ``simcore.files.MAX_INPUT_BYTES``, not UTF-8, not JSON/YAML (with the line and
            column; a duplicate YAML key, nesting too deep), or not a valid StepModel (the
            message names the first invalid field).
    """
    from stepsim.simcore.parsing import parse_json, parse_yaml

    p = Path(path)
    raw = read_input(p, "StepModel")
    if raw[:2] == b"\x1f\x8b":
        raise InputError(p, "this is a gzip file (a profiler trace?), not a StepModel; run "
                            "'stepsim calibrate' on a trace first")
    parse = parse_yaml if p.suffix.lower() in (".yaml", ".yml") else parse_json
    data = parse(p, raw, "StepModel")
    if not isinstance(data, dict):
        raise InputError(p, f"expected a StepModel object, got {type(data).__name__}")
    if "traceEvents" in data:
        raise InputError(p, "this is a profiler trace, not a StepModel; run 'stepsim calibrate' on it first")
    if "ops" in data and not ({"host", "loader", "device"} & set(data)):
        raise InputError(p, "this is a scenario file, not a StepModel; use it with "
                            "'stepsim whatif MODEL --scenario FILE'")
    if "stepsim_sidecar" in data:
        raise InputError(p, "this is a capture sidecar, not a StepModel; pass it to "
                            "'stepsim calibrate TRACE --sidecar FILE'")
    host = data.get("host")
    if not host or (isinstance(host, dict) and not host.get("ops")):
        # any other kind of "host" is left to the schema's one-line error below
        raise InputError(p, "the model's host thread has no ops (host.ops): nothing to simulate")
    try:
        model = StepModel.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise InputError(p, f"not a valid StepModel: {loc}: {err['msg']}") from None
    if model.loader.num_workers == 0 and model.loader.prefetch_factor != 2:
        # what-ifs and sweeps may still vary it: the simulated loader ignores it without workers
        raise InputError(p, f"not a valid StepModel: loader.prefetch_factor="
                            f"{model.loader.prefetch_factor} needs num_workers > 0 (PyTorch's "
                            "DataLoader raises ValueError for it; 2 stands for its default)")
    return model


def save_model(model: StepModel, path: str | Path) -> None:
    """Write ``model`` as indented JSON, atomically (temp file in the same folder + rename)."""
    from stepsim.simcore.atomic import write_atomic

    write_atomic(Path(path), model.model_dump_json(indent=1).encode())
