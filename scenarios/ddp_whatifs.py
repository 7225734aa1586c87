"""DDP what-ifs on the communication and ranks of a model: a straggler, and a barrier that
splits waiting from transfer, registered as the fixes ``straggler`` and ``barrier`` (never
proposed by the planner); and the transforms of the fixes ``bucket_cap_mb``,
``faster_interconnect``, ``grad_accumulation`` and ``remove_straggler``
(:mod:`scenarios.fixes` lists them). All are pure ``StepModel -> StepModel`` transforms (see
:mod:`scenarios.transforms`).

* ``straggler``: rank ``rank`` (its rank number) spends ``ms`` more per step in ``phase``:
  on the phase's device tasks (its ``phase_extra_us``), or, when the phase has none (a CPU
  training step), as ``ms`` of wall-clock time busy on one core at the end of the phase's
  host work (its ``phase_wall_us``): a rank that is ``ms`` slower, whatever the host's speed
  in the run (``host.cpu_scale`` scales the measured work, not this). The other ranks wait
  for it in the next collective; ranks that share its host free their cores while they
  wait. Off its data for ``ms``, the straggler resumes cold: its next phase's CPU (the
  host's ``cpu`` ops of that phase and its own extra there) costs ``cold_share(ms)`` more
  (``comm.cold_resume``, the harness's probe: :mod:`calibration.gloo_cold`; nothing without
  one, as on every NCCL model). Every rank's optimizer (the phase after the host's wait for
  the collectives) costs ``cold_extra_opt_us(ms)`` more (``comm.cold_resume_opt``, the
  same probe's): the straggler's after its spin and backward, each other rank's after its
  wait for the straggler, in the collective or in a barrier (assumed to last ``ms``, as it
  does when no core is shared). The others having waited ``ms`` for it in the last
  all-reduce, the straggler leaves it late by the barrier probe's release after that wait
  over its release after none (:mod:`scenarios.ddp_release`; nothing without a probe, nor
  behind a barrier, which takes the wait and its own late release).
* ``barrier``: a zero-byte collective (``dist.barrier()``) entered by the host right before
  the first op of ``phase`` (default ``backward``), which then waits for it. Its time on each
  rank is that rank's *arrival skew* (waiting for the last rank), so the collectives after it
  show only their *transfer*. Its own transfer is ``comm.latency_us`` (assumed: one message
  exchange); the last rank to arrive leaves it as late as the harness's barrier probe
  measured after the same wait (``comm.barrier_exit``, :mod:`calibration.gloo_barrier`: its
  threads wake onto cores the others' hold; 1.4-2.3 ms after 40 ms against 0.4-0.5 ms with
  no wait), the excess as a late resume before its next op (``HostOp.resume_lag_us``: a wait
  that uses no core, paid by the last rank to enter); nothing more without a probe. Where
  the probe measured it, the released training threads share one core for
  ``comm.barrier_co_core_us`` of wall from the second's release (:mod:`models.cpu_co`: the
  gloo thread that wakes each puts it on its own core; :data:`scenarios.ddp_release.
  CO_CORE_US`). A rank
  held in it by a straggler (another rank's ``phase_wall_us`` before it, less its own: the
  wait, assumed from the walls alone) resumes cold like the straggler: ``phase``'s CPU costs
  ``cold_share(wait)`` more on that rank. In a model whose device runs the phases (GPU), the
  barrier is a task on the communication stream after each stream's last task before
  ``phase``, and each stream's first task of ``phase`` waits for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from stepsim.models.ddp import set_bucket_caps
from stepsim.models.ddp_host import host_enqueued, host_launched
from stepsim.models.param_base import MAX_DURATION_US
from stepsim.models.param_comm import barrier_release_us, cold_extra_opt_us, cold_share
from stepsim.models.params import DeviceTask, HostOp, StepModel
from stepsim.scenarios.ddp_release import (BARRIER_TASK, after_wait_op, late_release,
                                           lag_moved, noted_release_us, released_on_one_core)
from stepsim.scenarios.fix_types import FixArgs, nothing
from stepsim.scenarios.paths import set_value
from stepsim.scenarios.primitives import remove, scale
from stepsim.scenarios.select import Selector
from stepsim.simcore.errors import ModelError, NotApplicable

__all__ = ["add_straggler", "insert_barrier", "BARRIER_TASK", "ColdResume", "cold_resume_added", "bucket_cap", "bucket_candidates",
           "faster_interconnect", "grad_accumulation", "remove_straggler", "BucketArgs",
           "StragglerArgs", "BarrierArgs", "InterconnectArgs", "AccumArgs", "NoArgs"]

COLD_NOTE = "cold_resume"
"""Prefix of the ``meta.notes`` keys in which the straggler and barrier what-ifs keep the CPU
they added for cold resumes (:func:`cold_resume_added`)."""


def add_straggler(model: StepModel, rank: int, phase: str, ms: float) -> StepModel:
    """``model`` where rank ``rank`` spends ``ms`` ms more per step in ``phase``.

    Raises:
        ModelError: no such rank, ``ms`` < 0, or a phase with neither device tasks nor host
            ``cpu`` ops.
    """
    idx = next((i for i, r in enumerate(model.ranks) if r.rank == rank), None)
    if idx is None:
        raise NotApplicable(f"straggler: the model has no rank {rank} (ranks "
                         f"{', '.join(str(r.rank) for r in model.ranks)})")
    if len(model.ranks) < 2:
        raise NotApplicable("straggler: the model simulates one rank; a straggler needs others "
                         "that wait for it (calibrate every rank's trace)")
    if ms < 0:
        raise ModelError(f"straggler: ms must be >= 0, got {ms}")
    has = any(t.phase == phase and t.kind != "collective" for t in model.task_map().values()) \
        or any(op.kind == "cpu" and op.phase == phase for op in model.host.ops)
    if not has:
        raise NotApplicable(f"straggler: the model has no work in phase {phase!r}")
    rp = model.ranks[idx]
    on_device = any(t.phase == phase and t.kind != "collective"
                    for t in model.task_map().values())
    field = "phase_extra_us" if on_device else "phase_wall_us"
    extra = dict(getattr(rp, field))
    extra[phase] = extra.get(phase, 0.0) + ms * 1e3
    ranks = list(model.ranks)
    ranks[idx] = rp.model_copy(update={field: extra})
    if not on_device:
        # the straggler resumes cold; behind a barrier after the phase, so do the others,
        # which waited as long for it in the barrier
        nxt = _next_phase(model, phase)
        behind = BARRIER_TASK in model.task_map() and nxt == _barrier_phase(model)
        opt = _after_wait_phase(model)
        cold = []
        for j in range(len(ranks)):
            if j == idx or behind:
                ranks[j] = _cold(model, ranks[j], nxt, ms * 1e3, cold, opt)
            # every rank was off its data for ms: the straggler in its spin, the others held
            # for it (in the barrier or in the collective, whose wait the phase after it
            # follows); assumed: the others' wait is the straggler's ms, as with free cores
            if opt is not None and model.comm.cold_resume_opt \
                    and (opt != nxt or not (j == idx or behind)) \
                    and not (j == idx and opt == phase):
                ranks[j] = _cold(model, ranks[j], opt, ms * 1e3, cold, opt)
        model = _noted(model, cold)
        if not behind:
            model = late_release(model, ms * 1e3)
    return model.without_replay().model_copy(update={"ranks": ranks})


def _next_phase(model: StepModel, phase: str) -> str:
    """The phase of the host's first ``cpu`` op after the last of ``phase`` (wrapping to the
    next step's first)."""
    cpu = [op.phase for op in model.host.ops if op.kind == "cpu"]
    last = max(j for j, p in enumerate(cpu) if p == phase)
    later = [p for p in cpu[last + 1:] + cpu if p != phase]
    return later[0] if later else phase


