"""The backward time a gloo job's training threads lost to the collectives reduced during
backward, taken out of the captured backward (``host.ops``), since the simulator adds it.

A bucket's all-reduce enqueued during backward runs on gloo's threads while the training
threads still compute. On a host whose cores the training threads all keep busy, every
wake-up of a gloo thread takes a core from a training thread (Linux's wake-up preemption,
after a wait of ``comm.wakeup_wait_us``), so the training threads absorb the collective's CPU:
measured on the DDP demo (2 ranks, 2 vCPUs, 2026-12-05, load 1.7, 60 rank-steps per setting,
``/proc/<pid>/task/*/schedstat`` per thread), each training thread waited 0.80 and 0.93 ms
for a core during backward at DDP's defaults (a 1 MiB bucket reduced during backward) while
each rank's gloo threads ran 0.76 and 0.84 ms of CPU there, and 0.05 ms at
``bucket_cap_mb=25`` (no bucket before the end of backward). A capture's backward host
durations are wall time, so they hold that wait; the simulator prices it again
(:meth:`models.cpu.CpuPool.work`, ``preempt``) for the buckets of the setting it runs, so a
what-if without those buckets (``bucket_cap_mb=25``) kept the capture's 0.8-0.9 ms.

Taken out (``inferred``, from the measured CPU and the cores adding up): the gloo threads' CPU
between the first bucket's readiness and the last's (the capture sidecar's
``ddp.bucket_cpu``, all marks but the last; ``measured``), per step, the mean over the ranks
that share a host (times the profiler factor the host durations were scaled by), when the host's training threads are at least its cores; from the
backward ``cpu`` ops between the first and the last all-reduce enqueue, in proportion to
their time (and from each step's samples alike). Nothing without the marks, or with a core
to spare (a woken gloo thread then takes the idle core, in the simulator as on Linux), and
nothing where the ops are priced from the training thread's CPU, which holds no wait
(:mod:`calibration.gloo_cpu_price`).

Part of that wait lies in an enqueue's wall, not in the backward after it: the enqueue
(``c10d::allreduce_``) is what wakes the gloo thread, which takes the enqueuing thread's core
at once. Measured (``bench/ddp_enqueue_cpu.py``, the demo's job with a comm hook reading the
training thread's CPU and run-queue wait around each enqueue, 2026-12-07, ddp21): its mean
wall 190-680 µs a bucket against 49-241 µs of CPU (the hook's own Python call included), the
rest run-queue wait and time blocked in the call; in the demo's captures the first enqueue of
a step (the one that wakes a sleeping gloo thread) was priced at 57-484 µs (the reference
rank's median wall) where its cheapest tenth and the last enqueue's median are 40-85 µs.
A calibration that prices every enqueue at its median wall charges each bucket a what-if
adds that wait again, on top of the simulator's own wake-up preemption: bucket_cap_mb=1's
6 extra enqueues cost 0.1-1.7 ms of modelled backward CPU in 6 kept demos where their timed
runs measured 0.02-0.37 ms (``bwd_cpu``, :mod:`demo.ddp_phases`).
So each enqueue is priced at its own cost (:func:`own_enqueue_us`: per step the cheapest of
the step's enqueues, which ran the same code, the median over the steps; ``measured``), and
what that takes out of the enqueues between the first and the last is part of the wait
above: only the rest of the gloo CPU comes out of the backward ``cpu`` ops, so a step's
captured time between those enqueues loses the same in all.
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.models.params import HostOp

__all__ = ["overlap_cpu_us", "own_enqueue_us", "deduct_preemption"]


def overlap_cpu_us(side) -> float | None:
    """The backend threads' CPU per step between a rank's first and last bucket marks (µs;
    None without marks)."""
    marks = list(getattr(getattr(side, "ddp", None), "bucket_cpu", None) or [])
    if not marks:
        return None
    return sum(b.cpu_us / b.steps for b in marks[:-1])


def own_enqueue_us(step_walls: list[list[float]],
                   warnings: list[str] | None = None) -> float | None:
    """An all-reduce enqueue's own cost (µs): per step (``step_walls``: each step's enqueue
    walls, µs), the cheapest enqueue, which waited least for its core, and the median over
    the steps; None without a step holding an enqueue. A wall of 0 µs or less (or not
    finite) is no enqueue's cost (the call takes tens of µs): it is dropped, and counted in
    ``warnings``, so it cannot make its step the cheapest (break21: 8 of 20 steps with a 0 µs
    enqueue priced every enqueue at 56 µs where the capture's walls gave 129)."""
    kept = [[v for v in w if math.isfinite(v) and v > 0] for w in step_walls]
    bad = sum(len(w) for w in step_walls) - sum(len(w) for w in kept)
    if bad and warnings is not None:
        warnings.append(f"{bad} all-reduce enqueue wall(s) of 0 µs or less (or not finite) "
                        "cannot be an enqueue's own cost: dropped from it")
    cheapest = [min(w) for w in kept if len(w)]
    return float(np.median(cheapest)) if cheapest else None


def deduct_preemption(ops: list[HostOp], coll_ids: set[str], hosts: dict[int, str],
                      sidecars: dict, cores: int, team: int, ref: int,
                      warnings: list[str], scale: float = 1.0,
                      enqueue_us: float | None = None) -> tuple[list[HostOp], float]:
    """``ops`` (the reference rank ``ref``'s host ops) with the training thread's preemption
    by the collectives reduced during backward taken out (see the module docstring), and
    the time taken out per step (µs). ``coll_ids``: the sized all-reduces' task ids;
    ``hosts``: each rank's host; ``cores``: a host's cores; ``team``: training threads per
    rank; ``scale``: the factor ``ops`` were already scaled by (the reference rank's profiler
    factor, :mod:`calibration.profiler_overhead`), which scaled the wait they hold alike;
    ``enqueue_us``: an enqueue's own cost (:func:`own_enqueue_us`, already so scaled): every
    all-reduce enqueue above it is priced at it, and what that takes out of the enqueues
    before the last counts against the gloo CPU taken out of the backward."""
    launches = [j for j, op in enumerate(ops) if op.kind == "launch" and op.task in coll_ids]
    if len(launches) < 2:
        return ops, 0.0
    mates = [r for r, h in hosts.items() if h == hosts[ref]]
    if len(mates) * team < cores:
        return ops, 0.0
    cpu = [overlap_cpu_us(sidecars.get(r)) for r in mates]
    if any(c is None for c in cpu):
        return ops, 0.0
    lost = sum(cpu) / len(cpu) * scale
    out = list(ops)
    if enqueue_us is not None and lost > 0:
        for j in launches:
            out[j] = ops[j].model_copy(update={"dur_us": min(ops[j].dur_us, enqueue_us)})
    cuts = [ops[j].dur_us - out[j].dur_us for j in launches]    # what each enqueue lost
    in_enqueues = sum(cuts)
    lost -= sum(cuts[:-1])
    section = [j for j in range(launches[0] + 1, launches[-1])
               if ops[j].kind == "cpu" and ops[j].phase == "backward"]
    total = sum(ops[j].dur_us for j in section)
    if lost <= 0 or total <= 0:
        return out, in_enqueues
    if lost > 0.5 * total:
        warnings.append(f"the gloo threads' CPU during backward ({lost:.0f} µs a step) is over "
                        f"half the backward time between the enqueues ({total:.0f} µs): only "
                        "half is taken out as the training thread's preemption")
        lost = 0.5 * total
    f = 1.0 - lost / total
    for j in section:
        out[j] = ops[j].scaled(f)
    return out, lost + in_enqueues
