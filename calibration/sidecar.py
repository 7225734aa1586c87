"""Reading the capture harness's sidecar JSON (schema in :mod:`calibration.capture`).

Raises :class:`simcore.errors.InputError` naming the file for a missing, empty, non-JSON or
foreign file; optional fields that are missing degrade to ``None`` (the fitter then warns about
what it could not calibrate).
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stepsim.models.params import MAX_CORES, MAX_PREFETCH, MAX_WORKERS
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import read_input
from stepsim.simcore.parsing import parse_json


_CFG = ConfigDict(extra="ignore", allow_inf_nan=False)
_US = Field(ge=0)


class ProduceRecord(BaseModel):
    """One batch produced: by ``worker`` (−1 = the main thread), wall and thread-CPU µs."""

    model_config = _CFG
    worker: int = Field(ge=-1)
    pid: int
    seq: int = 0
    wall_us: float = _US
    cpu_us: float = _US
    proc_cpu_us: float | None = Field(default=None, ge=0)
    t_end_us: float | None = None
    bytes: int = Field(default=0, ge=0)

    @property
    def work_us(self) -> float:
        """CPU work of the batch (µs): the worker process's CPU time (all its threads), or the
        thread's for batches made on the main thread (whose process runs other threads)."""
        if self.worker >= 0 and self.proc_cpu_us is not None:
            return self.proc_cpu_us
        return self.cpu_us


class StepRecord(BaseModel):
    """One loop iteration on the main thread (µs): whole step and its ``next()`` call."""

    model_config = _CFG
    t_start_us: float | None = None
    wall_us: float = _US
    cpu_us: float = _US
    proc_cpu_us: float | None = Field(default=None, ge=0)
    next_wall_us: float = _US
    next_cpu_us: float = _US
    next_proc_cpu_us: float | None = Field(default=None, ge=0)
    vcsw: int | None = Field(default=None, ge=0)
    ivcsw: int | None = Field(default=None, ge=0)
    """The main thread's voluntary / involuntary context switches outside ``next()``: it
    blocked, or it was preempted while runnable (it waited for a core)."""
    profiled: bool = False
    """Whether the step is one of the trace's recorded (active) steps."""
    profiler_on: bool | None = None
    """Whether the profiler ran during the step (its warm-up or active steps): the steps with
    ``False`` are the unprofiled ones :mod:`calibration.profiler_overhead` compares the
    profiled ones with; None in sidecars written before this was recorded."""

    @property
    def compute_cpu_us(self) -> float:
        """CPU time (µs) of the step outside ``next()``: the main process's when recorded
        (it counts torch's intra-op threads), else the main thread's."""
        if self.proc_cpu_us is not None and self.next_proc_cpu_us is not None:
            return max(self.proc_cpu_us - self.next_proc_cpu_us, 0.0)
        return max(self.cpu_us - self.next_cpu_us, 0.0)


class LoaderSettings(BaseModel):
    model_config = _CFG
    num_workers: int = Field(ge=0, le=MAX_WORKERS)
    prefetch_factor: int | None = Field(default=None, ge=1, le=MAX_PREFETCH)
    pin_memory: bool = False
    batch_size: int | None = Field(default=None, ge=1)
    persistent_workers: bool = False
    in_order: bool | None = None
    drop_last: bool = False
    dataset_len: int | None = Field(default=None, ge=0)


class DDPParam(BaseModel):
    """One parameter of a DDP job's model, in registration order (sizes in bytes)."""

    model_config = _CFG
    name: str
    shape: list[int] = []
    numel: int = Field(ge=0)
    dtype: str
    bytes: int = Field(ge=0)
    requires_grad: bool = True
    ddp_ignored: bool = False


class ThreadCPU(BaseModel):
    """One thread's CPU time over the profiled steps (µs), as the job measured it from the
    kernel's per-thread ``/proc/self/task/<tid>/schedstat``; ``tid`` is the thread id the
    trace's events carry."""

    model_config = _CFG
    tid: int
    name: str = ""
    cpu_us: float = Field(ge=0)