def _after_wait_phase(model: StepModel) -> str | None:
    """The phase of the host's first ``cpu`` op after its last wait for a collective (the
    optimizer of a DDP step, which follows the wait for the last all-reduce); None without
    such a wait."""
    j = after_wait_op(model)
    return None if j is None else model.host.ops[j].phase


def _barrier_phase(model: StepModel) -> str | None:
    """The phase whose first host op the host barrier precedes."""
    ops = model.host.ops
    at = next((j for j, op in enumerate(ops) if op.task == BARRIER_TASK), None)
    later = [op.phase for op in ops[at:] if op.kind == "cpu"] if at is not None else []
    return later[0] if later else None


def _cold(model: StepModel, rp, phase: str, pause_us: float, added: list,
          opt: str | None = None):
    """Rank ``rp`` whose ``phase`` resumes after ``pause_us`` µs off its data: its CPU there
    (the host's ``cpu`` ops of the phase plus its own ``phase_extra_us``) times the measured
    share (:func:`models.param_comm.cold_share`), or, where ``phase`` is ``opt`` (the phase
    after the wait for the collectives) and the probe recorded the optimizer, its measured
    extra µs (:func:`models.param_comm.cold_extra_opt_us`), added to its ``phase_extra_us``;
    appends :class:`ColdResume` of what it added to ``added``."""
    cpu = sum(op.dur_us for op in model.host.ops if op.kind == "cpu" and op.phase == phase)
    extra = dict(rp.phase_extra_us)
    base = cpu + extra.get(phase, 0.0)
    if phase == opt and model.comm.cold_resume_opt:
        more = cold_extra_opt_us(model.comm, pause_us)
        share = more / base if base > 0 else 0.0
    else:
        share = cold_share(model.comm, pause_us)
        more = share * base
    if more <= 0:
        return rp
    extra[phase] = extra.get(phase, 0.0) + more
    if extra[phase] > MAX_DURATION_US:   # model_copy would keep it unchecked
        raise ModelError(f"straggler: rank {rp.rank}'s {phase} after a {pause_us / 1e3:g} ms "
                         f"pause costs {extra[phase]:g} µs more (comm.cold_resume share "
                         f"{share:g}), past the longest duration of {MAX_DURATION_US:g} µs")
    added.append(ColdResume(rp.rank, phase, more, pause_us, share))
    return rp.model_copy(update={"phase_extra_us": extra})


