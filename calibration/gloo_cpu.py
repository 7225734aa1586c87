"""The host CPU a gloo collective costs each rank, from the capture's own thread CPU times.

Gloo reduces CPU tensors on the host: its worker threads (``pt_gloo_runloop``, the ones the
trace's ``gloo:*`` events run on) send and reduce, its TCP loop thread (``gloo_tcp_loop``)
receives. On a host whose cores the ranks share, that work competes with the training
threads, so a collective overlapped with backward is not free. The job records every
non-training thread's CPU time over the profiled steps in the capture sidecar
(``ddp.threads``, from the kernel's per-thread schedstat: ``measured``).

The cost of one collective on one rank is ``a + k × bytes`` (µs): ``a`` per collective (the
wake-ups, messages and bookkeeping of one operation, whatever its size), ``k`` per byte. Each
worker thread gives one equation: its CPU time = (collectives it ran) × a + (their bytes) × k,
the barrier's bytes being 0. Least squares over every rank's worker threads gives ``a`` and
the workers' ``k``; they are separable when the threads ran different mixes of sizes (in the
demo's capture, one thread runs the 1 MiB bucket and the other the 7 MiB one). The TCP loop
thread (every other thread of the process) reads what arrives, so its time is taken per byte:
it adds its CPU over the collectives' bytes to ``k`` (``inferred``: it serves every
collective, and the trace does not say which).

The simulator takes the cost as ``host_cpu_us + host_cpu_fraction × dur_us`` of the
collective's transfer ``dur_us = latency_us + ring bytes / bus_gbps``, so
``host_cpu_fraction = k × bus_gbps × 1e3 / ring factor`` and
``host_cpu_us = a − host_cpu_fraction × latency_us`` (a collective of ``b`` bytes costs
``a + k b`` again). When the sizes cannot be separated, ``host_cpu_us`` is 0 and the fraction
is the backend's CPU over the transfers' time; without thread times, the fraction is 1
(``assumed``: one core busy for the whole transfer).
"""
from __future__ import annotations

import numpy as np

from stepsim.models.ddp import ring_bus_bytes
from stepsim.models.params import DeviceTask

__all__ = ["host_cpu_cost"]

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
               "long int": 8, "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def _coll_bytes(c) -> float:
    return float(c.numel * DTYPE_BYTES.get(c.dtype, 4)) if c.numel else 0.0


def host_cpu_cost(tasks: list[DeviceTask], ranks: dict, sidecars: dict, latency_us: float,
                  bus_gbps: float | None, world: int, warnings: list[str]
                  ) -> tuple[float, float, str]:
    """``(host_cpu_us, host_cpu_fraction, source)`` of the model's collectives (see the
    module docstring). ``ranks`` are :class:`calibration.gloo._Rank` by rank number with their
    collectives (``colls``: worker thread ``tid`` and size), ``sidecars`` the capture sidecars
    by rank."""
    rows, rhs, per_step = [], [], []
    other_us = other_bytes = 0.0
    for r, rk in ranks.items():
        side = sidecars.get(r)
        threads = getattr(getattr(side, "ddp", None), "threads", None) or []
        if not threads or not rk.colls:
            continue
        cpu = {t.tid: t.cpu_us for t in threads}
        workers = sorted({c.tid for c in rk.colls if c.tid in cpu})
        for w in workers:
            mine = [c for c in rk.colls if c.tid == w]
            rows.append([len(mine), sum(_coll_bytes(c) for c in mine)])
            rhs.append(cpu[w])
        other_us += sum(v for t, v in cpu.items() if t not in workers)
        other_bytes += sum(_coll_bytes(c) for c in rk.colls)
        per_step.append(sum(cpu.values()) / len(rk.colls))   # µs per collective
    spent = sum(t.dur_us for t in tasks)
    if not rows or spent <= 0:
        warnings.append("the backend's thread CPU times are not in the capture sidecars: each "
                        "collective is assumed to keep one host core busy for its transfer "
                        "(comm.host_cpu_fraction = 1)")
        return 0.0, 1.0, "assumed"
    A, y = np.array(rows, float), np.array(rhs, float)
    rf = ring_bus_bytes(1.0, world)
    if bus_gbps and rf > 0 and np.linalg.matrix_rank(A) == 2:
        (a, k), *_ = np.linalg.lstsq(A, y, rcond=None)
        if a >= 0 and k >= 0 and other_bytes > 0:
            k += other_us / other_bytes         # the TCP loop's receives: per byte
            frac = float(k) * bus_gbps * 1e3 / rf
            return max(float(a) - frac * latency_us, 0.0), frac, "measured"
    # one equation's worth: the CPU per collective over its mean transfer
    frac = float(np.mean(per_step)) / (spent / len(tasks))
    warnings.append("the backend's CPU could not be split into a per-collective and a per-byte "
                    "part (its worker threads ran the same mix of sizes): it is taken in "
                    "proportion to each collective's transfer time")
    return 0.0, frac, "measured"
