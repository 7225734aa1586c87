"""The held rank after its wait: how long until its training thread runs again, and at what
speed (issue 12, the straggler + barrier row).

Runs the DDP demo's job (its MLP, 2 gloo ranks, one intra-op thread each) in its own loop,
with a straggler of ``W`` ms spinning at the end of rank 1's forward, ``W`` in 0, 10, 40, with
and without ``dist.barrier()`` before backward, the settings interleaved in each round (8
steps each after 2 warm-up steps). Per step and rank it reads, at the forward's end, at the
barrier's return, at the last gradient's hook and at backward's end, the wall clock
(``perf_counter``, one clock for both processes), the training thread's schedstat (CPU,
run-queue wait, timeslices: ``/proc/thread-self/schedstat``), at the barrier's return every
thread's schedstat of the process and the host's runnable threads (``/proc/loadavg``'s
fourth field, this reader included), and at the last hook every thread's schedstat again.

Prints per setting and rank (median over the steps, ms):

* ``exit``: from the last rank's arrival at the barrier (its forward's end) to this rank's
  return from it: the barrier's transfer as each rank sees it;
* ``bwd``, ``cpu``, ``rq``, ``off``: backward's wall (barrier's return to the last hook),
  the training thread's CPU and run-queue wait in it, and the rest (``bwd − cpu − rq``: time
  blocked, or stolen by the hypervisor);
* ``oth``: the process's other threads' CPU over the same span (gloo's threads);
* ``nrun``: runnable threads on the host at the barrier's return;
* without a barrier, ``wait``/``opt``: backward's end less the last hook, and the
  optimizer's wall, with the training thread's run-queue wait in the optimizer (``orq``).

``python bench/ddp_held_wake.py [ROUNDS]`` (default 6), alone under the CPU lock.

Measured 2026-12-06 (2 vCPUs, Firecracker guest, kernel 6.18 EEVDF; alone under the lock),
10:39 load 1.53, 6 rounds (the CPU then read from schedstat, which lags a running thread by
up to a tick: its ``cpu``/``off`` columns are not kept) and 10:49 load 1.75, 8 rounds (CPU
from ``thread_time``). With a barrier, waits 0 / 10 / 40 ms, 10:49: rank 1 (the last to
arrive) left it 0.45 / 1.89 / 2.28 ms after its arrival (10:39: 0.40 / 0.44 / 2.00), rank 0
0.54 / 0.40 / 0.63 (0.35 / 0.42 / 0.65); rank 1's training thread waited for a core 0.08 /
0.09 / 0.91 ms of that. In backward, every setting and rank: wall = thread CPU + run-queue
wait (``off`` -0.01 to 0.00 ms): no time blocked or stolen. The held rank's (rank 0) backward
after 40 ms against 0: wall 11.66 vs 10.53, CPU 8.93 vs 7.20, run-queue 3.79 vs 3.97 (10:39:
wall 10.22 vs 8.48, run-queue 1.20 vs 0.61). Runnable threads on the host at the release:
median 3 (with a barrier) against 2-3 without. Without a barrier the rank that waited 40 ms
in the all-reduce ran its optimizer in 2.20 ms (1.95 at 0 wait), 0.03 ms of it on the run
queue, and waited 0.11 ms for a core at its wake; the straggler 1.04 ms (0.10 at 0 wait).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

WAITS_MS = (0.0, 10.0, 40.0)
COLS = ("t0", "t1", "t2", "tg", "t3", "t4", "c1", "c2", "cg", "c3", "c4",
        "q1", "q2", "qg", "q3", "q4", "o2", "og", "nrun")


def _ss(path: str) -> tuple[int, int, int]:
    with open(path) as f:
        a, b, c = f.read().split()[:3]
    return int(a), int(b), int(c)


def _others(tids: list[int]) -> int:
    tot = 0
    for t in tids:
        try:
            tot += _ss(f"/proc/self/task/{t}/schedstat")[0]
        except OSError:
            pass
    return tot


def rank_setup(rank: int, port: int):
    """Join the 2-rank gloo group as ``rank`` (one intra-op thread, as the demo's job) and
    return the rank's fixed batch ``(x, y)``."""
    import torch
    import torch.distributed as dist

    from stepsim.demo.ddp_job import BATCH, WIDTH

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    g = torch.Generator().manual_seed(rank)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)


def rank_done(q, rank: int, out) -> None:
    """Hand ``out`` to the parent and leave the group."""
    import torch.distributed as dist

    q.put((rank, out))
    dist.destroy_process_group()


