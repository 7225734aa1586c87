"""The StepModel's sections: DataLoader (:class:`LoaderParams`), host thread
(:class:`HostOp`, :class:`HostParams`), device (:class:`DeviceTask`, :class:`DeviceParams`),
collectives and DDP (:class:`GradParam`, :class:`CommParams`) and ranks (:class:`RankParams`);
the device's are in :mod:`models.param_device`, the collectives' in :mod:`models.param_comm`
(both re-exported here), provenance and the captured window in :mod:`models.param_meta`.

Every time is in **µs**, every size in **bytes**, every rate in **GB/s** (see
:mod:`models.params`, which holds the StepModel that combines them).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_serializer, model_validator

from stepsim.models.param_base import (MAX_CORES, MAX_DURATION_US, MAX_LOADER_THREADS,
                                       MAX_OUTSTANDING, MAX_PREFETCH, MAX_RANK_ID, MAX_THREADS, MAX_WORKERS,
                                       DurationSpec, Micros, Phase, StrictModel, non_empty)
from stepsim.models.param_comm import CommParams, GradParam  # noqa: F401  (re-exported)
from stepsim.models.param_device import (DeviceParams, DeviceTask,  # noqa: F401  (re-exported)
                                         TaskKind)


class LoaderParams(StrictModel):
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
    produce_per_batch_fraction: float = Field(default=0.0, ge=0, le=1)
    """Share of ``produce`` that does not grow with the batch's samples (a batch's collate
    and Python overhead): what a ``loader.batch_size`` what-if keeps per batch
    (:mod:`calibration.batch_probe` measures it from a probe at a second batch size; 0
    without one, all of it per sample)."""
    threads_per_worker: int = Field(default=1, ge=1, le=MAX_THREADS)
    host_cores: int = Field(default=1, ge=1, le=MAX_CORES)
    """Cores shared by the workers, the main thread and the pin-memory thread
    (``len(os.sched_getaffinity(0))``)."""
    unpickle_us: Micros = 0.0
    """Main-thread cost (µs) of receiving one batch from a worker."""
    worker_handover_us: Micros = 0.0
    """A worker process's CPU time (µs) per batch outside producing it: handing the batch
    over (its queue's feeder thread pickling the shared-memory handles, the worker loop's
    queue work), on the worker's core share before the batch reaches the main process
    (:mod:`calibration.handover`; read only with workers)."""
    corun_ref: float = Field(default=0.0, ge=0, le=MAX_THREADS)
    """Busy share (0–1) of the other cores beside a worker while it produced, on average, in
    the capture the ``produce`` times come from (``HostParams.interference`` is relative to it)."""
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
        if self.num_workers * self.threads_per_worker > MAX_LOADER_THREADS:
            raise ValueError(f"num_workers x threads_per_worker = "
                             f"{self.num_workers * self.threads_per_worker} threads; at most "
                             f"{MAX_LOADER_THREADS} are simulated")
        if self.num_workers * self.prefetch_factor > MAX_OUTSTANDING:
            raise ValueError(f"num_workers x prefetch_factor = "
                             f"{self.num_workers * self.prefetch_factor} batches outstanding; "
                             f"at most {MAX_OUTSTANDING} are simulated")
        return self


HostKind = Literal["cpu", "launch", "sync", "next_batch"]


class HostOp(StrictModel):
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
    resume_lag_us: list[Micros] | None = None
    """For a ``cpu`` op right after a ``sync`` on a collective: the measured per-step wait
    (µs) before the late rank's thread resumed after that collective (one rank late per step,
    0 where none was); each step draws one, paid only by the rank that entered the collective
    last (the others slept in it and resume at once), as a wait that uses no core."""
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
    capture_threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    """For ``cpu`` ops: the intra-op threads its durations were measured on (None: ``threads``
    as it stands). When ``threads`` differs, the parallel part keeps its work, not its wall:
    see :func:`models.plans.threads_ratio`."""
    parallel_efficiency: float = Field(default=1.0, gt=0, le=1)
    """For ``cpu`` ops: the share of the parallel part's CPU time (``capture_threads`` × its
    wall) that was work, not threads spinning at the regions' barriers; read only when
    ``threads`` differs from ``capture_threads`` (one capture cannot measure it: 1 /
    ``capture_threads`` if one thread did all the work, 1 if none spun)."""
    per_step_fraction: float = Field(default=0.0, ge=0, le=1)
    """For ``cpu`` ops: the share of ``dur_us`` that is work per step, not per sample (a CPU
    calibration's optimizer ``step`` and ``zero_grad``, measured from the trace's
    ``Optimizer.*`` spans): what a batch-size what-if keeps (:mod:`scenarios.batch_size`);
    0: all of it per sample."""
    sample_exponent: float = Field(default=1.0, ge=1.0, le=8.0)
    """For ``cpu`` ops: the per-sample part (``1 − per_step_fraction``) of ``dur_us`` grows as
    ``(N / B)^sample_exponent`` for batches of ``N`` samples instead of ``B``: 1 (linear)
    unless a batch-size probe measured the step growing faster than linearly (caches
    overflowing), then ``ln R / ln r`` through the two measured points
    (:mod:`calibration.batch_probe`)."""
    corun_ref: float = Field(default=0.0, ge=0, le=MAX_THREADS)
    """For ``cpu`` ops: busy share (0–1) of the other cores beside this op, on average, in the
    capture its durations come from (``HostParams.interference`` is relative to it)."""
    refault_us: Micros = 0.0
    """For ``cpu`` ops: CPU µs a step spends re-faulting memory the allocator gave back to the
    kernel, at the most measured (``dur_us`` and ``samples_us`` exclude it); the step pays
    ``HostParams.refault_share`` of it (:mod:`calibration.page_faults`). 0: none."""
    touched_us: Micros = 0.0
    """For ``cpu`` ops: CPU µs of faulting in every page the step touches once (its first
    step's faults, measured): what ``refault_us`` cannot pass × the samples' ratio at any
    batch size (:mod:`scenarios.batch_size`). 0: not measured."""
    replay_us: list[Micros] | None = None
    """One value (µs) per step of the captured window (:class:`ReplayWindow`), in order: what
    this op took in that step (for ``next_batch``, the measured ``next()`` time). Only a
    window replay (``models.simulate.simulate(..., replay=True)``) reads it."""

    @model_validator(mode="after")
    def _check_samples(self):
        non_empty(self, "samples_us", "replay_us")
        if self.parallel_fraction + self.block_fraction > 1 + 1e-9:
            raise ValueError("parallel_fraction + block_fraction must be <= 1")
        return self

    def scaled(self, factor: float) -> "HostOp":
        """This op with its durations multiplied by ``factor`` (``replay_us`` kept)."""
        return self.model_copy(update={
            "dur_us": self.dur_us * factor, "refault_us": self.refault_us * factor,
            "touched_us": self.touched_us * factor,
            "samples_us": [v * factor for v in self.samples_us] if self.samples_us
            else self.samples_us})


MAX_OVERSUB = 100.0
"""Largest ``HostParams.oversub``: work 101x slower with every slice after another thread's
(measured here: 0.06–0.12, ``calibration.oversub``); past it a fit is not a slowdown."""
MAX_SAME_THREAD = 10.0
"""Largest ``HostParams.same_thread`` (the demos: 0.03-0.16); past it a fit is not this cost."""
RunFactor = Annotated[float, Field(ge=1e-3, le=1e3)]
"""A run's speed (or wall) factor against the capture's: 1e-3 to 1e3, ``cpu_scale``'s top and
its inverse (symmetric in log; calibration keeps replicates within 10x). A factor near 0 made
the runs' log spread (690 for 1e-300 beside 1e3) overflow ``math.exp`` in every interval's
draws, a traceback."""


def inverted_threads(op: HostOp) -> int:
    """The captured team size ``T`` of a ``cpu`` op whose work a contended capture inverted at
    the team stall ``γ`` (a parallel part on more than one thread), else 0."""
    t = op.capture_threads or op.threads
    return t if op.kind == "cpu" and op.parallel_fraction > 0 and t > 1 else 0


def reinversion_log(share: float, dgamma: float, threads: int) -> float:
    """``ln`` of the factor ``share^(dgamma (threads − 1))`` on a team op's work inverted at
    ``γ`` and re-inverted at ``γ + dgamma`` (:mod:`models.team_inversion`), in logs: the power
    itself overflowed a double (share 1e-300 at γ 20 drawn at 0, a traceback; break18)."""
    return dgamma * (threads - 1) * math.log(share)


def _reinversion_problem(host: "HostParams") -> str | None:
    """Why ``host``'s team work re-inverted at an end of ``team_stall_range`` passes any
    duration (:data:`MAX_DURATION_US`), or None."""
    s, rng = host.team_stall_share, host.team_stall_range
    if s is None or s >= 1 or rng is None:
        return None
    for i, op in enumerate(host.ops):
        t = inverted_threads(op)
        top = max([op.dur_us, op.refault_us, op.touched_us, *(op.samples_us or [])])
        for g in rng if t and top > 0 else ():
            x = reinversion_log(s, g - host.team_stall, t)
            if x + math.log(top) > math.log(MAX_DURATION_US):
                return (f"team_stall_share {s:g} cannot be right with team_stall {host.team_stall:g}"
                        f" and team_stall_range ({rng[0]:g}, {rng[1]:g}): ops[{i}]'s work on {t} "
                        f"threads re-inverted at γ {g:g} is e^{x + math.log(top):.0f} µs, past "
                        f"any duration's {MAX_DURATION_US:g}")
    return None


class HostParams(StrictModel):
    """The host thread: one step is ``ops`` in order, repeated every step."""

    ops: list[HostOp] = Field(default_factory=list)
    uses_core: bool = True
    """Whether the host thread's CPU work takes a core from the shared pool (it competes with
    DataLoader workers for ``loader.host_cores``)."""
    cpu_scale: float = Field(default=1.0, gt=0, le=1e3)
    """Factor on every CPU duration of the host (host thread, workers, pin-memory thread):
    the machine's speed in this run relative to the capture (1: as calibrated). One number
    for the host's run-to-run noise, so a prediction interval can vary it."""
    speed_runs: list[RunFactor] = Field(default_factory=list)
    """The host speed factors measured over runs of the calibration setting (the capture's
    first, 1.0; then its replicates'), from which intervals draw the run-to-run noise
    pooled with the stated prior range ``meta.ranges['host.cpu_scale']``
    (:mod:`models.host_speed`); empty: that range alone."""
    wall_runs: list[RunFactor] = Field(default_factory=list)
    """A multi-rank CPU job's wall time over the runs of ``speed_runs`` (the capture's
    first, 1.0; then each quiet replicate's mean unprofiled step against the capture's,
    measured), and in the DDP demo its timed re-runs of the setting after them
    (:mod:`demo.ddp_noise`):
    ranks that share a host's cores vary from run to run in how their threads
    interleave, which CPU time of identical work does not see. The interval draws the host's
    run-to-run factor from whichever of the two spreads wider
    (:func:`models.host_speed.noise_runs`); empty: ``speed_runs`` alone. Not written when
    empty."""
    centre_runs: int = Field(default=0, ge=0, le=1000)
    """Where above 0, ``cpu_scale`` is the level of the last ``centre_runs`` of
    ``wall_runs`` (the DDP demo's timed re-runs of its calibration setting, measured:
    :mod:`demo.ddp_level`), not of all the runs: the interval's ``1/n`` counts those runs and
    its spread is pooled within the two phases (:class:`models.host_speed.CentredRuns`).
    0: the centre of every run drawn. Not written when 0."""
    cpu_scale_error_log: float = Field(default=0.0, ge=0, le=5)
    """Half-width, in log space, of the calibration's own error on the host's durations
    (the profiler-overhead factor measured per rank, :mod:`calibration.profiler_overhead`):
    every interval draw multiplies its run-to-run speed by ``exp(U(−h, h))``, independent of
    it, whether that speed comes from replicates or the prior (0: none)."""
    interference: float = Field(default=0.0, ge=0, le=100)
    """Co-run interference: CPU work runs ``1 + interference × o`` times slower with a busy
    share ``o`` (0–1) of the other cores beside it (shared caches and memory bandwidth),
    relative to the share its durations were captured under (``corun_ref``)."""
    interference_range: tuple[float, float] | None = None
    """Uncertainty of ``interference`` (low, high), drawn uniformly by prediction intervals:
    calibrated from a probe, or a stated prior without one."""
    oversub: float = Field(default=0.0, ge=0, le=MAX_OVERSUB)
    """The slowdown past the cores (a cache refill per time slice): CPU work runs
    ``1 + oversub × (1 − cores / R)`` times slower with ``R`` runnable threads past the
    ``cores`` (:mod:`models.cpu_slowdown`), relative to ``oversub_ref``."""
    oversub_range: tuple[float, float] | None = None
    """Uncertainty of ``oversub`` (low, high), drawn uniformly by prediction intervals:
    calibrated from a probe above the cores, or a stated prior without one."""
    oversub_ref: float = Field(default=0.0, ge=0, le=1)
    """``1 − cores / R`` of the setting the durations were captured at (0 within the cores)."""
    team_stall: float = Field(default=1.0, ge=0, le=20)
    """How hard a parallel region of intra-op threads stalls when a team thread lacks a core
    (``γ``, :class:`models.cpu.CpuPool`): beside more runnable threads than cores, a team of
    ``T`` advances at ``s^(1 + γ (T − 1))`` of full speed, ``s`` each thread's share of a core
    (1: the other threads hold cores independently of each other; larger: they stall
    together, as measured). Read only where a team shares the cores with more threads than
    there are cores."""
    team_stall_range: tuple[float, float] | None = None
    """Uncertainty of ``team_stall`` (low, high), drawn uniformly by prediction intervals:
    fitted from a probe's team steps, or a stated prior without one."""
    team_stall_share: float | None = Field(default=None, gt=0, le=1)
    """The share of a core each intra-op thread of the training step held in a calibration
    setting whose threads were more than the cores, where the step's work was inverted from its
    wall at ``team_stall`` (:func:`calibration.cpu.stalled_team_wall`); a draw of ``γ``
    re-inverts it (:func:`models.team_inversion.reinverted`). None: not inverted."""
    team_spin_us: float = Field(default=0.0, ge=0, le=1e6)
    """How long (µs of wall) a multi-threaded op's other intra-op threads stay runnable,
    spinning at libgomp's barrier, after the op's last parallel region (and through its serial
    parts, shorter than this): they take core time from DataLoader workers meanwhile
    (:func:`models.cpu_spin.spin`). Measured by the capture: the process's CPU time beyond
    the main thread's inside a 0-worker ``next()``, per other thread
    (:func:`calibration.sidecar_fit.team_spin_from_sidecar`); 0: none (one thread, or not
    measured). Read only on a pool with more runnable threads than cores."""

    same_thread: float = Field(default=0.0, ge=0, le=MAX_SAME_THREAD)
    """The main thread's extra CPU when it makes its batches itself (``num_workers=0``): its
    batch and its training step take ``1 + same_thread`` times the CPU they take when a
    worker hands the batch over, relative to ``same_thread_ref`` (:mod:`models.same_thread`;
    measured in the demos, its mechanism not isolated)."""
    same_thread_range: tuple[float, float] | None = None
    """Uncertainty of ``same_thread`` (low, high), drawn uniformly by prediction intervals:
    calibrated from a probe on the other side of ``num_workers=0``, or a stated prior."""
    same_thread_ref: float = Field(default=0.0, ge=0, le=1)
    """1 where the durations were captured with the batches made on the main thread
    (``num_workers=0``), else 0."""

    refault_share: float = Field(default=0.5, ge=0, le=1)
    refault_share_range: tuple[float, float] | None = None
    """The share of each cpu op's ``refault_us`` a run pays, and its uncertainty (drawn
    uniformly, one draw per run): whether glibc gives a step's freed memory back to the kernel
    (to be faulted in again) is set by each process's heap layout, which no capture of another
    setting predicts (docs/measurements.md, "Page faults of the training step")."""
    refault_share_runs: list[Annotated[float, Field(ge=0, le=1)]] = Field(default_factory=list)
    """The per-run shares ``refault_share`` is the mean of (measured over the capture and its
    quiet replicates): intervals draw a validation's pooled mean of new runs from their
    Student-t predictive (:mod:`models.run_share`), not the range. Not written when empty."""
    refault_growth: float = Field(default=1.0, ge=0, le=4)
    refault_growth_range: tuple[float, float] | None = None
    """``q`` in the re-faulted CPU at ``r`` times the samples, ``refault_us × r^q``, and its
    uncertainty (drawn uniformly, once per prediction): read only by a batch-size what-if
    (:func:`scenarios.batch_size.set_batch_size`). 1: linear; without a batch-size probe a
    prior, 1 drawn over 0-2.5 (:data:`calibration.page_faults.FAULT_GROWTH_EXPONENT`)."""

    @model_validator(mode="after")
    def _check_ranges(self):
        """A range's ends lie within its value's bounds, low first (a hand edit with low above
        high raised numpy's ValueError in the interval's draws, a traceback)."""
        for name in ("interference", "oversub", "team_stall", "refault_share", "same_thread",
                     "refault_growth"):
            rng, le = getattr(self, f"{name}_range"), type(self).model_fields[name].metadata
            top = next(m.le for m in le if getattr(m, "le", None) is not None)
            if rng is not None and not 0 <= rng[0] <= rng[1] <= top:
                raise ValueError(f"{name}_range must satisfy 0 <= low <= high <= {top:g}, "
                                 f"got ({rng[0]:g}, {rng[1]:g})")
        if (why := _reinversion_problem(self)) is not None:
            raise ValueError(why)
        return self

    @model_serializer(mode="wrap")
    def _without_unset_walls(self, handler):
        # a model without wall runs (every one but a multi-rank CPU job's with replicates)
        # writes what it wrote before the field existed
        out = handler(self)
        if isinstance(out, dict) and not self.wall_runs:
            out.pop("wall_runs", None)
        if isinstance(out, dict) and not self.centre_runs:
            out.pop("centre_runs", None)
        if isinstance(out, dict) and not self.same_thread and self.same_thread_range is None \
                and not self.same_thread_ref:   # nor one without the same-thread cost
            for k in ("same_thread", "same_thread_range", "same_thread_ref"):
                out.pop(k, None)
        if isinstance(out, dict) and not self.refault_share_runs:
            out.pop("refault_share_runs", None)
        if isinstance(out, dict) and self.team_stall_share is None:   # nor an uninverted one
            out.pop("team_stall_share", None)
        if isinstance(out, dict) and self.refault_growth == 1.0 \
                and self.refault_growth_range is None:       # nor before the growth prior
            out.pop("refault_growth", None)
            out.pop("refault_growth_range", None)
        return out


