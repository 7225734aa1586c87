"""The ``ddp`` section of a capture sidecar (:mod:`calibration.ddp_info` writes it): the
DistributedDataParallel job, its parameters, the backend threads' CPU and its buckets' CPU.

A parameter's ``bytes`` is its ``numel`` times its dtype's size and its ``numel`` the product
of its ``shape`` (``ddp_info`` writes them so, from the tensor): a record where they disagree
cannot be of a tensor, and its sizes would build the buckets a ``bucket_cap_mb`` what-if
simulates (a parameter of 2^60 bytes, with numel 65,536, calibrated and then made a
``--set comm.bucket_cap_mb=1`` a traceback), so the sidecar is refused. Sizes in bytes, times
in µs.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator

from stepsim.models.ddp import MAX_CAP_MB
from stepsim.models.param_base import Phase, StrictScalars
from stepsim.models.params import MAX_DURATION_US

__all__ = ["DDPParam", "ThreadCPU", "BucketCPU", "ColdProbe", "DDPRecord", "DTYPE_SIZE",
           "InjectedStraggler", "MAX_PROBE_RECORDS", "MAX_SPIN_US", "job_straggler"]

MAX_PROBE_RECORDS = 100
"""Most records (pauses, waits) a probe list holds (assumed: the harness and ``Capture`` write
2 and 3; a record is a run of steps at one pause, so 100 of them is minutes of probing);
past it the file is refused in one line, before any record is compared (10^5 distinct waits
took the duplicate check quadratic time)."""

CFG = ConfigDict(extra="ignore", allow_inf_nan=False)
"""Every sidecar record's config: unknown fields ignored, no inf or NaN."""
US = Field(ge=0, le=MAX_DURATION_US)
"""A duration field (µs)."""
MAX_SPIN_US = 3.6e9
"""Longest straggler spin a sidecar records (µs): an hour, the most ``Capture.straggler`` and
``--fix straggler`` take (a record past it named a ``--fix`` that is refused)."""
DTYPE_SIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
              "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
              "float8_e4m3fn": 1, "float8_e5m2": 1}
"""Bytes an element of a torch dtype holds (``str(dtype)`` less ``torch.``, as ``ddp_info``
writes it); a dtype not listed is not checked."""


class DDPParam(StrictScalars):
    """One parameter of a DDP job's model, in registration order (sizes in bytes)."""

    model_config = CFG
    name: str
    shape: list[Annotated[int, Field(ge=0)]] = []
    """Its dims (a dim is at least 0: ``[-256, -256]`` made numel 65,536 and passed)."""
    numel: int = Field(ge=0)
    dtype: str
    bytes: int = Field(ge=0)
    requires_grad: bool = True
    ddp_ignored: bool = False

    @model_validator(mode="after")
    def _a_tensor(self):
        if self.shape and math.prod(self.shape) != self.numel:
            raise ValueError(f"parameter {self.name!r} has shape {self.shape}, "
                             f"{math.prod(self.shape)} elements, but numel {self.numel}")
        size = DTYPE_SIZE.get(self.dtype)
        if size is not None and self.numel * size != self.bytes:
            raise ValueError(f"parameter {self.name!r} of {self.numel} {self.dtype} elements "
                             f"({size} B each) is {self.numel * size} B, not its bytes "
                             f"{self.bytes}")
        return self


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
    """The cold-resume probe at one pause (the DDP demo's job, :func:`demo.ddp_job.cold_probe`,
    or a user's ``Capture.steps(cold_probe=True)``, :mod:`calibration.cold_capture`):
    every rank spins ``pause_us`` of wall-clock time at the end of its forward, then runs its
    backward; the training thread's CPU from backward's start to the last gradient's hook
    (µs, median over ``steps`` steps) after the pause (``cold_cpu_us``) and in the same
    number of steps without it, interleaved (``hot_cpu_us``)."""

    model_config = CFG
    pause_us: float = Field(gt=0, le=MAX_DURATION_US)
    hot_cpu_us: float = US
    cold_cpu_us: float = US
    steps: int = Field(ge=1)
    hot_opt_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    cold_opt_cpu_us: float | None = Field(default=None, ge=0, le=MAX_DURATION_US)
    """The optimizer's thread CPU in the same steps (µs, medians; None in sidecars written
    before the probe recorded it)."""


class BarrierProbe(StrictScalars):
    """The DDP demo harness's barrier probe at one wait (:func:`demo.ddp_job.barrier_probe`):
    the last rank spins ``wait_us`` of wall-clock time at the end of its forward, then every
    rank enters ``dist.barrier()``; this rank's time in it (µs, median over ``steps`` steps,
    the waits alternated)."""

    model_config = CFG
    wait_us: float = Field(ge=0, le=MAX_DURATION_US)
    barrier_us: float = US
    steps: int = Field(ge=1)