@dataclass(frozen=True)
class ColdResume:
    """The CPU a straggler or barrier what-if added to one rank's phase for its cold resume:
    ``added_us`` (µs a step) after ``pause_us`` µs off its data, ``share`` of its CPU there."""

    rank: int
    phase: str
    added_us: float
    pause_us: float
    share: float


def _noted(model: StepModel, added: list[ColdResume]) -> StepModel:
    """``model`` with ``added`` kept in ``meta.notes`` (``cold_resume.rank<r>.<phase>.*``:
    µs summed, the last pause and share), read back by :func:`cold_resume_added`."""
    if not added:
        return model
    notes = dict(model.meta.notes)
    for c in added:
        key = f"{COLD_NOTE}.rank{c.rank}.{c.phase}"
        notes[f"{key}.added_us"] = float(notes.get(f"{key}.added_us") or 0.0) + c.added_us
        notes[f"{key}.pause_us"], notes[f"{key}.share"] = c.pause_us, c.share
    return model.model_copy(update={"meta": model.meta.model_copy(update={"notes": notes})})


def cold_resume_added(model: StepModel | None) -> list[ColdResume]:
    """What the straggler and barrier what-ifs applied to ``model`` added for cold resumes
    (``comm.cold_resume``), per rank and phase in rank order; empty where they added none
    (no probe, as on every NCCL model, or no rank paused)."""
    if model is None:
        return []
    out = []
    for k, v in model.meta.notes.items():
        parts = k.split(".")
        if len(parts) == 4 and parts[0] == COLD_NOTE and parts[3] == "added_us" \
                and parts[1].startswith("rank") and parts[1][4:].isdigit():
            key = k[: -len(".added_us")]
            out.append(ColdResume(int(parts[1][4:]), parts[2], float(v or 0.0),
                                  float(model.meta.notes.get(f"{key}.pause_us") or 0.0),
                                  float(model.meta.notes.get(f"{key}.share") or 0.0)))
    return sorted(out, key=lambda c: (c.rank, c.phase))


