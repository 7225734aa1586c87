"""What one DDP bucket's all-reduce enqueue costs the training thread, in CPU and in waiting
for a core (issue 12: the price a what-if puts on each extra bucket).

The DDP demo's job (:mod:`demo.ddp_job`'s MLP: 2 gloo ranks, one intra-op thread each, 2
cores) runs with a comm hook that does what DDP's default does for a bucket (one
``dist.all_reduce(async_op=True)`` of its buffer; the hook's result is not divided by the world
size, which changes no timing) and reads, around that call, the training thread's wall
(``perf_counter``), CPU (``thread_time``) and run-queue wait (``/proc/thread-self/schedstat``,
the kernel's). Settings, interleaved per round: DDP's default buckets (1 + 7 MiB) and
``bucket_cap_mb=1`` (8 x 1 MiB), each with the profiler off and on (``torch.profiler``, CPU
activities, ``record_shapes``, as a capture runs it). Per setting and bucket position it prints
the medians over every rank-step of the enqueue's wall, CPU and run-queue wait (µs), the
means of the three, and the share of enqueues that waited more than 50 µs: where an
enqueue's wall beyond its CPU is a wait for a core (the woken gloo thread taking it, which
the simulator prices itself), a calibration that prices each enqueue at its captured wall
charges every rebuilt bucket that wait again.

``python bench/ddp_enqueue_cpu.py [ROUNDS] [STEPS]`` (default 3 rounds of 20 steps, about
30 s), under the timing lock.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from stepsim.demo.ddp_job import BATCH, WIDTH, build_mlp, free_port

SETTINGS = [("default", None, False), ("bucket_cap_mb=1", 1.0, False),
            ("default, profiled", None, True), ("bucket_cap_mb=1, profiled", 1.0, True)]


def _runq_us() -> float:
    """The calling thread's run-queue wait so far (µs; schedstat's second field, ns)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e3


def _rank(rank: int, port: int, rounds: int, steps: int, q) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)
    rows = []
    for k in range(rounds):
        for label, cap, profiled in SETTINGS:
            model = DDP(build_mlp(), bucket_cap_mb=cap)
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            rec: list[tuple] = []

            def hook(_state, bucket, rec=rec):
                w0, c0, q0 = time.perf_counter(), time.thread_time(), _runq_us()
                fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
                w1, c1, q1 = time.perf_counter(), time.thread_time(), _runq_us()
                rec.append((bucket.index(), (w1 - w0) * 1e6, (c1 - c0) * 1e6, q1 - q0))
                return fut.then(lambda f: f.value()[0])

            model.register_comm_hook(None, hook)

            def step():
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for _ in range(4):      # warm-up; DDP rebuilds its buckets after the first step
                step()
            dist.barrier()
            rec.clear()
            if profiled:
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
                    for _ in range(steps):
                        step()
            else:
                for _ in range(steps):
                    step()
            dist.barrier()
            rows += [(label, k, rank, *r) for r in rec]
    dist.destroy_process_group()
    q.put(rows)


def main(rounds: int = 3, steps: int = 20) -> None:
    import torch.multiprocessing as mp

    import torch._dynamo  # noqa: F401  (DDP imports it; once, before the fork)

    load = os.getloadavg()[0]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = mp.start_processes(_rank, args=(free_port(), rounds, steps, q), nprocs=2,
                               join=False, start_method="fork")
    rows = q.get(timeout=600) + q.get(timeout=600)
    procs.join()
    print(f"{rounds} rounds x {steps} steps x 2 ranks, load {load:.1f} -> "
          f"{os.getloadavg()[0]:.1f}; per bucket (0 = reduced first): medians, µs")
    print(f"{'setting':28s}{'bucket':>7s}{'n':>5s}{'wall':>8s}{'cpu':>8s}{'runq':>8s}"
          f"{'wall-cpu':>9s}{'mean wall':>10s}{'mean cpu':>9s}{'mean runq':>10s}{'waited':>8s}")
    for label, _, _ in SETTINGS:
        got = [r for r in rows if r[0] == label]
        for b in sorted({r[3] for r in got}):
            a = np.array([r[4:] for r in got if r[3] == b])
            print(f"{label:28s}{b:7d}{len(a):5d}{np.median(a[:, 0]):8.0f}"
                  f"{np.median(a[:, 1]):8.0f}{np.median(a[:, 2]):8.0f}"
                  f"{np.median(a[:, 0] - a[:, 1]):9.0f}{a[:, 0].mean():10.0f}{a[:, 1].mean():9.0f}"
                  f"{a[:, 2].mean():10.0f}"
                  f"{np.mean(a[:, 2] > 50):8.2f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
