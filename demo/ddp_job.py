"""A real DistributedDataParallel job on the CPU: ranks with the gloo backend, one process each.

The model is an MLP of ``depth`` square ``Linear`` layers whose gradients fill several DDP
buckets. Each rank trains on fixed random tensors with one intra-op thread
(``torch.set_num_threads(1)``), so a rank is one CPU consumer plus gloo's worker thread.

One group of ranks (forked where the platform allows, else spawned) runs a *plan*: a list of :class:`Run` settings, each with a fresh
DDP module (its own ``bucket_cap_mb``), so start-up (imports, rendezvous) is paid once. A run is
either profiled (``torch.profiler``, CPU activities, one Kineto trace per rank, and a capture
sidecar per rank through :class:`calibration.capture.Capture`'s DDP record when available) or
timed (``time.perf_counter`` at each step start on every rank, no profiler).

What the settings mean:

* ``straggler_ms`` on ``straggler_rank``: that much extra busy work in that rank's forward,
  ``straggler_ms`` of wall-clock time spinning on ``time.perf_counter`` (the thread keeps a
  core busy for that long, whatever else runs);
* ``barrier``: ``dist.barrier()`` before backward; its duration on each rank is the rank's wait
  for the last to arrive (arrival skew), recorded per step.

Used by ``stepsim demo --ddp`` (:mod:`demo.ddp`) and by the tests.
"""
from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stepsim.calibration.cold_capture import COLD_PAUSES_MS, COLD_ROUNDS, cold_row, spin  # noqa: F401
from stepsim.calibration.ddp_meter import BucketMeter, other_threads
from stepsim.demo.ddp_stats import (machine_delta, machine_stat, thread_deltas,  # noqa: F401
                                    thread_stats)

WIDTH, DEPTH, BATCH = 512, 8, 64
"""The MLP: ``DEPTH`` layers of ``WIDTH``² float32 weights (1 MiB each) plus biases."""


@dataclass(frozen=True)
class Run:
    """One setting of the job, run for ``steps`` measured steps after ``warmup`` steps.

    ``bucket_cap_mb`` None uses DDP's defaults (25 MiB, first bucket 1 MiB)."""

    label: str
    bucket_cap_mb: float | None = None
    straggler_rank: int = 1
    straggler_ms: float = 0.0
    barrier: bool = False
    no_sync: bool = False
    """Forward and backward under ``DistributedDataParallel.no_sync()``: no all-reduce, so the
    backward's CPU with no collective beside it (``bench/ddp_overlap_cpu.py``)."""
    steps: int = 12
    warmup: int = 3
    profile_dir: str | None = None


