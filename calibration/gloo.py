"""Calibration of a multi-rank CPU DistributedDataParallel job (gloo backend) from one Kineto
trace per rank, into one :class:`models.params.StepModel` holding every rank.

What a gloo trace holds (checked on 2-rank runs with torch 2.13, ``torch.profiler`` with CPU
activities and ``record_shapes=True``):

* on the main thread, ``c10d::allreduce_`` only *enqueues* a bucket's all-reduce (about 0.1 ms
  when the thread has its core); its ``Input Dims`` ``[[[n]]]`` give the bucket's element
  count and ``Input type`` its dtype. Backward runs on the main thread
  (``autograd::engine::evaluate_function: …`` events): CPU tensors need no device thread;
* on one of gloo's worker threads (two by default, taking the work in turn),
  ``gloo:all_reduce`` spans the real collective *including the wait for the peer*, with the
  same ``Input Dims``;
* ``c10d::barrier`` (main thread, short) pairs with ``gloo:barrier`` (worker thread, the
  wait); the main thread's wait for it, like its wait for the outstanding all-reduces at the
  end of backward (DDP's ``finalize_backward``, before the optimizer), is an untraced gap.

The k-th ``c10d::`` enqueue of the main thread is paired with the k-th ``gloo:`` event of the
worker threads, by start time. Clocks are aligned on collective ends (a collective finishes
at one instant on every rank): each rank's offset is the median difference of its ends
against the first rank's. A collective's *arrival* on a rank is its ``gloo:`` start; its
transfer is its duration on the **last rank to arrive** (never the mean; the last
all-reduce's ends no later than the main thread it woke resumed: a worker may stamp its end
late); the rest, on the others, is arrival skew. Each rank's late resume after the last
all-reduce is measured per step and drawn by the optimizer op
(:mod:`calibration.gloo_resume`); a capture's replicates pool the transfers and the lags
(:mod:`calibration.gloo_pool`). The last bucket's copy into the gradients after that resume,
per MiB, is ``comm.grad_copy_us_per_mb``.

The model, from the reference rank (the one that arrives first at the median collective,
whose own work is never hidden behind waiting), per step on the host thread: ``cpu`` ops for
the work between enqueues (phase ``forward`` before the first autograd event, ``backward``
after it, ``optimizer`` after the end-of-backward wait), a ``launch`` per enqueue of a
``collective`` task on stream ``gloo``, a ``sync`` after each barrier enqueue, and a ``sync``
on the last all-reduce where backward's compute ends (the untraced wait). Each ``cpu`` op keeps
its measured per-step durations (``samples_us``); waits are excluded, since the simulator adds
them, and so is the training thread's preemption by the collectives reduced during backward
(:mod:`calibration.gloo_preempt`). Where the host's ranks' training threads and DataLoader
workers outnumber its cores, each step's ops are priced from the training thread's CPU
instead of its walls, which then hold waits for a core the simulator adds itself
(:mod:`calibration.gloo_cpu_price`; nothing is then deducted for the preemption), and at the
run's unprofiled steps' CPU where the window's drifted from it
(:mod:`calibration.gloo_window`, which says so on every rank at one intra-op thread). Every other
rank's extra host time per phase (its mean minus the reference's, when
positive) is its ``RankParams.phase_extra_us``; each rank's host name (``host_name`` of the
trace) is its ``RankParams.host``, so ranks on one host share its cores.

The profiler's own per-op cost is taken out of these host durations: each rank's ``cpu`` and
``launch`` durations (and so its phase times) are scaled by its measured factor, unprofiled ÷
profiled main-thread CPU per step from the capture sidecar's steps
(:mod:`calibration.profiler_overhead`; named in ``meta.notes["profiler_factor"]``), shared
between forward, backward and the optimizer by the events each records
(:mod:`calibration.profiler_events`; ``meta.notes["profiler_phase_factor"]``). The
host's speed range ``host.cpu_scale`` (every interval draws it) is the stated run-to-run
prior (replicates' measured spread is pooled with it, :mod:`calibration.host_noise`); the
factor's own uncertainty (the largest rank's) is ``host.cpu_scale_error_log``, drawn in every
interval beside it, with or without replicates.

Collective cost (:mod:`calibration.gloo_comm`): ``latency_us`` and ``bus_gbps`` fitted by least
squares to the all-reduces' transfer times against their ring bus bytes, only those that ran
after their rank's backward compute (:mod:`calibration.gloo_transfer`; ``inferred``; with one
size, the latency is the measured per-collective CPU ``comm.host_cpu_us``, else 0). Each
collective's CPU work on its rank's host cores (``comm.host_cpu_us``,
``comm.host_cpu_us_per_mb``) comes from the job's per-thread CPU times in the capture sidecars
(:mod:`calibration.gloo_cpu`), its threads' wake-ups and their wait for a core on busy cores
(``comm.wakeups``, ``comm.wakeups_per_mb``, ``comm.wakeup_wait_us``) from the same marks'
schedstat (:mod:`calibration.gloo_wake`). DDP's parameters come from the capture
sidecar's ``ddp`` record (``measured``); without it, one pseudo-parameter per observed bucket
(``inferred``: buckets can then be merged by a what-if but never split). A trace recorded
without ``record_shapes`` has no ``Input Dims``: the all-reduces' sizes are then the buckets DDP
builds from the record's parameters at its caps.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.calibration.gloo_comm import GLOO_STREAM, comm_params, record_sizes
from stepsim.calibration.gloo_cpu import DTYPE_BYTES
from stepsim.calibration.gloo_cpu_price import cpu_priced, price_from_cpu
from stepsim.calibration.gloo_loader import at_loader_drift, rank_loader
from stepsim.calibration.gloo_preempt import deduct_preemption, own_enqueue_us
from stepsim.calibration.gloo_resume import late_lags, resume_lags
from stepsim.calibration.gloo_window import rank_drifts, scaled_comm
from stepsim.calibration.gloo_steps import PHASES, GlooRank, GlooStep, fit_gloo_rank
from stepsim.calibration.outside_load import speed_change
from stepsim.calibration.profiler_events import phase_factors
from stepsim.calibration.profiler_overhead import rank_factors
from stepsim.calibration.rank_team import one_thread_notes
from stepsim.models.host_speed import HOST_NOISE_PRIOR
from stepsim.models.rank_threads import rank_threads_warning, ranks_on_host
from stepsim.models.params import (DeviceParams, DeviceTask, HostOp, HostParams, Meta,
                                   RankParams, StepModel)
from stepsim.simcore.errors import InputError

__all__ = ["is_gloo", "calibrate_gloo", "job_transfers", "GLOO_STREAM"]


def is_gloo(table: EventTable) -> bool:
    """Whether a host-only trace holds gloo collectives (``gloo:*`` events)."""
    return any(str(n).startswith("gloo:") for n in table.names.tolist())


def _job(tables: list[EventTable], warnings: list[str]):
    """Every rank's fitted steps, kept to the steps of the commonest structure that every rank
    has: ``(ranks, order, nums, step)`` (``step[rank][number]``).

    Raises:
        InputError: two traces of one rank, or ranks that share no step of one structure.
    """
    ranks: dict[int, GlooRank] = {}
    for t in tables:
        r = fit_gloo_rank(t, warnings)
        if r.rank in ranks:
            raise InputError(t.path, f"rank {r.rank} again (also {ranks[r.rank].path.name})")
        ranks[r.rank] = r
    order = sorted(ranks)
    shape = Counter(s.shape() for r in ranks.values() for s in r.steps).most_common(1)[0][0]
    for r in ranks.values():
        kept = [s for s in r.steps if s.shape() == shape]
        if len(kept) < len(r.steps):
            warnings.append(f"rank {r.rank}: {len(r.steps) - len(kept)} step(s) with another "
                            "structure (enqueue order) left out")
        r.steps = kept
    by_num = [set(s.number for s in ranks[r].steps) for r in order]
    nums = sorted(set.intersection(*by_num))
    if not nums:
        raise InputError(tables[0].path, "the ranks share no step of one structure")
    step = {r: {s.number: s for s in ranks[r].steps} for r in order}
    return ranks, order, nums, step


def _collectives(ranks: dict[int, "GlooRank"], order: list[int], nums: list[int], step: dict):
    """Clock offsets (ns) from collective ends, and per step and collective: arrivals (ns,
    ``(ranks, steps, colls)``), the last rank to arrive, its transfer (µs), each rank's
    arrival skew (µs) and each collective's median overlap with backward on the last rank."""
    first = order[0]

    def abs_ns(r, t):
        return ranks[r].base_ns + t

    ends = {r: [abs_ns(r, c.run[1]) for n in nums for c in step[r][n].colls] for r in order}
    offset = {r: float(np.median(np.array(ends[r]) - np.array(ends[first]))) for r in order}
    n_coll = len(step[first][nums[0]].colls)
    arrive = {r: np.array([[abs_ns(r, step[r][n].colls[k].run[0]) - offset[r]
                            for k in range(n_coll)] for n in nums]) for r in order}
    arr = np.stack([arrive[r] for r in order])                  # (ranks, steps, colls)
    last = arr.argmax(axis=0)                                   # (steps, colls)
    def span_us(rec: GlooStep, k: int) -> float:
        """The collective's span on that rank; the last all-reduce's ends no later than the
        main thread it woke resumed (a worker may stamp its end after that: late)."""
        c = rec.colls[k]
        end = c.run[1]
        if rec.resume_ns is not None and rec.resume_ns >= c.run[0] and k == max(
                (j for j, x in enumerate(rec.colls) if x.kind == "all_reduce"), default=-1):
            end = min(end, rec.resume_ns)     # (a resume before its start is not its wait's)
        return (end - c.run[0]) / 1e3

    transfer = np.array([[span_us(step[order[last[i, k]]][n], k) for k in range(n_coll)]
                         for i, n in enumerate(nums)])
    skew = (arr.max(axis=0)[None] - arr) / 1e3                  # µs each rank waited
    busy = [float(np.median([step[order[last[i, k]]][n].colls[k].busy
                             for i, n in enumerate(nums)])) for k in range(n_coll)]
    return offset, arr, last, transfer, skew, busy