class RankParams(StrictModel):
    """One simulated rank and its skew relative to the calibrated rank."""

    rank: int = Field(ge=0, le=MAX_RANK_ID)
    delay_us: Micros = 0.0
    """Extra host CPU time at the start of every step (a slow data path, a noisy neighbour)."""
    phase_extra_us: dict[str, Micros] = Field(default_factory=dict)
    """Extra time per phase per step (``{"forward": 18000}`` = forward 18 ms longer): on the
    phase's device tasks, or, for a phase with none (a CPU training step), on its host ``cpu``
    ops, in proportion to their duration."""
    phase_wall_us: dict[str, Micros] = Field(default_factory=dict)
    """Extra *wall-clock* time per phase per step that the rank spends busy on one core, at
    the end of the phase's host ``cpu`` ops, whatever the host's speed (``host.cpu_scale``
    does not scale it) and whatever else runs (a thread spinning until a deadline: it takes
    its share of the cores while it lasts, and it ends on time): the ``straggler`` what-if
    on a phase without device tasks (a CPU training step)."""
    host: str = ""
    """The machine the rank runs on: ranks with the same (non-empty) host share its
    ``loader.host_cores``, so a rank that waits frees a core for the others."""

    def slower(self) -> bool:
        """Whether the model makes this rank slower than the calibrated one (``delay_us``,
        ``phase_extra_us``, ``phase_wall_us``)."""
        return bool(self.delay_us or any(self.phase_extra_us.values())
                    or any(self.phase_wall_us.values()))