class DDPRecord(BaseModel):
    """A DistributedDataParallel job as :mod:`calibration.ddp_info` records it."""

    model_config = _CFG
    # a real job's size, which may exceed what the simulator runs (models.params.MAX_RANKS)
    world_size: int = Field(ge=1, le=1 << 20)
    rank: int = Field(ge=0)
    local_rank: int | None = Field(default=None, ge=0)
    backend: str
    hosts: list[str] = []
    wrapped: bool = False
    bucket_cap_mb: float | None = Field(default=None, gt=0)
    first_bucket_bytes: int | None = Field(default=None, gt=0)
    bucket_cap_mb_list: list[float] | None = None
    gradient_as_bucket_view: bool | None = None
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    broadcast_buffers: bool | None = None
    params: list[DDPParam] = []
    threads: list[ThreadCPU] = []
    """CPU time of the rank's process threads other than the training thread over the
    profiled steps: the backend's (gloo's TCP loop and worker threads)."""

    @model_validator(mode="after")
    def _ranks_fit(self):
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.hosts and len(self.hosts) != self.world_size:
            raise ValueError(f"{len(self.hosts)} host names for world_size {self.world_size}")
        return self

    @property
    def grad_bytes(self) -> int:
        """Bytes of the gradients DDP reduces each step (parameters that require a gradient
        and are not ignored)."""
        return sum(p.bytes for p in self.params if p.requires_grad and not p.ddp_ignored)


class Probe(BaseModel):
    """A few extra steps at a second ``num_workers`` recorded by the harness (``probe_workers``)
    with the same dataset and training step: what co-run interference is fitted from."""

    model_config = _CFG
    num_workers: int = Field(ge=0, le=MAX_WORKERS)
    produce: list[ProduceRecord] = []
    steps: list[StepRecord] = []


class Sidecar(BaseModel):
    """The sidecar's content (times in µs)."""

    model_config = _CFG
    stepsim_sidecar: int
    torch_version: str | None = None
    device: str | None = None
    host_cores: int | None = Field(default=None, ge=1, le=MAX_CORES)
    cpu_count: int | None = Field(default=None, ge=1)
    torch_num_threads: int | None = Field(default=None, ge=1)
    host_name: str | None = None
    loader: LoaderSettings
    produce: list[ProduceRecord] = []
    steps: list[StepRecord] = []
    warnings: list[str] = []
    capture: str | None = None
    """What wrote it: ``harness``, ``lightning`` or ``transformers`` (absent in older files)."""
    ddp: DDPRecord | None = None
    probe: Probe | None = None


def load_sidecar(path: str | Path) -> Sidecar:
    """Read and validate a sidecar file.

    Raises:
        InputError: missing/empty/unreadable file, not JSON, not a stepsim sidecar, or a
            field of the wrong type (named).
    """
    p = Path(path)
    data = parse_json(p, read_input(p, "sidecar"), "sidecar")
    if not isinstance(data, dict) or "stepsim_sidecar" not in data:
        raise InputError(p, "not a stepsim sidecar (no 'stepsim_sidecar' key); "
                            "it is written by calibration.capture.Capture")
    try:
        return Sidecar.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise InputError(p, f"bad sidecar field {loc}: {err['msg']}") from None


def why_no_trace(folder: Path) -> str:
    """What the capture sidecar in ``folder`` says about a missing trace (its warnings, e.g.
    the profiler never completed its active steps), as ``"; the sidecar says: ..."``; empty
    without a readable sidecar or warnings."""
    try:
        side = load_sidecar(Path(folder) / "sidecar.json")
    except (InputError, OSError):
        return ""
    return f"; its sidecar.json says: {'; '.join(side.warnings)}" if side.warnings else ""
