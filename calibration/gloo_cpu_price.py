"""A gloo job's host ops priced from the training thread's CPU time where its host had more
busy threads than cores (issue 10's first item, as :mod:`calibration.cpu` does for one rank).

The trace gives each host op of a step its wall time. On a host whose ranks' training
threads and DataLoader workers outnumber its cores, that wall time holds the thread's waits
for a core (run-queue waits) and, where the end-of-backward wait was split in two (gloo's two
worker threads ran two buckets at once, so the main thread woke from the first and slept
again in the second), time it was blocked. The simulator adds the waits for a core itself
(:mod:`models.cpu`), so pricing them from the walls counts them twice. Measured on a user's
2-rank job with a DataLoader worker a rank on 2 vCPUs (newuser2, 2026-12-06, 6 threads on 2
cores): rank 1's ops summed to 25.1 ms a profiled step (the optimizer's two samples of 14 ms
held a second wait) against 20.5 ms of the training thread's CPU; rank 0's, 27.3 against
21.4 ms, so its 4.0 ms "extra work" over rank 1 was 0.9 ms of work and 3.1 ms of waiting.

Priced here (``measured``): each rank's step ``n`` gets the factor ``c[n] = min(1, CPU[n] ÷
W[n])``, ``CPU[n]`` its main thread's CPU outside ``next()`` in the capture sidecar's record
of that step (the harness numbers its steps as the profiler does), ``W[n]`` the sum of its
``cpu`` and ``launch`` op walls (the optimizer's from the thread's resume); every such op of
the step is scaled by it, so a step's ops add up to its CPU, shared in proportion to their
walls (which op waited is not recorded: assumed). Only on one intra-op thread (the main
thread's CPU is then the rank's work; with a team it is not, and the walls are kept), and
only where the host's busy threads (ranks × (1 + DataLoader workers)) exceed its cores:
with a core for each, a wall holds no wait for one and stays the price (the DDP demo: 2 ranks,
no workers, 2 cores). The training thread's preemption by gloo's threads during backward
(:mod:`calibration.gloo_preempt`) is then no longer in the price, so nothing is deducted.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

__all__ = ["cpu_priced", "price_from_cpu"]


def _busy_threads(side) -> int:
    """A rank's busy threads on its host: its training thread and its DataLoader workers."""
    loader = getattr(side, "loader", None)
    return 1 + (loader.num_workers if loader is not None else 0)


def cpu_priced(hosts: dict[int, str], sidecars: dict) -> bool:
    """Whether a job's host ops are priced from CPU (see the module docstring): every rank
    has a sidecar with step records, one intra-op thread, and a host whose ranks' busy
    threads exceed its measured cores. ``hosts``: each rank's host name."""
    if not hosts or any(r not in sidecars for r in hosts):
        return False
    sides = [sidecars[r] for r in hosts]
    if any(not s.steps or (s.torch_num_threads or 1) > 1 or not s.host_cores for s in sides):
        return False
    per_host = Counter(hosts.values())
    return any(per_host[hosts[r]] * _busy_threads(sidecars[r]) > sidecars[r].host_cores
               for r in hosts)


def _cpu_by_number(side) -> dict[int, float]:
    """The sidecar's profiled steps' main-thread CPU outside ``next()`` (µs) by step number
    (``ProfilerStep#N``; numbers of dropped records skipped, as
    :mod:`calibration.sidecar_match` counts them)."""
    gone = side.gone_steps
    numbers = (n for n in range(len(side.steps) + len(gone)) if n not in gone)
    return {n: max(s.cpu_us - s.next_cpu_us, 0.0) for n, s in zip(numbers, side.steps)
            if s.profiled}


def _take_out(vals: np.ndarray, med: np.ndarray, excess: float) -> np.ndarray:
    """``vals`` (one step's op walls, µs) less ``excess`` µs of waiting: first from each op's
    wall above its median over the steps (in proportion to it, a wait lengthens the op that
    held it), the rest in proportion to what is left."""
    above = np.maximum(vals - med, 0.0)
    first = min(excess, float(above.sum()))
    out = vals - (above * first / above.sum() if first > 0 else 0.0)
    rest = excess - first
    return out * (1.0 - rest / out.sum()) if rest > 0 and out.sum() > 0 else out


def price_from_cpu(step: dict, order: list[int], nums: list[int], sidecars: dict,
                   opt_from_resume: bool, warnings: list[str]) -> dict[str, str]:
    """Scales each rank's step records ``step[rank][number]`` (:class:`calibration.gloo_steps.
    GlooStep`: their ``cpu``/``launch`` ops, ``phase_us`` and ``opt_work_us``) in place to the
    step's CPU (see the module docstring). ``opt_from_resume``: the optimizer's wall is its
    ``opt_work_us`` (from the thread's resume; :mod:`calibration.gloo_resume`). Call it only
    where :func:`cpu_priced` holds. Returns the model's notes: each rank's mean walls and CPU."""
    notes = []
    for r in order:
        cpu = _cpu_by_number(sidecars[r])
        missing = [n for n in nums if n not in cpu]
        if missing:
            warnings.append(f"rank {r}: the capture sidecar has no profiled step record of "
                            f"step(s) {', '.join(map(str, missing[:4]))}: their host ops keep "
                            "their wall times")
        recs = [step[r][n] for n in nums if n in cpu]
        if not recs:
            continue
        last = len(recs[0].ops) - 1
        idx = [j for j, (k, *_rest) in enumerate(recs[0].ops) if k in ("cpu", "launch")]

        def wall(rec, j):
            return rec.opt_work_us if opt_from_resume and j == last else rec.ops[j][2]

        walls = np.array([[wall(rec, j) for j in idx] for rec in recs])     # (steps, ops)
        med = np.median(walls, axis=0)
        cpus = np.array([cpu[rec.number] for rec in recs])
        new = np.array([_take_out(w, med, max(float(w.sum()) - c, 0.0))
                        for w, c in zip(walls, cpus)])
        for rec, w, v in zip(recs, walls, new):
            ratio = dict(zip(idx, np.divide(v, w, out=np.ones_like(v), where=w > 0)))
            if opt_from_resume:
                rec.opt_work_us *= ratio[last]
            rec.ops = [(k, p, d * ratio.get(j, 1.0), ci)
                       for j, (k, p, d, ci) in enumerate(rec.ops)]
            rec.phase_us = {p: sum(float(x) for j, x in zip(idx, v) if rec.ops[j][1] == p)
                            for p in rec.phase_us}
        notes.append(f"{r}:{walls.sum(axis=1).mean():.0f}->{new.sum(axis=1).mean():.0f}")
    if not notes:
        return {}
    warnings.append(
        "host ops priced from the training thread's CPU time (the ranks' training threads and "
        "DataLoader workers outnumbered the host's cores, so the ops' wall times held waits "
        "for a core, which the simulator adds itself); mean host-op wall -> CPU a step (µs) "
        "per rank: " + ", ".join(notes))
    return {"host_ops_basis": "cpu_time", "host_ops_wall_to_cpu_us": ",".join(notes)}
