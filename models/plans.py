"""The simulator's plans: a StepModel turned into what the processes run.

``host_plan`` gives the host thread's ops (:class:`models.host.HostOpPlan`), ``stream_plans``
each stream's tasks of one rank (:class:`models.device.TaskPlan`) with the rank's durations
(``task_durations``), ``issue_points`` the host op by which each device task has been issued.
"""
from __future__ import annotations

from stepsim.models.ddp import collective_us, comm_time_us
from stepsim.models.device import TaskPlan
from stepsim.models.host import HostOpPlan
from stepsim.models.param_comm import BARRIER_TASK
from stepsim.models.params import MAX_DURATION_US, StepModel
from stepsim.simcore.dists import Empirical
from stepsim.simcore.errors import SimulationError

__all__ = ["fault_split", "host_plan", "issue_points", "stream_plans", "task_durations",
           "threads_ratio", "transfer_per_byte_us"]


def threads_ratio(op) -> tuple[float, float, float]:
    """``(r, parallel_fraction, block_fraction)`` of a ``cpu`` op run on ``threads`` intra-op
    threads when its durations were measured on ``capture_threads`` = T₀: its durations are
    multiplied by ``r`` and split anew. The parallel part of wall ``p`` did ``e·T₀·p`` µs of
    work (``e`` = ``parallel_efficiency``; the rest of its CPU was spinning), which ``T``
    threads do in ``e·T₀·p / (T·e_T)``, with ``e_T`` = 1 on one thread and ``e`` on more; the
    serial part and the blocking keep their time. ``(1, pf, bf)`` when nothing changed."""
    pf, bf = op.parallel_fraction, op.block_fraction
    t0, t = op.capture_threads, op.threads
    if t0 is None or t0 == t or pf <= 0:
        return 1.0, pf, bf
    e = op.parallel_efficiency
    par = pf * e * t0 / (t * (1.0 if t == 1 else e))
    r = 1.0 - pf + par
    return r, par / r, bf / r


def fault_split(work_us: float, fault_us: float, pf: float, bf: float, threads: int,
                cores: int) -> tuple[float, float]:
    """``(parallel_fraction, block_fraction)`` of a ``cpu`` op of ``work_us`` µs (split
    ``pf``, ``bf``) with ``fault_us`` µs of re-faulting added (``HostOp.refault_us`` × the
    share). The blocking keeps its µs: a fault is CPU work. On one thread (or a team of more
    threads than ``cores``, which barely spins) the faults are the main thread's serial work.
    On a team of 2 to ``cores`` threads they are the team's time, added to its parallel
    part: the main thread faults inside the op's regions and between them (the first touch
    of the memory the step frees and takes again) while the other threads wait at the
    barrier, spinning, so a worker that takes one of their cores stalls the faults as it
    stalls a region (inferred, not measured apart); and a contended capture's wall, faults
    included, was inverted at the team's rate (:func:`calibration.cpu.stalled_team_wall`),
    the faults then cut from that work (``refault_us``, :mod:`calibration.cpu`), so the
    simulator now runs them as they were inverted. Run as serial work they left the workers
    a core the regions would have stalled on, so at a team stall ``γ`` past about 1 more
    faulting made the step shorter (user19 on fresh10's model: −5.6 ms for +97.6 ms of fault
    CPU at ``γ`` 3; tests/test_fault_monotone.py)."""
    total = work_us + fault_us
    par = pf * work_us + (fault_us if 1 < threads <= cores and pf > 0 else 0.0)
    return par / total, bf * work_us / total