def fresh_ddp():
    """A fresh DDP module of the demo's MLP (DDP's default buckets), its SGD and its
    parameters."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from stepsim.demo.ddp_job import build_mlp

    model = DDP(build_mlp())
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, opt, [p for p in model.module.parameters() if p.requires_grad]


def _rank(rank: int, port: int, plan: list[tuple[float, bool]], steps: int, q) -> None:
    import threading

    import torch
    import torch.distributed as dist

    from stepsim.demo.ddp_job import spin

    x, y = rank_setup(rank, port)
    me = threading.get_native_id()
    own = "/proc/thread-self/schedstat"
    pc = time.perf_counter_ns

    def _me() -> tuple[int, int]:
        """(thread CPU ns from the clock, which is exact for a running thread where the
        schedstat's first field lags by up to a tick; run-queue wait ns)"""
        return time.thread_time_ns(), _ss(own)[1]
    out = []
    for ms, bar in plan:
        model, opt, params = fresh_ddp()
        tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]
        at = {}
        n = [0]

        def hook(grad):
            n[0] += 1
            if n[0] == len(params):
                at["tg"] = pc()
                at["qg"] = _me()
                at["og"] = _others(tids)

        hs = [p.register_hook(hook) for p in params]
        rows = []
        for k in range(steps + 2):
            n[0] = 0
            t0 = pc()
            o = model(x)
            if ms and rank == 1:
                spin(ms)
            loss = torch.nn.functional.mse_loss(o, y)
            t1, q1 = pc(), _me()
            if bar:
                dist.barrier()
            t2, q2 = pc(), _me()
            o2 = _others(tids)
            with open("/proc/loadavg") as f:
                nrun = int(f.read().split()[3].split("/")[0])
            loss.backward()
            t3, q3 = pc(), _me()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t4, q4 = pc(), _me()
            if k >= 2:
                rows.append((t0, t1, t2, at["tg"], t3, t4, q1[0], q2[0], at["qg"][0], q3[0],
                             q4[0], q1[1], q2[1], at["qg"][1], q3[1], q4[1], o2, at["og"],
                             nrun))
        for h in hs:
            h.remove()
        dist.barrier()
        out.append(rows)
    rank_done(q, rank, out)


def run_ranks(target, *args) -> dict:
    """Fork the 2 ranks, each running ``target(rank, port, *args, queue)``, which puts
    ``(rank, result)`` on the queue; returns ``{rank: result}``."""
    import multiprocessing as mp

    from stepsim.demo.ddp_job import free_port

    ctx = mp.get_context("fork")
    q, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=target, args=(r, port, *args, q)) for r in (0, 1)]
    for p in procs:
        p.start()
    res = dict(q.get() for _ in procs)
    for p in procs:
        p.join()
    return res


def main(rounds: int = 6, steps: int = 8) -> None:
    plan = [(w, b) for _ in range(rounds) for b in (True, False) for w in WAITS_MS]
    res = run_ranks(_rank, plan, steps)
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds x {steps} steps a setting; "
          "median over steps, ms")
    for bar in (True, False):
        for w in WAITS_MS:
            idx = [i for i, s in enumerate(plan) if s == (w, bar)]
            a = [np.array([r for i in idx for r in res[rk][i]], float) for rk in (0, 1)]
            c = [dict(zip(COLS, m.T)) for m in a]
            last_in = np.maximum(c[0]["t1"], c[1]["t1"])
            for rk in (0, 1):
                d = c[rk]
                bwd, cpu = (d["tg"] - d["t2"]) / 1e6, (d["cg"] - d["c2"]) / 1e6
                rq = (d["qg"] - d["q2"]) / 1e6
                line = (f"{'barrier' if bar else 'no barr'} w{w:2.0f} r{rk} "
                        f"bwd {np.median(bwd):5.2f} cpu {np.median(cpu):5.2f} "
                        f"rq {np.median(rq):5.2f} off {np.median(bwd - cpu - rq):5.2f} "
                        f"oth {np.median((d['og'] - d['o2']) / 1e6):5.2f} "
                        f"nrun {np.median(d['nrun']):3.0f} (mean {d['nrun'].mean():.2f})")
                if bar:
                    line += f" brq {np.median((d['q2'] - d['q1']) / 1e6):5.2f}"
                    line += f" exit {np.median((d['t2'] - last_in) / 1e6):5.2f}"
                    line += f" [P90 {np.percentile((d['t2'] - last_in) / 1e6, 90):5.2f}]"
                else:
                    line += (f" wait {np.median((d['t3'] - d['tg']) / 1e6):5.2f}"
                             f" opt {np.median((d['t4'] - d['t3']) / 1e6):5.2f}"
                             f" ocpu {np.median((d['c4'] - d['c3']) / 1e6):5.2f}"
                             f" orq {np.median((d['q4'] - d['q3']) / 1e6):5.2f}"
                             f" wrq {np.median((d['q3'] - d['qg']) / 1e6):5.2f}")
                print(line)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6)