@dataclass
class RunResult:
    """What one rank measured in one run (times in µs)."""

    label: str
    rank: int
    step_starts_us: list[float] = field(default_factory=list)
    barrier_us: list[float] = field(default_factory=list)
    phases: list[list[float]] = field(default_factory=list)
    """Per step: wall instants (µs, ``perf_counter``) of the forward's end, backward's start
    (after the barrier, if any), the last gradient's hook (backward's compute done: what
    follows is the wait for the outstanding all-reduces), backward's end and the optimizer's
    end, then the training thread's CPU (µs, ``thread_time``) at the step's start and at the
    same five points."""
    buckets: dict = field(default_factory=dict)
    threads: list[dict] = field(default_factory=list)
    machine: dict = field(default_factory=dict)
    """The whole machine's CPU over the same span as ``threads`` (:func:`machine_delta`)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_mlp(width: int = WIDTH, depth: int = DEPTH):
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def _train(rank: int, run: Run, width: int, depth: int) -> RunResult:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(build_mlp(width, depth), bucket_cap_mb=run.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(BATCH, width, generator=g), torch.randn(BATCH, width, generator=g)
    res = RunResult(run.label, rank)
    pc, tt = time.perf_counter, time.thread_time
    grad_at = [0.0, 0.0]     # the last gradient hook's (wall, thread CPU) of the step

    def _grad_mark(grad):
        grad_at[0], grad_at[1] = pc(), tt()

    hooks = [p.register_hook(_grad_mark) for p in model.module.parameters() if p.requires_grad]

    def step(pause_ms: float = 0.0, held_ms: float | None = None) -> list[float]:
        # held_ms: the barrier probe's step (a barrier, the last rank spinning held_ms first)
        t0, c0 = pc(), tt()
        res.step_starts_us.append(t0 * 1e6)
        quiet = model.no_sync() if run.no_sync else contextlib.nullcontext()
        quiet.__enter__()
        with torch.profiler.record_function("forward"):
            out = model(x)
            if run.straggler_ms and rank == run.straggler_rank:
                spin(run.straggler_ms)
            if pause_ms:       # the cold-resume probe's pause, on every rank (no skew)
                spin(pause_ms)
            if held_ms and rank == dist.get_world_size() - 1:
                spin(held_ms)
            loss = torch.nn.functional.mse_loss(out, y)
        t1, c1 = pc(), tt()
        if held_ms is not None:
            dist.barrier()
        elif run.barrier:
            b0 = time.perf_counter()
            dist.barrier()
            res.barrier_us.append((time.perf_counter() - b0) * 1e6)
        t2, c2 = pc(), tt()
        with torch.profiler.record_function("backward"):
            loss.backward()
        quiet.__exit__(None, None, None)
        t3, c3 = pc(), tt()
        with torch.profiler.record_function("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        t4, c4 = pc(), tt()
        res.phases.append([v * 1e6 for v in (t1, t2, grad_at[0], t3, t4,
                                             c0, c1, c2, grad_at[1], c3, c4)])
        return res.phases[-1]

    for _ in range(run.warmup):
        step()
    res.step_starts_us.clear()
    res.barrier_us.clear()
    res.phases.clear()
    if run.profile_dir:
        before, after, m0, m1 = _profiled(rank, run, model, step)
    else:
        before, m0 = thread_stats(), machine_stat()
        for _ in range(run.steps):
            step()
        dist.barrier()
        res.step_starts_us.append(time.perf_counter() * 1e6)
        after, m1 = thread_stats(), machine_stat()
    res.threads = thread_deltas(before, after, threading.get_native_id())
    res.machine = machine_delta(m0, m1)
    for h in hooks:
        h.remove()
    data = model._get_ddp_logging_data()
    res.buckets = {k: data.get(k) for k in ("bucket_sizes", "rebuilt_bucket_sizes",
                                             "rebuilt_per_bucket_param_indices",
                                             "bucket_cap_bytes")}
    return res


UNPROFILED_STEPS = 8
"""Unprofiled steps timed right before and again right after the profiled window of a
capture: the profiler's own cost is measured against them
(:mod:`calibration.profiler_overhead`), and so is the host's speed in a replicate against the
capture (:func:`calibration.profiler_overhead.unprofiled_views`; 8, not 4: from 4 + 4, one
replicate of a demo of 2026-12-05 04:12 read 1.21 where its two others read 0.92-0.95;
about 0.7 s more a demo)."""


def cold_probe(step, pauses_ms=COLD_PAUSES_MS, rounds: int = COLD_ROUNDS) -> list[dict]:
    """The sidecar's ``ddp.cold_probe`` (:class:`calibration.sidecar_ddp.ColdProbe`): per
    pause, the backward's thread CPU (µs, from its start to the last gradient's hook; median)
    in ``rounds`` steps where every rank spins the pause at its forward's end, and in as many
    without, alternated; and the optimizer's thread CPU in the same steps. ``step(pause_ms)``
    runs one training step and returns its :attr:`RunResult.phases` row."""
    out = []
    for pause in pauses_ms:
        got = {0.0: [], pause: []}
        for _ in range(rounds):
            for p in got:
                row = step(p)
                got[p].append((row[8] - row[7], row[10] - row[9]))
        out.append(cold_row(pause, got[0.0], got[pause]))
    return out


def barrier_probe(step, waits_ms=(0.0, COLD_PAUSES_MS[-1]),
                  rounds: int = COLD_ROUNDS) -> list[dict]:
    """The sidecar's ``ddp.barrier_probe`` (:class:`calibration.sidecar_ddp.BarrierProbe`):
    per wait, this rank's time in ``dist.barrier()`` before backward (µs, median) in
    ``rounds`` consecutive steps (after one more) where the last rank spins the wait at its
    forward's end: a run of such steps, as a straggler's job runs them (one such step between
    steps without the wait left the barrier 0.5 ms after 40 ms where a run of them took
    1.1-2.3 ms: 2026-12-06). The last rank's time is the barrier's release after the others
    waited that long (:mod:`calibration.gloo_barrier`). ``step(0, held_ms)`` runs one."""
    import statistics

    out = []
    for w in waits_ms:
        got = [step(0.0, w) for _ in range(rounds + 1)][1:]
        out.append({"wait_us": w * 1e3, "barrier_us": statistics.median(
            row[1] - row[0] for row in got), "steps": rounds})
    return out


def _profiled(rank: int, run: Run, model, step) -> tuple[dict, dict, tuple | None,
                                                          tuple | None]:
    """Profile ``run.steps`` steps (after one profiler warm-up step), between
    :data:`UNPROFILED_STEPS` unprofiled steps before and after; every step's wall and
    main-thread CPU time goes into the sidecar (``steps``, with ``profiled`` and
    ``profiler_on``). Returns the :func:`thread_stats` and :func:`machine_stat` before and
    after the profiled steps."""
    from torch.profiler import ProfilerActivity, profile, schedule

    from stepsim.calibration.window import clocks, step_row

    from stepsim.simcore.atomic import atomic_path, make_folder

    out = Path(run.profile_dir)
    make_folder(out)
    rows: list[dict] = []

    meter = BucketMeter(model, threading.get_native_id())

    def timed(profiled: bool, profiler_on: bool) -> None:
        t0 = clocks()
        meter.on = profiled
        step()
        meter.end_step()
        rows.append(step_row(t0, t0, clocks(), profiled, profiler_on))

    start_us = clocks()[0]   # the capture's id with the host's name (calibration.capture_ids)
    for _ in range(UNPROFILED_STEPS):
        timed(False, False)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=run.steps, repeat=1)) as prof:
        for k in range(run.steps + 1):
            if k == 1:
                before, m0 = thread_stats(), machine_stat()
            timed(k >= 1, True)
            prof.step()
        after, m1 = thread_stats(), machine_stat()
    for _ in range(UNPROFILED_STEPS):
        timed(False, False)
    cold = cold_probe(step)
    held = barrier_probe(step)
    with atomic_path(out / f"rank{rank}.json") as tmp:   # a reader never sees half a trace
        prof.export_chrome_trace(str(tmp))
    others = other_threads(before, after, threading.get_native_id())
    _write_sidecar(out, model, rank, others, rows, meter.rows(), machine_delta(m0, m1),
                   cold, held, start_us)
    return before, after, m0, m1


def _write_sidecar(out: Path, model, rank: int, threads: list[dict], steps: list[dict],
                   bucket_cpu: list[dict] = (), machine: dict | None = None,
                   cold: list[dict] = (), held: list[dict] = (),
                   start_us: float | None = None) -> None:
    """The DDP record of :mod:`calibration.ddp_info`, as a capture sidecar beside the trace,
    with the CPU time over the profiled steps of the process's threads other than the
    training thread (``threads``, empty where the kernel has no per-thread schedstat) and the
    step rows (``steps``: :func:`calibration.window.step_row`) and the machine's busy CPU over
    the profiled steps (``machine``: :func:`calibration.machine_stat.machine_delta`). The host's
    name and ``start_us`` (the monotonic instant before the loop's first step, µs, written as
    ``iter_start_us`` as the harness writes its loader's) name the capture
    (:mod:`calibration.capture_ids`), so a model records which captures it was calibrated
    on and ``validate`` tells a replay of them from a fresh run."""
    import json
    import socket

    import torch

    from stepsim.calibration.ddp_info import ddp_record
    from stepsim.simcore.atomic import write_atomic

    side = {"stepsim_sidecar": 1, "torch_version": torch.__version__, "device": "cpu",
            "host_cores": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
            "torch_num_threads": torch.get_num_threads(), "capture": "harness",
            "loader": {"num_workers": 0}, "steps": steps, "ddp": ddp_record(model),
            "host_name": socket.gethostname()}
    if start_us is not None:
        side["iter_start_us"] = start_us
    if machine:
        side["machine"] = machine
    if side["ddp"] is not None:
        side["ddp"]["threads"] = threads
        side["ddp"]["bucket_cpu"] = list(bucket_cpu)
        side["ddp"]["cold_probe"] = list(cold)
        side["ddp"]["barrier_probe"] = list(held)
    write_atomic(out / f"rank{rank}.sidecar.json", json.dumps(side).encode())


def _worker(rank: int, world: int, port: int, plan: list[Run], width: int, depth: int,
            results) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out = [asdict(_train(rank, run, width, depth)) for run in plan]
        dist.barrier()
    finally:
        dist.destroy_process_group()
    results.put((rank, out))


def run_plan(plan: list[Run], world: int = 2, width: int = WIDTH, depth: int = DEPTH,
             timeout_s: float = 600) -> dict[str, list[dict]]:
    """Spawn ``world`` gloo ranks on this host and run ``plan`` in order.

    Returns, per run label, each rank's :class:`RunResult` as a dict, in rank order.

    Raises:
        RuntimeError: a rank failed or the plan did not finish within ``timeout_s``.
    """
    import torch.multiprocessing as mp

    import queue

    # fork where the platform has it: the ranks start in a fraction of a spawn's time (no
    # re-import of torch), as torch.multiprocessing allows for CPU-only work
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    if method == "fork":
        # DDP's constructor imports torch._dynamo (seconds); once here, not once per rank
        import torch._dynamo  # noqa: F401
    ctx = mp.get_context(method)
    q = ctx.Queue()
    procs = mp.start_processes(_worker, args=(world, free_port(), plan, width, depth, q),
                               nprocs=world, join=False, start_method=method)
    deadline = time.monotonic() + timeout_s
    got: dict[int, list[dict]] = {}
    try:
        while len(got) < world:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the DDP job did not finish within {timeout_s:.0f} s")
            try:
                rank, out = q.get(timeout=1.0)
                got[rank] = out
            except queue.Empty:
                procs.join(timeout=0)      # raises if a rank failed
        while not procs.join(timeout=5.0):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the DDP job did not exit within {timeout_s:.0f} s")
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.kill()
    return {run.label: [got[r][i] for r in range(world)] for i, run in enumerate(plan)}
