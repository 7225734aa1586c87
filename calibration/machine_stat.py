"""The whole machine's busy CPU over a span, from the kernel's ``/proc/stat``, beside this
process's own CPU over the same span: what other processes (and a hypervisor's other guests)
used while a capture ran, with no reference run needed.

Read by the capture harness (:class:`calibration.window.Window`, the DDP demo's job) around
its profiled steps into the sidecar's ``machine`` record, and by :mod:`calibration.ddp_runs`
to tell a DDP capture or replicate that ran under outside load: the machine's busy time less
what the run's own processes used is what others used.
"""
from __future__ import annotations

import os
import time

MIN_TICKS = 50
"""Fewest clock ticks (``/proc/stat``'s unit, ``SC_CLK_TCK``: 10 ms) over every core's time
(``cores × wall``) a reading needs to say anything (assumed bound, from the sampling error
below). The kernel charges each tick of a core to what ran at it, so the busy share is a
count of samples, off by up to ``sqrt(p (1 − p) / n)`` for ``n`` ticks: at 50, 0.071 where
the cores were busy half the time, 0.057 at the 0.7-0.8 the tests' 2-rank job kept, under
:data:`models.load_bound.LOAD_WARN`'s 0.10. Measured (2026-12-05 13:12, load average 1.6,
2 cores): that job's 4 profiled steps spanned 49-56 ms (10 ticks, read in whole ticks:
70 and 80 ms busy against 73 ms of its own CPU), its 20 steps 244-266 ms (49 ticks: 340 ms
against 350 ms); the DDP demo's 20 steps of 18-25 ms, 70-100 ticks."""


def machine_stat() -> tuple[float, float, float, float, float] | None:
    """``(wall µs, busy µs, steal µs, process CPU µs, tick µs)`` so far: the wall clock
    (``perf_counter``), the kernel's ``/proc/stat`` CPU line, busy being every core's user,
    nice, system, irq, softirq and steal time (steal: a virtual CPU that wanted to run while
    the hypervisor ran another guest), and this process's CPU (``process_time``, all its
    threads); None where the kernel has no ``/proc/stat``."""
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
            steal * tick, time.process_time() * 1e6, tick)


def machine_delta(before, after) -> dict:
    """The machine's CPU between two :func:`machine_stat` readings: ``wall_us``, ``busy_us``
    (every core's), ``steal_us``, ``cores`` (``os.cpu_count()``: ``/proc/stat`` counts every
    core), ``proc_cpu_us`` (this process's) and ``tick_us`` (``/proc/stat``'s unit); empty
    without them."""
    if before is None or after is None:
        return {}
    out = {"wall_us": after[0] - before[0], "busy_us": after[1] - before[1],
           "steal_us": after[2] - before[2], "cores": os.cpu_count() or 1}
    if len(before) > 4 and len(after) > 4:
        out.update(proc_cpu_us=after[3] - before[3], tick_us=after[4])
    return out


def busy_share(machine: dict | None, own_cpu_us: float) -> float | None:
    """The share of the machine's cores' time other processes were busy over one span:
    ``machine``'s busy CPU (:func:`machine_delta`) less ``own_cpu_us`` (the run's processes'
    CPU over the same span), over ``cores × wall``; None without the record or where the
    span holds fewer than :data:`MIN_TICKS` ticks over its cores (a sampled count that
    short says nothing)."""
    m = machine or {}
    if not m or m.get("wall_us", 0) <= 0 or not m.get("cores"):
        return None
    if m["cores"] * m["wall_us"] < MIN_TICKS * (m.get("tick_us") or 1e4):
        return None
    return max(m["busy_us"] - own_cpu_us, 0.0) / (m["cores"] * m["wall_us"])


def run_busy_share(machines: list[tuple]) -> float | None:
    """:func:`busy_share` of one run of several processes (a DDP job's ranks), each as
    ``(host name, machine record)`` or ``(host name, machine record, other own CPU µs)`` (a
    dict or the sidecar's :class:`calibration.sidecar.MachineCPU`, over its own profiled
    steps; the third: CPU of the rank's own processes the record's ``proc_cpu_us``, its main
    process's alone, leaves out over that span: its DataLoader workers',
    :func:`calibration.outside_load.worker_cpu_us`): per host, the first rank's busy CPU less
    every rank's on that host, each rank's own CPU taken at its rate over its own span (the
    ranks' spans differ by a step's skew at most); the busiest host's share. None where any
    rank lacks the record."""
    ms = [(t[0], t[1] if isinstance(t[1], dict) or t[1] is None else t[1].model_dump(),
           t[2] if len(t) > 2 else 0.0) for t in machines]
    if not ms or any(not m or m.get("proc_cpu_us") is None or m.get("wall_us", 0) <= 0
                     for _, m, _ in ms):
        return None
    hosts: dict = {}
    for h, m, extra in ms:
        hosts.setdefault(h, []).append((m, extra))
    shares = [busy_share(g[0][0], sum((m["proc_cpu_us"] + extra) / m["wall_us"]
                                      for m, extra in g) * g[0][0]["wall_us"])
              for g in hosts.values()]
    return None if any(s is None for s in shares) else max(shares)