class InjectedStraggler(StrictScalars):
    """A straggler the user injected through ``Capture.straggler``: rank ``rank`` spins
    ``spin_us`` of wall-clock time at its DDP module's forward's end, every step (what
    ``--fix straggler:rank=R,phase=forward,ms=M`` predicts)."""

    model_config = CFG
    rank: int = Field(ge=0)
    phase: Phase = "forward"
    spin_us: float = Field(gt=0, le=MAX_SPIN_US)

    def fix_text(self) -> str:
        """The ``--fix`` that predicts this run (its ms to 12 digits: ``validate`` matches the
        ``--fix``'s ms to 1e-9 of the record's; at 6, a 3.3333333 ms spin named ms=3.33333,
        which it then refused)."""
        return f"straggler:rank={self.rank},phase={self.phase},ms={self.spin_us / 1e3:.12g}"


def job_straggler(records) -> tuple[InjectedStraggler | None, str | None]:
    """The straggler a job's run had, from its ranks' DDP records (:class:`DDPRecord`, each
    read from its rank's sidecar), and a warning where a record is dropped.

    Only the named rank's own call to ``Capture.straggler`` spins it: a straggler is the one
    its own rank's record names. Another rank's record of it is dropped, with a warning, where
    that rank's own record says otherwise (``Capture.straggler`` called on rank 0 alone spins
    nobody); where that rank's record was not read it is kept (nothing says otherwise).

    Raises:
        ValueError: two ranks each record themselves as the straggler (each spun: the
            straggler what-if prices one rank).
    """
    own = {r.rank: r.straggler for r in records}
    spun = sorted(r.rank for r in records
                  if r.straggler is not None and r.straggler.rank == r.rank)
    if len(spun) > 1:
        raise ValueError(f"ranks {', '.join(map(str, spun))} each record themselves as the "
                         "straggler (Capture.straggler called with each rank's own number): "
                         "each spun, and the straggler what-if prices one rank")
    if spun:
        return own[spun[0]], None
    said = next((r for r in records if r.straggler is not None), None)
    if said is None or said.straggler.rank not in own:
        return (None if said is None else said.straggler), None
    k = said.straggler.rank
    return None, (f"rank {said.rank}'s sidecar records rank {k} as a straggler "
                  f"({said.straggler.spin_us / 1e3:g} ms, Capture.straggler), rank {k}'s own "
                  f"records none: only rank {k}'s own call spins it, so the run is taken as "
                  "having no straggler (call Capture.straggler on every rank)")


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
    cold_probe: list[ColdProbe] = Field(default=[], max_length=MAX_PROBE_RECORDS)
    """The cold-resume probe's pauses (:class:`ColdProbe`; empty where the job ran none)."""
    barrier_probe: list[BarrierProbe] = Field(default=[], max_length=MAX_PROBE_RECORDS)
    """The barrier probe's waits (:class:`BarrierProbe`; empty where the job ran none)."""
    straggler: InjectedStraggler | None = None
    """The straggler injected through ``Capture.straggler`` (None: none was, or the sidecar
    predates the record; a spin hook of the user's own is not seen)."""

    @model_validator(mode="after")
    def _ranks_fit(self):
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.straggler is not None and self.straggler.rank >= self.world_size:
            raise ValueError(f"straggler rank {self.straggler.rank} is not below world_size "
                             f"{self.world_size}")
        if self.hosts and len(self.hosts) != self.world_size:
            raise ValueError(f"{len(self.hosts)} host names for world_size {self.world_size}")
        # one record per thread, pause and wait (a copied record counted, or defeated the
        # barrier probe's check of which rank arrived last, silently)
        for what, keys, say in (
                ("threads", [t.tid for t in self.threads], "thread {:d}"),
                ("cold_probe", [p.pause_us for p in self.cold_probe], "the {:g} µs pause"),
                ("barrier_probe", [p.wait_us for p in self.barrier_probe], "the {:g} µs wait")):
            twice = sorted(k for k, n in Counter(keys).items() if n > 1)   # (linear in them)
            if twice:
                raise ValueError(f"{what} records {say.format(twice[0])} twice")
        # a bucket holds one parameter or more (DDP's reducer), so no more marks than those
        grads = sum(1 for p in self.params if p.requires_grad and not p.ddp_ignored)
        if self.params and len(self.bucket_cpu) > grads:
            raise ValueError(f"bucket_cpu has {len(self.bucket_cpu)} buckets, more than the "
                             f"job's {grads} parameter(s) with a gradient: the record of "
                             "another job")
        grad = self.grad_bytes
        big = next((b for b in self.bucket_cpu if grad and b.bytes > grad), None)
        if big is not None:      # (2^62 B was fitted as a bucket: a per-MiB cost of ~0)
            raise ValueError(f"bucket_cpu has a bucket of {big.bytes} B, more than the job's "
                             f"gradients ({grad} B): the record of another job")
        return self

    @property
    def grad_bytes(self) -> int:
        """Bytes of the gradients DDP reduces each step (parameters that require a gradient
        and are not ignored)."""
        return sum(p.bytes for p in self.params if p.requires_grad and not p.ddp_ignored)
