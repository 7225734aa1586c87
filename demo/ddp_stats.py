"""What a DDP demo run's processes and the whole machine used over a span, from the kernel:
each thread's CPU, run-queue wait and timeslices (``/proc/self/task/<tid>/schedstat``) and
the machine's busy and stolen CPU (``/proc/stat``, :mod:`calibration.machine_stat`), read by
:mod:`demo.ddp_job` around its timed and profiled steps and by :mod:`demo.ddp_load` to tell
outside load."""
from __future__ import annotations

import os

from stepsim.calibration.machine_stat import machine_delta, machine_stat  # noqa: F401


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