def insert_barrier(model: StepModel, phase: str = "backward") -> StepModel:
    """``model`` with a barrier entered right before the host's first op of ``phase``.

    Raises:
        ModelError: a model whose collectives are not host-enqueued, one rank only, no host op
            of ``phase``, or a barrier already there.
    """
    if len(model.ranks) < 2:
        raise NotApplicable("barrier: the model simulates one rank; nothing to wait for")
    if BARRIER_TASK in model.task_map():
        raise NotApplicable("barrier: the model already has one")
    if not (host_launched(model) or host_enqueued(model)):
        return _device_barrier(model, phase)
    at = next((j for j, op in enumerate(model.host.ops) if op.phase == phase), None)
    if at is None:
        raise NotApplicable(f"barrier: the host has no op in phase {phase!r}")
    model = released_on_one_core(model)
    c = model.comm
    before = model.host.ops[at - 1].phase if at > 0 else phase
    # the ranks that wait in it for a straggler of an earlier phase (the wait assumed from
    # the walls alone) resume cold, and its release after that wait is the probe's
    walls = [sum(v for k, v in r.phase_wall_us.items()
                 if any(op.phase == k for op in model.host.ops[:at])) for r in model.ranks]
    j = after_wait_op(model)
    moved = noted_release_us(model, j)
    if moved > 0 and j is not None and max(walls) > min(walls):
        # the barrier takes the wait, and the late release with it (below): the all-reduce
        # after it no longer follows a long wait
        model = lag_moved(model, j, -moved, 0.0)
    task = DeviceTask(id=BARRIER_TASK, stream=c.comm_stream, name="barrier", kind="collective",
                      category="communication", phase=before, dur_us=c.latency_us, bytes=0)
    ops = list(model.host.ops)
    ops[at:at] = [HostOp(kind="launch", name="c10d::barrier", task=BARRIER_TASK, phase=before),
                  HostOp(kind="sync", name="wait for the barrier", task=BARRIER_TASK,
                         phase=before)]
    # the last rank to arrive leaves it late (its threads wake onto cores the others hold): a
    # wait that uses no core before its next op, paid by the last to enter
    late = barrier_release_us(c, max(walls) - min(walls)) - c.latency_us
    if late > 0 and ops[at + 2].kind == "cpu":
        ops[at + 2] = ops[at + 2].model_copy(update={"resume_lag_us": [
            v + late for v in ops[at + 2].resume_lag_us or [0.0]]})
    elif late > 0:
        task = task.model_copy(update={"dur_us": c.latency_us + late})
    streams = dict(model.device.streams)
    streams[c.comm_stream] = [task] + list(streams[c.comm_stream])
    cold = []
    opt = _after_wait_phase(model)
    ranks = [_cold(model, r, phase, max(walls) - w, cold, opt)
             for r, w in zip(model.ranks, walls)]
    data = _noted(model, cold).without_replay().model_dump()
    data["ranks"] = [r.model_dump() for r in ranks]
    data["host"]["ops"] = [op.model_dump() for op in ops]
    data["device"]["streams"] = {s: [t.model_dump() for t in v] for s, v in streams.items()}
    return StepModel.model_validate(data)


def _device_barrier(model: StepModel, phase: str) -> StepModel:
    c = model.comm
    streams = {s: list(v) for s, v in model.device.streams.items()}
    before, first = [], []
    for s, ts in streams.items():
        if s == c.comm_stream:
            continue
        k = next((i for i, t in enumerate(ts) if t.phase == phase), None)
        if k is None:
            continue
        first.append((s, k))
        if k > 0:
            before.append(ts[k - 1].id)
    if not first:
        have = sorted({t.phase for ts in streams.values() for t in ts if t.kind != "collective"})
        raise NotApplicable(f"barrier: the device has no task in phase {phase!r} (phases with "
                            f"device tasks: {', '.join(have) or 'none'}; give "
                            "barrier:phase=NAME)")
    task = DeviceTask(id=BARRIER_TASK, stream=c.comm_stream, name="barrier", kind="collective",
                      category="communication", phase=phase, dur_us=c.latency_us, bytes=0,
                      waits=before)
    for s, k in first:
        t = streams[s][k]
        streams[s][k] = t.model_copy(update={"waits": [*t.waits, BARRIER_TASK]})
    streams[c.comm_stream] = [task] + streams.get(c.comm_stream, [])
    data = model.without_replay().model_dump()
    data["device"]["streams"] = {s: [t.model_dump() for t in v] for s, v in streams.items()}
    return StepModel.model_validate(data)


