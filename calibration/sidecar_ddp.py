"""The DDP record of a capture sidecar (``ddp``: :mod:`calibration.ddp_info` writes it, the
DDP demo's harness adds the backend's CPU and the cold-resume probe), read by
:mod:`calibration.sidecar`."""
from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from stepsim.models.ddp import MAX_CAP_MB
from stepsim.models.param_base import StrictScalars
from stepsim.models.params import MAX_DURATION_US

CFG = ConfigDict(extra="ignore", allow_inf_nan=False)
"""Every sidecar record's config: unknown fields ignored, no inf or NaN."""
US = Field(ge=0, le=MAX_DURATION_US)
"""A duration field (µs)."""


class DDPParam(StrictScalars):
    """One parameter of a DDP job's model, in registration order (sizes in bytes)."""

    model_config = CFG
    name: str
    shape: list[int] = []
    numel: int = Field(ge=0)
    dtype: str
    bytes: int = Field(ge=0)
    requires_grad: bool = True
    ddp_ignored: bool = False


class ThreadCPU(StrictScalars):
    """One thread's CPU time over the profiled steps (µs), as the job measured it from the
    kernel's per-thread ``/proc/self/task/<tid>/schedstat``; ``tid`` is the thread id the
    trace's events carry."""

    model_config = CFG
    tid: int
    name: str = ""
    cpu_us: float = Field(ge=0)
    runqueue_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """Its wait for a core while runnable (schedstat's second field; None in older sidecars)."""
    timeslices: int | None = Field(default=None, ge=0)
    """Its runs on a CPU (schedstat's third field: one per wake-up, more when preempted)."""


class BucketCPU(StrictScalars):
    """The backend threads' CPU time (all threads but the training thread, µs, summed over
    ``steps`` profiled steps) from the moment one DDP bucket became ready (just before its
    all-reduce was enqueued) to the next bucket's (the last: to the step's end): the CPU of
    that bucket's all-reduce of ``bytes`` bytes, as the job measured it in training."""

    model_config = CFG
    bytes: int = Field(ge=0)
    cpu_us: float = US
    steps: int = Field(ge=1)
    runqueue_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """The same threads' wait for a core while runnable over the same intervals (µs; None in
    sidecars written before it was recorded)."""
    timeslices: int | None = Field(default=None, ge=0)
    """Their runs on a CPU over the same intervals (each wake-up starts one)."""


class ColdProbe(StrictScalars):
    """The DDP demo harness's cold-resume probe at one pause (:func:`demo.ddp_job.cold_probe`):
    every rank spins ``pause_us`` of wall-clock time at the end of its forward, then runs its
    backward; the training thread's CPU from backward's start to the last gradient's hook
    (µs, median over ``steps`` steps) after the pause (``cold_cpu_us``) and in the same
    number of steps without it, interleaved (``hot_cpu_us``)."""

    model_config = CFG
    pause_us: float = Field(gt=0, le=MAX_DURATION_US)
    hot_cpu_us: float = US
    cold_cpu_us: float = US
    steps: int = Field(ge=1)


class DDPRecord(StrictScalars):
    """A DistributedDataParallel job as :mod:`calibration.ddp_info` records it."""

    model_config = CFG
    # a real job's size, which may exceed what the simulator runs (models.params.MAX_RANKS)
    world_size: int = Field(ge=1, le=1 << 20)
    rank: int = Field(ge=0)
    local_rank: int | None = Field(default=None, ge=0)
    backend: str
    hosts: list[str] = []
    wrapped: bool = False
    # torch's int(bucket_cap_mb * 2**20) overflows past 2**63 bytes (models.ddp.MAX_CAP_MB)
    bucket_cap_mb: float | None = Field(default=None, gt=0, lt=MAX_CAP_MB)
    first_bucket_bytes: int | None = Field(default=None, gt=0, lt=2**63)
    bucket_cap_mb_list: list[Annotated[float, Field(gt=0, lt=MAX_CAP_MB)]] | None = None
    gradient_as_bucket_view: bool | None = None
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    broadcast_buffers: bool | None = None
    params: list[DDPParam] = []
    threads: list[ThreadCPU] = []
    """CPU time of the rank's process threads other than the training thread over the
    profiled steps: the backend's (gloo's TCP loop and worker threads)."""
    bucket_cpu: list[BucketCPU] = []
    """Per DDP bucket in reduction order, the backend's CPU between its readiness and the
    next bucket's (:class:`BucketCPU`): what splits the TCP loop's CPU, which serves every
    collective, between the buckets."""
    cold_probe: list[ColdProbe] = []
    """The cold-resume probe's pauses (:class:`ColdProbe`; empty where the job ran none)."""

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
