"""The StepModel's collectives and DDP section (:class:`GradParam`, :class:`CommParams`),
re-exported by :mod:`models.param_types`. Times in µs, sizes in bytes, rates in GB/s."""
from __future__ import annotations

import numpy as np
from pydantic import Field, field_validator, model_serializer

from stepsim.models.param_base import MAX_DURATION_US, MAX_RANK_ID, Micros, StrictModel

MAX_COLD_SHARE = MAX_DURATION_US
"""Largest ``comm.cold_resume`` share accepted: a bound on typos, not a measured figure (the
probe measured 0.04-0.33, :mod:`calibration.gloo_cold`): past it, 1 µs of CPU would cost more
than the longest duration a field holds (``MAX_DURATION_US``)."""


class GradParam(StrictModel):
    """One model parameter as DDP sees it: its gradient's size and the task that makes it."""

    name: str
    bytes: int = Field(ge=0, le=2**44)   # 16 TiB: past any device's memory, as a copy's bound
    ready_task: str | None = None
    """The backward device task after which this gradient is ready (None: end of backward)."""
    dtype: str = "float32"
    """Gradient dtype: DDP never mixes dtypes in one bucket (reducer.cpp ``BucketKey``)."""


class CommParams(StrictModel):
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
    for the cores the rank's host shares: on one host a loopback transfer is CPU work (copies
    and reductions), so the collective runs that work as the cores allow, then the rest of
    its transfer time that is not this rank's CPU work (:func:`models.device.stream_process`)."""
    transfer_scale: float = Field(default=1.0, gt=0, le=1e3)
    """The transfer level of such a collective (host CPU work above) on a transfer line
    (``bus_gbps``): the per-byte part of its time that is not its CPU work (the line's slope
    less ``host_cpu_us_per_mb``, up to ``line_bytes``) times this; its latency and its CPU
    work (at the host's level, ``host.cpu_scale``) keep theirs. 1 (the default): as
    calibrated. Set by the DDP demo from its timed runs, apart from the CPU level
    (:mod:`demo.ddp_level`); read by :func:`models.plans.task_durations`."""
    wakeups: float = Field(default=0.0, ge=0, le=1e6)
    wakeups_per_mb: float = Field(default=0.0, ge=0, le=1e6)
    wakeup_wait_us: Micros = 0.0
    """Such a collective (host CPU work above) wakes its backend's threads ``wakeups +
    wakeups_per_mb × bytes / 2**20`` times (rounded); each wake-up that finds every core of
    the host busy waits ``wakeup_wait_us`` for one (a woken thread waits for the running
    thread's slice), none when a core is idle (:func:`models.device.stream_process`)."""
    line_bytes: int | None = Field(default=None, ge=0)
    """The largest all-reduce (bytes) the transfer line (``latency_us``, ``bus_gbps``) was
    measured at (None: the captured all-reduces' largest, set when DDP's buckets are rebuilt).
    Past it, a collective with host CPU work (``host_cpu_us_per_mb`` > 0: gloo on one host)
    costs the line there plus ``host_cpu_us_per_mb`` per extra MiB
    (:func:`models.ddp.comm_time_us`); NCCL's (no host CPU work) follow the line."""
    grad_accum_steps: int = Field(default=1, ge=1)
    """Gradient accumulation: each optimizer step spans this many simulated steps, all but the
    last under ``DistributedDataParallel.no_sync()`` (no collectives, no optimizer phase)."""
    cold_resume: list[tuple[Micros, float]] = Field(default_factory=list)
    """``(pause µs, extra share)`` pairs, pauses increasing: a rank's backward that resumes
    after it spent ``pause`` µs off its data (spinning or waiting) costs ``1 + share`` times
    its CPU right after the forward (the capture's). Measured by the DDP harness's
    cold-resume probe (:mod:`calibration.gloo_cold`); empty where the capture has none (the
    straggler what-if then adds none). Read by :func:`cold_share`."""
    cold_resume_opt: list[tuple[Micros, Micros]] = Field(default_factory=list)
    """The same for the optimizer, in µs: ``(pause µs, extra µs)``, the optimizer's thread CPU
    after a pause and the backward that follows it less its CPU in a step without the pause
    (the probe's same steps, :mod:`calibration.gloo_cold`): µs, not a share, because the
    calibrated optimizer op also holds the last bucket's copy and the gap to the next step,
    which the probe's optimizer (``opt.step`` and ``zero_grad``) does not. The straggler
    what-if adds it to every rank that was off its data for the pause (the straggler, each
    rank held for it in a barrier or in the collective). Empty where the probe did not record
    the optimizer. Read by :func:`cold_extra_opt_us`."""

    barrier_exit: list[tuple[Micros, Micros]] = Field(default_factory=list)
    """``(wait µs, release µs)`` pairs, waits increasing from 0: a ``dist.barrier()`` whose
    first ranks waited ``wait`` µs in it for the last releases that last rank ``release`` µs
    after its arrival. Measured by the DDP harness's barrier probe
    (:mod:`calibration.gloo_barrier`): after 40 ms the last rank's threads wake onto cores
    the held rank's threads hold, 1.1-2.3 ms where a barrier without a wait releases it in
    0.3-0.6 ms; the held rank leaves 0.4-0.7 ms after the last arrival
    (``bench/ddp_held_wake.py``, the DDP demo's runs). The barrier what-if gives the excess
    over ``latency_us`` to the last rank as a late resume. Empty without a probe (the barrier
    then costs ``latency_us``). Read by :func:`barrier_release_us`."""

    barrier_co_core_us: Micros = 0.0
    """µs of wall that the training threads of the ranks a ``dist.barrier()`` released on one
    host share one core, from the second one's release (:mod:`models.cpu_co`): the gloo
    thread that wakes a rank's training thread puts it on its own core, and the scheduler
    spreads them again later. 0 (the default): the fair pool spreads them at once. Set by the
    barrier what-if (inferred from ``bench/ddp_barrier_cores.py``)."""

    grad_copy_us_per_mb: Micros = 0.0
    """The training thread's copy of a reduced bucket back into the gradients, µs per MiB of
    the bucket (DDP's ``finalize_backward``, ``copy_bucket_to_grad``, without
    ``gradient_as_bucket_view``). Each bucket is copied after its wait; the copies of the
    earlier buckets fall inside the wait for the later ones, the last bucket's after it, in
    the calibrated optimizer op. A what-if that rebuilds the buckets moves that op by the
    change in the last bucket's bytes (:func:`models.ddp_host.apply_ddp_host`). Measured on
    gloo traces (:mod:`calibration.gloo_steps`: the copies after the resume, over the last
    bucket's bytes); 0 leaves the op as calibrated."""

    @field_validator("barrier_exit")
    @classmethod
    def _barrier_points(cls, pts):
        """Waits from 0 and increasing (read by interpolation, as the cold points are)."""
        for k, (wait, _) in enumerate(pts):
            if wait < 0 or (k and wait <= pts[k - 1][0]):
                raise ValueError(f"wait {wait:g} µs at {k}: waits start at 0 or above and "
                                 "increase")
        return pts

    @field_validator("cold_resume", "cold_resume_opt")
    @classmethod
    def _cold_points(cls, pts):
        """Pauses above 0 and increasing (:func:`cold_share` interpolates between them: pauses
        out of order, or two of one pause, gave shares from the wrong pair, silently); shares
        from 0 (a pause cannot make the work cheaper) to :data:`MAX_COLD_SHARE`."""
        for k, (pause, share) in enumerate(pts):
            if pause <= 0:
                raise ValueError(f"pause {pause:g} µs at {k}: a probe's pause is above 0")
            if k and pause <= pts[k - 1][0]:
                raise ValueError(f"pause {pause:g} µs at {k} after {pts[k - 1][0]:g} µs: "
                                 "pauses must increase")
            if not 0 <= share <= MAX_COLD_SHARE:
                raise ValueError(f"share {share:g} at {k}: must be 0 to {MAX_COLD_SHARE:g}")
        return pts

    @model_serializer(mode="wrap")
    def _without_unset_line(self, handler):
        # a model without a measured line size or a cold-resume probe writes what it wrote
        # before the fields existed
        out = handler(self)
        if isinstance(out, dict):
            if self.line_bytes is None:
                out.pop("line_bytes", None)
            if self.transfer_scale == 1.0:
                out.pop("transfer_scale", None)
            for k in ("cold_resume", "cold_resume_opt", "barrier_exit", "barrier_co_core_us"):
                if not getattr(self, k):
                    out.pop(k, None)
        return out