def job_transfers(tables: list[EventTable]
                  ) -> tuple[list[tuple[str, int | None]], np.ndarray, list[float],
                             list[float] | None]:
    """One gloo job's collectives, as ``(kind, elements)`` in enqueue order, their transfer
    per step (µs, ``(steps, colls)``: the span on the last rank to arrive), their median
    overlap with backward, and each step's late rank's resume lag (µs, None where a step has
    no resume), as :func:`calibrate_gloo` measures them (used to pool a capture's
    replicates).

    Raises:
        InputError: as :func:`calibrate_gloo`.
    """
    ranks, order, nums, step = _job(tables, [])
    colls = step[order[0]][nums[0]].colls
    got = _collectives(ranks, order, nums, step)
    lags = _lags(ranks, order, nums, step, got[0])
    return ([(c.kind, c.numel) for c in colls], got[3], got[5],
            None if lags is None else late_lags(lags))


def _lags(ranks: dict, order: list[int], nums: list[int], step: dict, offset: dict
          ) -> np.ndarray | None:
    """Each rank's late resume after the last all-reduce per step (µs, ``(ranks, steps)``,
    :func:`calibration.gloo_resume.resume_lags`), or None where the step does not end with
    the optimizer after that wait or a rank's step has no resume."""
    if step[order[0]][nums[0]].ops[-1][:2] != ("cpu", "optimizer") or any(
            step[r][n].resume_ns is None for r in order for n in nums):
        return None
    return resume_lags(np.array([[ranks[r].base_ns + step[r][n].resume_ns - offset[r]
                                  for n in nums] for r in order]))