# ---------------------------------------------------------------- communication ----------
class BucketArgs(FixArgs):
    mb: float = Field(gt=0)
    """DDP ``bucket_cap_mb`` (MiB)."""


def bucket_cap(m: StepModel, a: BucketArgs) -> StepModel:
    if not m.comm.grad_params:
        raise nothing("bucket_cap_mb", "the model lists no DDP gradients (comm.grad_params)")
    # an explicit cap also caps the first bucket (models.ddp.set_bucket_caps): DDP's default
    # (25 MiB, first bucket 1 MiB) is not bucket_cap_mb=25, which makes one bucket of the
    # DDP demo's 8 MiB MLP where the default makes two
    if a.mb == m.comm.bucket_cap_mb and a.mb == m.comm.first_bucket_cap_mb:
        raise nothing("bucket_cap_mb", f"bucket_cap_mb is already {a.mb:g}")
    return set_bucket_caps(m, bucket_cap_mb=a.mb)


def bucket_candidates(m: StepModel) -> list[dict]:
    if not m.comm.grad_params:
        return []
    return [{"mb": v} for v in (5.0, 10.0, 50.0, 100.0) if v != m.comm.bucket_cap_mb]


class StragglerArgs(FixArgs):
    rank: int = Field(ge=0)
    phase: str = "forward"
    ms: float = Field(ge=0, le=3_600_000)
    """The rank's extra time in the phase per step (ms; at most an hour: a typo such as
    ms=1e12 is an error, not a step of 30 years whose µs no float holds)."""


class BarrierArgs(FixArgs):
    phase: str = "backward"


class InterconnectArgs(FixArgs):
    k: float = Field(default=2.0, gt=0)
    """Bus bandwidth multiplier."""


def collectives(m: StepModel) -> bool:
    return any(t.kind == "collective" for t in m.task_map().values())


def faster_interconnect(m: StepModel, a: InterconnectArgs) -> StepModel:
    if not collectives(m):
        raise nothing("faster_interconnect", "no collectives")
    if m.comm.bus_gbps is not None:
        return set_value(m, "comm.bus_gbps", m.comm.bus_gbps * a.k)
    return scale(m, Selector(kind=("collective",)), 1 / a.k)


class AccumArgs(FixArgs):
    micro_batches: int = Field(default=4, ge=2)
    """Micro-batches per optimizer step (DDP ``no_sync`` on all but the last)."""


def grad_accumulation(m: StepModel, a: AccumArgs) -> StepModel:
    if m.comm.grad_accum_steps == a.micro_batches:
        raise nothing("grad_accumulation", f"grad_accum_steps is already {a.micro_batches}")
    if not collectives(m) and not any(t.phase == "optimizer" for t in m.task_map().values()):
        raise nothing("grad_accumulation", "no collectives and no optimizer work")
    return set_value(m, "comm.grad_accum_steps", a.micro_batches)


# ---------------------------------------------------------------- ranks ------------------
class NoArgs(FixArgs):
    pass


def remove_straggler(m: StepModel, a: NoArgs) -> StepModel:
    if not any(r.slower() for r in m.ranks):
        raise nothing("remove_straggler", "no rank is slower than the others in the model "
                      "(every rank's delay_us, phase_extra_us and phase_wall_us are 0): the "
                      "arrival skew a "
                      "simulation shows is then the ranks' step-to-step variation (each draws "
                      "its own measured durations), which replacing a slow node does not "
                      "remove")
    return remove(m, Selector(rank=tuple(r.rank for r in m.ranks)))