def task_durations(model: StepModel, rank_index: int) -> dict[str, float]:
    """µs per device task for one rank: measured durations, collectives from the cost model
    when ``comm.bus_gbps`` is set, and the rank's per-phase extra time spread over that
    phase's non-collective tasks in proportion to their duration."""
    rp = model.ranks[rank_index]
    tasks = model.task_map()
    out: dict[str, float] = {}
    for t in tasks.values():
        if t.kind == "collective" and model.comm.bus_gbps is not None and t.bytes is not None:
            out[t.id] = comm_time_us(model.comm, t.bytes)
            if not out[t.id] <= MAX_DURATION_US:   # 1e-300 GB/s: an infinite step
                raise SimulationError(
                    f"comm.bus_gbps={model.comm.bus_gbps:g} GB/s and comm.latency_us="
                    f"{model.comm.latency_us:g} give {t.id}'s {t.bytes} B a transfer of "
                    f"{out[t.id]:.4g} µs, past the most a duration holds "
                    f"({MAX_DURATION_US:g} µs)")
        else:
            out[t.id] = t.dur_us
    _transfer_level(model, tasks, out)
    host_phases = {op.phase for op in model.host.ops if op.kind == "cpu"}
    for phase, extra in rp.phase_extra_us.items():
        ids = [t.id for t in tasks.values() if t.phase == phase and t.kind != "collective"]
        total = sum(out[i] for i in ids)
        if not ids and phase in host_phases:
            continue        # a host-side phase: see rank_host_plan
        if not ids:
            raise SimulationError(f"rank {rp.rank}: phase_extra_us names phase {phase!r}, "
                                  "which has no tasks")
        for i in ids:
            out[i] += extra * (out[i] / total if total > 0 else 1 / len(ids))
    return out


def transfer_per_byte_us(comm) -> float:
    """µs per byte of a host-reduced collective's time on the transfer line that is not its
    CPU work: the line's slope (``2(n−1)/n`` bytes over ``comm.bus_gbps``) less
    ``comm.host_cpu_us_per_mb`` per MiB, 0 where that is negative or there is no line. What
    ``comm.transfer_scale`` scales, up to ``comm.line_bytes`` (past it the line adds CPU work
    alone, :func:`models.ddp.comm_time_us`)."""
    if comm.bus_gbps is None:
        return 0.0
    slope = collective_us(2 ** 20, comm.world_size, comm.bus_gbps, 0.0) / 2 ** 20
    return max(slope - comm.host_cpu_us_per_mb / 2 ** 20, 0.0)


def _transfer_level(model: StepModel, tasks: dict, out: dict[str, float]) -> None:
    """Add to ``out`` (µs by task id), for each host-reduced collective on the comm stream,
    ``(comm.transfer_scale − 1) × transfer_per_byte_us × min(bytes, comm.line_bytes)``: its
    transfer's per-byte part that is not CPU work at the transfer level; its latency and CPU
    work keep theirs. Only where collectives take a host core (gloo on one host,
    :func:`models.engine.comm_cpu_us`'s condition) and have a line (``comm.bus_gbps``)."""
    c = model.comm
    k = c.transfer_scale
    if k == 1.0 or not (model.host.uses_core and c.host_cpu_us + c.host_cpu_us_per_mb > 0):
        return
    per = transfer_per_byte_us(c)
    for t in tasks.values():
        if t.kind == "collective" and t.stream == c.comm_stream and t.id in out and t.bytes:
            nbytes = min(t.bytes, c.line_bytes) if c.line_bytes else t.bytes
            out[t.id] = max(out[t.id] + (k - 1) * per * nbytes, 0.0)


def issue_points(model: StepModel) -> dict[str, int]:
    """For every device task, the index of the host op by which it has been issued: its launch
    op, or for a task no host op launches, the latest issue point among its stream predecessor
    and the tasks it waits for (−1: issued when the step starts). A device-wide sync at op ``j``
    waits for the tasks issued before ``j``."""
    launch = {op.task: i for i, op in enumerate(model.host.ops) if op.kind == "launch"}
    issue = {t: launch.get(t, -1) for t in model.task_map()}
    for _ in range(len(issue) + 1):
        changed = False
        for ts in model.device.streams.values():
            prev = -1
            for t in ts:
                v = max([prev, launch.get(t.id, -1)] + [issue[w] for w in t.waits])
                if v != issue[t.id]:
                    issue[t.id], changed = v, True
                prev = v
        if not changed:
            return issue
    raise SimulationError("device task waits form a cycle")


