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

The TCP loop thread is most of that CPU (60-70 % in the DDP demo) and it is per byte,
measured: with the training threads busy (as in backward), 8 all-reduces of 1 MiB cost it
2.8-3.3 ms and one of 8 MiB 2.7-3.2 ms, whether the 1 MiB ones were enqueued 1, 2 or 5 ms apart
(a train or isolated: the same CPU; 2026-12-05, ``bench/gloo_collective_cpu.py``, 25 rounds,
medians, load 2.5-3.4). So ``a`` is the worker threads' per-collective CPU, where the trace
names which worker ran which collective and their mixes of sizes separate it (the demo's
captures: 110-240 µs, where the demo's timed runs of 1, 2 and 8 all-reduces of the same 8 MiB
a step, 4.28, 5.06 and 5.88 ms of backend CPU per rank, medians of 40 demos, give 197 µs by
least squares). When the job marked each bucket's readiness (``ddp.bucket_cpu``: every
backend thread's CPU from one bucket's readiness to the next's, summed over the profiled
steps), ``k`` is fitted to those per-bucket figures through that ``a`` (``measured``), which
keeps the capture's per-step total; without the workers' ``a``, ``a`` and ``k`` are both
fitted to the marks (the buckets' different sizes, DDP's 1 MiB first bucket and the rest,
separate them). The marks alone gave ``a`` 0.15-0.68 ms (the line through two sizes moves
``a`` by 7/6 of the 1 MiB bucket's error, and that bucket, reduced during backward with the
ranks' arrival skew, read 0.8-1.1 ms where a 1 MiB all-reduce alone costs 0.65-0.8), which
priced bucket_cap_mb=1's 8 collectives at 8.75 ms a rank-step against 5.88 measured.

The model keeps ``a`` as ``comm.host_cpu_us`` and ``k`` per MiB as ``comm.host_cpu_us_per_mb``
(``measured``). When the sizes cannot be separated, ``a`` is 0 and ``k`` is the backend's CPU
over the collectives' bytes; without thread times, each collective is assumed to keep one core
busy for its transfer (``a = latency_us``, ``k`` the time a MiB takes at ``bus_gbps``:
``assumed``).
"""
from __future__ import annotations

import numpy as np

from stepsim.models.ddp import ring_bus_bytes

__all__ = ["host_cpu_cost", "gloo_own_cost", "DTYPE_BYTES", "FLOOR_NOTE"]

MIB = 2 ** 20

FLOOR_NOTE = "transfer_floor_us"
"""The model's note of the marks' own per-collective intercept (µs), where ``a`` is the
worker threads': the transfer line's floor (:func:`calibration.gloo_transfer.transfer_fit`).
A collective's span holds more per collective than its CPU work: its hops wait for the peer's
threads to wake (the DDP demo's 6 all-reduces of 1 MiB after backward took 6.6 ms where its
7 MiB one took about 5), which the one clean size cannot measure and the marks' intercept
(0.25-0.68 ms) carried before ``a`` was the workers' (inferred)."""

DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4,
               "long int": 8, "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def _coll_bytes(c) -> float:
    return float(c.numel * DTYPE_BYTES.get(c.dtype, 4)) if c.numel else 0.0


def host_cpu_cost(ranks: dict, sidecars: dict, latency_us: float, bus_gbps: float | None,
                  world: int, warnings: list[str], notes: dict | None = None
                  ) -> tuple[float, float, str]:
    """``(host_cpu_us, host_cpu_us_per_mb, source)`` of the model's collectives (see the
    module docstring). ``ranks`` are :class:`calibration.gloo_steps.GlooRank` by rank number
    with their collectives (``colls``: worker thread ``tid`` and size), ``sidecars`` the
    capture sidecars by rank. Where ``a`` is the worker threads' (:func:`_worker_fit`),
    ``notes`` (the model's ``meta.notes``, when given) gets it as ``host_cpu_worker_us``."""
    said = _team_warning(sidecars)
    warnings += [said] if said else []
    rows, rhs, other_us, total_us, total_bytes = _thread_rows(ranks, sidecars)
    worker = _worker_fit(rows, rhs)
    fit = _bucket_fit(ranks, sidecars, a_us=worker[0] if worker else None)
    if fit is not None:
        own = _bucket_fit(ranks, sidecars)
        if worker is not None and notes is not None:
            notes["host_cpu_worker_us"] = worker[0]
            if own is not None:
                notes[FLOOR_NOTE] = own[0]
        return fit[0], fit[1], "measured"
    if not rows or total_bytes <= 0:
        warnings.append("the backend's thread CPU times are not in the capture sidecars: each "
                        "collective is assumed to keep one host core busy for its transfer")
        per_mb = ring_bus_bytes(MIB, world) / (bus_gbps * 1e3) if bus_gbps else 0.0
        return latency_us, per_mb, "assumed"
    if worker is not None:
        return worker[0], worker[1] + other_us / (total_bytes / MIB), "measured"
    warnings.append("the backend's CPU could not be split into a per-collective and a per-byte "
                    "part (its worker threads ran the same mix of sizes): it is taken per byte")
    return 0.0, total_us / (total_bytes / MIB), "measured"


GLOO_THREAD_PREFIXES = ("gloo", "pt_gloo", "pt_tcpstore")
"""Names of the backend's own threads (gloo's TCP loop and workers, the c10d store's)."""


def _team_warning(sidecars: dict) -> str | None:
    """One sentence when a rank ran more than one intra-op thread and its sidecar has
    ``ddp.threads``: the capture counts every thread but the training thread as the
    backend's, so torch's OpenMP team is in the measured gloo CPU (a user's 2-rank MLP at
    torch's default 2 threads a rank, 2026-12-06: ``comm.host_cpu_us_per_mb`` 2424 µs against
    730 at one thread, one of its threads named like the training thread using 197 ms over the
    profiled steps against gloo's 35). None otherwise."""
    team, other_ms = 1, 0.0
    for side in sidecars.values():
        threads = getattr(getattr(side, "ddp", None), "threads", None) or []
        n = getattr(side, "torch_num_threads", None) or 1
        if threads and n > 1:
            team = max(team, n)
            other_ms += sum(t.cpu_us for t in threads if t.name and not
                            t.name.startswith(GLOO_THREAD_PREFIXES)) / 1e3
    if team < 2:
        return None
    named = (f" ({other_ms:.1f} ms over the profiled steps in threads not named as gloo's)"
             if other_ms > 0 else "")
    return (f"the ranks ran {team} intra-op threads each: the capture counts every thread but "
            f"the training thread as the backend's (ddp.threads, ddp.bucket_cpu), so torch's "
            f"OpenMP team{named} is in comm.host_cpu_us and comm.host_cpu_us_per_mb, which then "
            "overstate gloo's CPU; to measure gloo's alone, capture with "
            "torch.set_num_threads(1) in each rank")


def gloo_own_cost(ranks: dict, sidecars: dict) -> tuple[float, float] | None:
    """``(host_cpu_us, host_cpu_us_per_mb)`` of gloo's own threads alone (those named
    :data:`GLOO_THREAD_PREFIXES`, measured), as :func:`host_cpu_cost` fits them from the
    threads' CPU where the bucket marks hold every non-training thread (torch's intra-op team
    too, :func:`_team_warning`): ``a`` and ``k`` of the workers, and the TCP loop's CPU per
    MiB added to ``k``; ``a`` 0 and ``k`` the whole over the bytes where the workers' mixes do
    not separate them. fresh8's 2-rank job at 2 threads a rank: 9,853 µs a MiB with the team,
    this 5.1-11.5 ms of gloo CPU a step over 11.9 MB; at one thread 587 µs a MiB. None without
    thread times."""
    rows, rhs, other_us, total_us, total_bytes = _thread_rows(
        ranks, sidecars, lambda t: bool(t.name) and t.name.startswith(GLOO_THREAD_PREFIXES))
    if not rows or total_bytes <= 0:
        return None
    worker = _worker_fit(rows, rhs)
    if worker is None:
        return 0.0, total_us / (total_bytes / MIB)
    return worker[0], worker[1] + other_us / (total_bytes / MIB)


def _thread_rows(ranks: dict, sidecars: dict, keep=None):
    """Per worker thread of every rank, ``[collectives, MiB]`` and its CPU (µs, the sidecar's
    ``ddp.threads``), with the other backend threads' CPU, all of it, and the collectives'
    bytes; only the threads ``keep(thread)`` holds, where given."""
    rows, rhs = [], []
    total_us = other_us = total_bytes = 0.0
    for r, rk in ranks.items():
        side = sidecars.get(r)
        threads = getattr(getattr(side, "ddp", None), "threads", None) or []
        threads = [t for t in threads if keep is None or keep(t)]
        if not threads or not rk.colls:
            continue
        cpu = {t.tid: t.cpu_us for t in threads}
        workers = sorted({c.tid for c in rk.colls if c.tid in cpu})
        for w in workers:
            mine = [c for c in rk.colls if c.tid == w]
            rows.append([len(mine), sum(_coll_bytes(c) for c in mine) / MIB])
            rhs.append(cpu[w])
        other_us += sum(v for t, v in cpu.items() if t not in workers)
        total_us += sum(cpu.values())
        total_bytes += sum(_coll_bytes(c) for c in rk.colls)
    return rows, rhs, other_us, total_us, total_bytes


def _worker_fit(rows: list, rhs: list) -> tuple[float, float] | None:
    """``(a, k)``: the worker threads' CPU per collective (µs) and per MiB, least squares
    over the threads; None where their mixes of sizes do not separate them or the line is
    not ``a, k >= 0``."""
    if not rows or np.linalg.matrix_rank(np.array(rows, float)) < 2:
        return None
    (a, k), *_ = np.linalg.lstsq(np.array(rows, float), np.array(rhs, float), rcond=None)
    return (float(a), float(k)) if a >= 0 and k >= 0 else None


def _bucket_fit(ranks, sidecars: dict, speeds: dict | None = None,
                a_us: float | None = None) -> tuple[float, float] | None:
    """``(a, k)`` fitted to the sidecars' per-bucket backend CPU (``ddp.bucket_cpu``, µs per
    step against MiB; a sidecar's divided by its run's host speed in ``speeds``, by the same
    key, where given); None without them, with a single size, or when the line is not
    ``a, k >= 0``. With ``a_us`` (the worker threads' per-collective CPU) only ``k`` is
    fitted, the line through ``a_us``: ``k = Σ m (c − a) / Σ m²`` over the buckets (``m``
    MiB, ``c`` CPU), one size enough."""
    rows, rhs = [], []
    for r in ranks:
        ddp = getattr(sidecars.get(r), "ddp", None)
        for b in getattr(ddp, "bucket_cpu", None) or []:
            rows.append([1.0, b.bytes / MIB])
            rhs.append(b.cpu_us / b.steps / (speeds or {}).get(r, 1.0))
    if a_us is not None and rows:
        m, c = np.array(rows)[:, 1], np.array(rhs)
        k = float(m @ (c - a_us) / (m @ m)) if m @ m > 0 else -1.0
        return (a_us, k) if k >= 0 else None
    if len({round(x[1], 9) for x in rows}) < 2:
        return None
    (a, k), *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    return (float(a), float(k)) if a >= 0 and k >= 0 else None


def pool_bucket_cpu(model, runs: list[list], speeds: list[float]):
    """``model`` (a gloo job's, calibrated from ``runs[0]``) with ``comm.host_cpu_us`` and
    ``comm.host_cpu_us_per_mb`` fitted over the per-bucket backend CPU of every run: the
    capture and its replicates (``runs``: each run's rank sidecars; ``speeds``: each run's host
    speed against the capture, :func:`calibration.host_noise.replicate_speeds`, which brings
    its CPU times to the capture's speed). One capture's two bucket sizes leave ``a`` noisy
    (the DDP demo's captures alone gave 245 to 678 µs); the replicates are the same setting
    measured again. ``model`` unchanged when any run lacks the marks."""
    if model.meta.sources.get("comm.host_cpu_us") != "measured" or len(runs) < 2:
        return model
    sides, speed = {}, {}
    for k, (run, sp) in enumerate(zip(runs, speeds)):
        for j, side in enumerate(run):
            if not getattr(getattr(side, "ddp", None), "bucket_cpu", None):
                return model
            sides[(k, j)], speed[(k, j)] = side, sp
    fit = _bucket_fit(list(sides), sides, speed, model.meta.notes.get("host_cpu_worker_us"))
    if fit is None:
        return model
    own = _bucket_fit(list(sides), sides, speed) if FLOOR_NOTE in model.meta.notes else fit
    upd = {"host_cpu_us": fit[0], "host_cpu_us_per_mb": fit[1],
           **(_reanchor(model, own[0]) if own is not None else {})}
    comm = model.comm.model_copy(update=upd)
    notes = {**model.meta.notes, "host_cpu_fit_runs": len(runs),
             **({FLOOR_NOTE: own[0]} if own is not None and FLOOR_NOTE in model.meta.notes
                else {})}
    return model.model_copy(update={"comm": comm,
                                    "meta": model.meta.model_copy(update={"notes": notes})})


def _reanchor(model, a_us: float) -> dict:
    """A one-size transfer line that went through the capture's own per-collective CPU
    (:func:`calibration.gloo_transfer.transfer_fit`'s ``floor_us``: ``latency_us`` equal to
    ``host_cpu_us``, or to the marks' own intercept, :data:`FLOOR_NOTE`) moved to go through
    the pooled ``a_us`` instead, keeping its value at
    the last all-reduce's size (the clean one, after backward); empty otherwise."""
    c = model.comm
    sized = [t for t in model.device.streams.get(c.comm_stream, []) if t.bytes]
    floor = model.meta.notes.get(FLOOR_NOTE, c.host_cpu_us)
    if not sized or not c.bus_gbps or c.latency_us <= 0 or c.latency_us != floor:
        return {}
    bus = ring_bus_bytes(sized[-1].bytes, c.world_size)
    value = c.latency_us + bus / (c.bus_gbps * 1e3)
    if not 0 < a_us < value:
        return {}
    return {"latency_us": a_us, "bus_gbps": bus / (value - a_us) / 1e3}