def cold_share(comm: CommParams, pause_us: float) -> float:
    """The extra share of a backward's CPU after a pause of ``pause_us`` µs
    (``comm.cold_resume``): linear between the probe's pauses and from (0, 0); past the
    longest, its share (assumed: a pause longer than the probe's longest is priced as that
    one, which understates it where the share still rises; bench/ddp_cold_resume.py saw
    20 ms and 40 ms alike at load 3.6, still rising at load 2.3). 0 without a probe."""
    return _interp(comm.cold_resume, pause_us)


def cold_extra_opt_us(comm: CommParams, pause_us: float) -> float:
    """The optimizer's extra CPU (µs) after a pause of ``pause_us`` µs
    (``comm.cold_resume_opt``), read as :func:`cold_share` reads its points."""
    return _interp(comm.cold_resume_opt, pause_us)


BARRIER_TASK = "ddp.barrier"
"""The task id of the zero-byte collective the barrier what-if inserts
(:func:`scenarios.ddp_whatifs.insert_barrier`); the simulator runs the CPU after its wait on
the released threads' shared core (``barrier_co_core_us``)."""


def barrier_release_us(comm: CommParams, wait_us: float) -> float:
    """µs from the last rank's arrival at a barrier to its release when the others
    waited ``wait_us`` µs for it (``comm.barrier_exit``): linear between the probe's waits,
    its nearest outside them; ``comm.latency_us`` (assumed: one message exchange) without a
    probe."""
    pts = comm.barrier_exit
    if not pts:
        return comm.latency_us
    return float(np.interp(max(wait_us, 0.0), [w for w, _ in pts], [v for _, v in pts]))


def _interp(pts, pause_us: float) -> float:
    if not pts or pause_us <= 0:
        return 0.0
    xs, ys = [0.0] + [p for p, _ in pts], [0.0] + [s for _, s in pts]
    return float(np.interp(pause_us, xs, ys))