def _copy_rate(recs: list, tasks: list[DeviceTask], lags, factors: dict, sources: dict
               ) -> dict:
    """``comm.grad_copy_us_per_mb`` (:class:`models.param_comm.CommParams`): the reference
    rank's copies of the last bucket after its resume (µs per step, times its optimizer's
    profiler factor) over that bucket's MiB; ``{}`` without resumes, copy events or sizes."""
    last = next((ci for kind, _, _, ci in reversed(recs[0].ops) if kind == "sync"), None)
    copy_us = float(np.mean([r.copy_us for r in recs])) * factors.get("optimizer", 1.0)
    if lags is None or last is None or not tasks[last].bytes or copy_us <= 0:
        return {}
    sources["comm.grad_copy_us_per_mb"] = "measured"
    return {"grad_copy_us_per_mb": copy_us / (tasks[last].bytes / 2**20)}


def calibrate_gloo(tables: list[EventTable], sidecars: dict[int, object] | None = None
                   ) -> StepModel:
    """One StepModel of every rank (see the module docstring).

    Args:
        tables: one host-only trace per rank.
        sidecars: capture sidecars by rank (:class:`calibration.sidecar.Sidecar` with a
            ``ddp`` record), optional.

    Raises:
        InputError: a trace without steps or backward pass, two traces of one rank, or ranks
            whose steps share no structure.
    """
    warnings: list[str] = [w for t in tables for w in t.warnings]
    warnings += [w for r in sorted(sidecars or {}) for w in sidecars[r].dropped]
    ranks, order, nums, step = _job(tables, warnings)
    first = order[0]
    offset, arr, last, transfer, skew, busy = _collectives(ranks, order, nums, step)
    n_coll = len(step[first][nums[0]].colls)
    # the reference arrives first: it waits longest at the median collective
    ref = order[int(np.argmax(np.median(skew.reshape(len(order), -1), axis=1)))] \
        if n_coll else first
    recs = [step[ref][n] for n in nums]
    colls0 = recs[0].colls
    # the profiler's own cost, measured per rank against its unprofiled steps
    fac, fac_notes, fac_half = rank_factors(order, sidecars or {}, warnings)
    held = speed_change(sidecars or {}, warnings)     # calibration.outside_load
    rec = next((s.ddp for s in (sidecars or {}).values() if getattr(s, "ddp", None) is not None
                and s.ddp.params), None)
    sized = record_sizes(colls0, rec, warnings)
    tasks = []
    for k, c in enumerate(colls0):
        nbytes = c.numel * DTYPE_BYTES.get(c.dtype, 4) if c.numel is not None else sized.get(k)
        phase = next(p for kind, p, _, ci in recs[0].ops if kind == "launch" and ci == k)
        tasks.append(DeviceTask(id=f"gloo.{c.kind}{k}", stream=GLOO_STREAM,
                                name=f"gloo:{c.kind}" + (f" ({nbytes} B)" if nbytes else ""),
                                kind="collective", category="communication", phase=phase,
                                dur_us=float(np.median(transfer[:, k])), bytes=nbytes))
    # each rank's late resume after the last all-reduce (calibration.gloo_resume)
    lags = _lags(ranks, order, nums, step, offset)
    if lags is not None:
        for r in order:
            for n in nums:
                step[r][n].phase_us["optimizer"] = step[r][n].opt_work_us
    # on a host with more busy threads than cores, the ops' walls hold waits for a core that
    # the simulator adds itself: priced from the training thread's CPU (calibration.
    # gloo_cpu_price)
    by_cpu = cpu_priced({r: ranks[r].host for r in order}, sidecars or {})
    price_notes = price_from_cpu(step, order, nums, sidecars, lags is not None,
                                 warnings) if by_cpu else {}
    # the profiler's cost shared by each phase's events (calibration.profiler_events)
    pf = {r: phase_factors(fac[r], {p: float(np.mean([step[r][n].phase_us[p] for n in nums]))
                                    for p in PHASES},
                           {p: float(np.mean([step[r][n].events.get(p, 0) for n in nums]))
                            for p in PHASES}) for r in order}
    # the window against the run's later unprofiled steps (calibration.gloo_window)
    drift, drift_notes = rank_drifts(order, sidecars or {}, fac, bool(price_notes), warnings)
    pf_prof, pf = pf, {r: {p: v * drift.get(r, 1.0) for p, v in pf[r].items()} for r in order}
    ops = []
    for j, (kind, phase, _, ci) in enumerate(recs[0].ops):
        vals = [r.ops[j][2] * pf[ref].get(phase, fac[ref]) for r in recs]
        late = None
        if lags is not None and j == len(recs[0].ops) - 1:
            vals = [r.opt_work_us * pf[ref]["optimizer"] for r in recs]
            late = late_lags(lags)
        task = tasks[ci].id if ci is not None else None
        if kind == "cpu":
            name = {"forward": "forward", "backward": "backward",
                    "optimizer": "optimizer"}[phase]
            ops.append(HostOp(kind="cpu", name=name, dur_us=float(np.mean(vals)),
                              samples_us=[float(v) for v in vals], phase=phase, category=phase,
                              resume_lag_us=late))
        elif kind == "next":
            ops.append(HostOp(kind="next_batch", name="next(DataLoader)"))
        elif kind == "launch":
            ops.append(HostOp(kind="launch", name=f"c10d::{colls0[ci].kind} enqueue",
                              dur_us=float(np.median(vals)), task=task, phase=phase))
        else:
            ops.append(HostOp(kind="sync", name=f"wait for {tasks[ci].name} (untraced)",
                              task=task, phase=phase))
    ref_phase = {p: float(np.mean([r.phase_us[p] for r in recs])) * pf[ref][p] for p in PHASES}
    rank_params = []
    for r in order:
        extra = {p: float(np.mean([step[r][n].phase_us[p] for n in nums])) * pf[r][p]
                 - ref_phase[p] for p in PHASES}
        rank_params.append(RankParams(rank=r, host=ranks[r].host,
                                      phase_extra_us={p: v for p, v in extra.items() if v > 0}))
    cpu_notes: dict = {}
    comm, sources, how = comm_params(tasks, busy, ranks, sidecars or {}, rec, warnings,
                                     cpu_notes)
    job = [max(step[r][n].step_us for r in order) for n in nums]
    world = max([ranks[r].world for r in order] + [len(order)])
    comm = scaled_comm(comm, drift).model_copy(update={
        "world_size": world, **_copy_rate(recs, tasks, lags, pf[ref], sources)})
    waits = [sum(d for k, _, d, _ in r.ops if k == "next") * fac[ref] for r in recs]
    loader = rank_loader((sidecars or {}).get(ref), waits,
                         max(Counter(ranks[r].host for r in order).values()), sources, warnings)
    if drift:     # the batch at the run's speed too, by the loader's own gauge
        loader = at_loader_drift(loader, (sidecars or {}).get(ref), drift_notes,
                                 warnings)
    # an enqueue's own cost: each step's cheapest, the rest of its wall a wait for a core
    sized_at = [j for j, (k, _, _, ci) in enumerate(recs[0].ops) if k == "launch"
                and colls0[ci].kind == "all_reduce" and tasks[ci].bytes]
    ops, preempted = (ops, 0.0) if price_notes else deduct_preemption(
        ops, {t.id for t in tasks if t.kind == "collective" and t.bytes},
        {r: ranks[r].host for r in order}, sidecars or {}, loader.host_cores,
        max([op.threads for op in ops if op.kind == "cpu" and op.parallel_fraction > 0] or [1]),
        ref, warnings, scale=pf[ref]["backward"], enqueue_us=own_enqueue_us(
            [[r.ops[j][2] * pf[ref].get(r.ops[j][1], fac[ref]) for j in sized_at]
             for r in recs], warnings))
    sources.update({"host.ops": "measured", f"device.streams.{GLOO_STREAM}": "measured",
                    "ranks": "measured", "host.cpu_scale": "assumed"})
    # the host's run-to-run speed (the stated prior, until replicates measure it); the
    # profiler factor's uncertainty is drawn apart (HostParams.cpu_scale_error_log)
    ranges = {"host.cpu_scale": HOST_NOISE_PRIOR}
    if fac_half > 0:
        sources["host.cpu_scale_error_log"] = "measured"
    # the intra-op threads each rank ran on (rank_agree holds them equal across ranks)
    team = max((s.torch_num_threads or 1 for s in (sidecars or {}).values()), default=0)
    on_host = ranks_on_host([ranks[r].host for r in order])[1]
    one, one_range = one_thread_notes(ranks, sidecars or {}, team,
                                      on_host >= 2 and on_host * team > loader.host_cores,
                                      HOST_NOISE_PRIOR)
    ranges.update(one_range)
    notes = {"kind": "cpu_ddp", "backend": "gloo", "reference_rank": ref,
             "ranks": ",".join(map(str, order)), "buckets": how,
             "clock_offsets_us": ",".join(f"{r}:{offset[r] / 1e3:.1f}" for r in order),
             "arrival_skew_us_median": ",".join(
                 f"{r}:{float(np.median(skew[i])) if n_coll else 0.0:.1f}"
                 for i, r in enumerate(order)),
             "measured_median_step_us": float(np.median(job)), **fac_notes, **cpu_notes,
             **price_notes, **drift_notes,
             **({"profiler_phase_factor": ";".join(
                 f"{r}:" + ",".join(f"{p}={v:.6f}" for p, v in pf_prof[r].items())
                 for r in order)}
                if fac_notes else {}),
             **({"resume_lag_us": ",".join(f"{r}:{float(np.mean(lags[i])):.1f}"
                                           for i, r in enumerate(order))}
                if lags is not None else {}),
             **({"backward_preempted_us": round(preempted, 1)} if preempted else {}),
             **({"outside_load_held": held} if held is not None else {}),
             **({"intra_op_threads": team} if team else {}), **one,
             # the fewest step markers a rank's trace held (cli's "calibrated N steps")
             "step_markers": min(ranks[r].markers for r in order)}
    said = rank_threads_warning([ranks[r].host for r in order], team or 1, loader.host_cores,
                                loader.num_workers, job, priced=bool(one))
    warnings += [said] if said else []
    meta = Meta(name=f"{len(order)} ranks (gloo)", sources=sources,
                traces=[str(ranks[r].path) for r in order], steps_used=nums,
                measured_step_us=job, warnings=warnings, notes=notes, ranges=ranges)
    return StepModel(loader=loader, host=HostParams(ops=ops, cpu_scale_error_log=fac_half),
                     device=DeviceParams(streams={GLOO_STREAM: tasks}), comm=comm,
                     ranks=rank_params, meta=meta)
