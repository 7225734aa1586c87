"""What a DDP demo run's processes and the whole machine used over a span, from the kernel:
each thread's CPU, run-queue wait and timeslices (``/proc/self/task/<tid>/schedstat``) and
the machine's busy and stolen CPU (``/proc/stat``), read by :mod:`demo.ddp_job` around its
timed and profiled steps and by :mod:`demo.ddp_load` to tell outside load."""
from __future__ import annotations

import os
import time


def thread_stats() -> dict[int, tuple[str, int, int, int]]:
    """Per thread of this process: (name, CPU ns, runqueue wait ns, timeslices), from the
    kernel's ``/proc/self/task/<tid>/schedstat`` (its three fields; empty where the kernel has
    no schedstat). A timeslice is one run on a CPU: each wake-up of a thread that blocks
    (gloo's threads, between messages) starts one."""
    out = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu_ns, wait_ns, slices = (int(x) for x in f.read().split()[:3])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (name, cpu_ns, wait_ns, slices)
    return out


def machine_stat() -> tuple[float, float, float] | None:
    """``(wall µs, busy µs, steal µs)`` of the whole machine so far: the wall clock
    (``perf_counter``) and the kernel's ``/proc/stat`` CPU line, busy being every core's
    user, nice, system, irq, softirq and steal time (steal: a virtual CPU that wanted to run
    while the hypervisor ran another guest); None where the kernel has no ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(vals) < 8:
        return None
    tick = 1e6 / os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = vals
    return (time.perf_counter() * 1e6, (user + nice + system + irq + softirq + steal) * tick,
            steal * tick)


def machine_delta(before, after) -> dict:
    """The machine's CPU between two :func:`machine_stat` readings: ``wall_us``, ``busy_us``
    (every core's), ``steal_us`` and ``cores`` (``os.cpu_count()``); empty without them."""
    if before is None or after is None:
        return {}
    return {"wall_us": after[0] - before[0], "busy_us": after[1] - before[1],
            "steal_us": after[2] - before[2], "cores": os.cpu_count() or 1}


def thread_deltas(before: dict, after: dict, main_tid: int) -> list[dict]:
    """What each thread used between two :func:`thread_stats` (µs, timeslices); ``main``
    marks the training thread."""
    rows = []
    for tid, (name, cpu, wait, slices) in after.items():
        _, c0, w0, s0 = before.get(tid, (name, 0, 0, 0))
        rows.append({"tid": tid, "name": name, "main": tid == main_tid,
                     "cpu_us": (cpu - c0) / 1e3, "runqueue_us": (wait - w0) / 1e3,
                     "timeslices": slices - s0})
    return rows