def _lag(ops: list, j: int) -> dict:
    """A cpu op's resume lag (``HostOp.resume_lag_us``) and the collective of the sync right
    before it, whose last rank to enter pays it (none without such a sync)."""
    prev = ops[j - 1] if j > 0 else None
    if prev is None or prev.kind != "sync" or prev.task is None:
        return {}
    return {"lag": Empirical(tuple(ops[j].resume_lag_us)), "lag_task": prev.task}


def host_plan(model: StepModel, replay: bool = False) -> list[HostOpPlan]:
    """The host ops as the host process runs them: pageable copies that block, the targets of
    every sync, optimizer-phase ops (skipped under ``no_sync``); with ``replay``, each op's
    captured per-step values (``HostOp.replay_us``)."""
    tasks = model.task_map()
    issue = issue_points(model)
    plans = []
    for j, op in enumerate(model.host.ops):
        block = None
        targets: tuple[tuple[int, str], ...] = ()
        t = tasks.get(op.task) if op.task is not None else None
        if op.kind == "launch" and t is not None and t.pinned is False \
                and t.copy_kind in ("h2d", "d2h"):
            block = t.copy_kind
        if op.kind == "sync":
            if t is not None:
                targets = ((0, t.id),)
            else:
                tl = []
                for ts in model.device.streams.values():
                    done_before = [x.id for x in ts if issue[x.id] < j]
                    if done_before:
                        tl.append((0, done_before[-1]))
                    elif ts:
                        tl.append((-1, ts[-1].id))
                targets = tuple(tl)
        optimizer = op.phase == "optimizer" or (t is not None and t.phase == "optimizer")
        cpu = op.kind == "cpu"
        r, pf, bf = threads_ratio(op) if cpu else (1.0, 0.0, 0.0)
        fault = model.host.refault_share * op.refault_us if cpu else 0.0
        if fault > 0:
            pf, bf = fault_split(op.dur_us * r, fault, pf, bf, op.threads,
                                 model.loader.host_cores)
        plans.append(HostOpPlan(
            op.kind, op.name or (f"{op.kind} {op.task}" if op.task else op.kind),
            op.dur_us * r + fault, op.task, op.category, block, targets, optimizer,
            Empirical(tuple(v * r + fault for v in op.samples_us)) if cpu and op.samples_us
            else None,
            t.launches if op.kind == "launch" and t is not None else 1,
            tuple(v * r for v in op.replay_us) if replay and op.replay_us is not None else None,
            op.threads if cpu else 1, pf, bf, op.corun_ref if cpu else 0.0,
            **_lag(model.host.ops, j) if cpu and op.resume_lag_us else {},
            co_core_us=model.comm.barrier_co_core_us
            if op.kind == "sync" and op.task == BARRIER_TASK else 0.0))
    return plans


def stream_plans(model: StepModel, rank_index: int, replay: bool = False
                 ) -> dict[str, list[TaskPlan]]:
    """One rank's device tasks as its stream processes run them, durations set for the rank
    and gaps scaled by ``device.gap_scale``; with ``replay``, each task's captured per-step
    busy and idle times (``DeviceTask.replay_us``, ``replay_gap_us``)."""
    durs = task_durations(model, rank_index)
    launched = {op.task for op in model.host.ops if op.kind == "launch"}
    comm = model.comm.comm_stream
    gap = model.device.gap_scale
    return {s: [TaskPlan(
        t.id, t.name or t.id, t.category, durs[t.id], tuple(t.waits), t.id in launched,
        t.copy_kind if t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h") else None,
        t.kind == "collective",
        (t.kind == "collective" and s == comm) or t.phase == "optimizer", t.gap_us * gap,
        tuple(t.prev_waits),
        tuple(t.replay_us) if replay and t.replay_us is not None else None,
        tuple(t.replay_gap_us) if replay and t.replay_gap_us is not None else None)
        for t in ts] for s, ts in model.device.streams.items()}
