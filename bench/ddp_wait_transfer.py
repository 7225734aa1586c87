"""Does a gloo all-reduce take longer when one rank has waited in it? (issue 12)

Two gloo ranks on this host all-reduce the DDP demo's last bucket (7,354,368 B: 1,838,592
float32) over ``ROUNDS`` rounds, alternating: both enter together (a barrier first), or rank 1
spins ``PAUSE_MS`` first so rank 0 waits in the collective. Prints, per case, rank 1's time in
the all-reduce (from its own entry, the last one: the transfer as the simulator defines it,
:mod:`models.skew`) and rank 0's time from rank 1's entry to its own return (mean, median,
ms), and the ratio. ``python bench/ddp_wait_transfer.py`` (run it alone under the CPU lock).

``python bench/ddp_wait_transfer.py ddp [ROUNDS]`` (default 6) runs the DDP demo's job itself
(:func:`demo.ddp_job.run_plan`, DDP's default buckets) with a straggler of 0, 10, 20 and 40 ms
spinning in rank 1's forward, the four settings interleaved in each round (8 steps each after
2 warm-up steps), then the same with a barrier before backward, and prints per wait and rank,
against the same round's 0 ms run (paired; median and range over the rounds): backward's
wall and the training thread's CPU in it, the wait after the last gradient's hook (rank 1,
the last to arrive: the last all-reduce's transfer and the copy back), rank 0's time from
rank 1's last hook to its own backward's end (the same transfer seen by the rank that
waited), the optimizer's CPU and wall, and ``post`` (last hook to the next step).

Measured 2026-12-06 (2 vCPUs; alone under the lock; paired differences at 10 / 20 / 40 ms,
medians over the rounds, ms). 07:18, load 2.45, 6 rounds, no barrier: optimizer CPU of the
rank that waited +0.34 / +0.51 / +0.50 (of 1.29), of the straggler +0.00 / +0.17 / +0.08;
the straggler's wait after its last hook -0.31 / -0.50 / -0.70 (of 8.87; each round's
difference -3.4 to +4.9). 07:24, load 2.6, 10 rounds, no barrier: optimizer CPU +0.19 /
+0.45 / +0.27 (of 1.52) and +0.13 / +0.18 / +0.35 (of 1.53); the straggler's wait -0.13 /
-0.87 / +0.24 (of 9.64, rounds -5.4 to +3.4), rank 0 from rank 1's last hook to its return
+0.26 / -0.45 / +0.55 (of 9.40): no transfer change the job resolves. With the barrier
(same run): the held rank's backward wall +0.73 / +1.45 / +2.56 (of 9.23) while its CPU rose
+0.20 / +0.41 / +0.78; the other rank's wait after its last hook +1.19 / +1.54 / +1.10 (it
waits for the held rank's later last bucket); optimizer CPU +0.07 / +0.16 / +0.23 and +0.05
/ +0.13 / +0.19 (of 1.67-1.71).
"""
from __future__ import annotations

import os
import time

import numpy as np

ROUNDS, PAUSE_MS, NUMEL = 120, 40.0, 1_838_592


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def _rank(rank: int, port: int, q) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    x = torch.ones(NUMEL)
    out = {"together": [], "waited": []}
    for k in range(ROUNDS + 4):
        case = "waited" if k % 2 else "together"
        dist.barrier()
        if case == "waited" and rank == 1:
            _spin(PAUSE_MS)
        t0 = time.perf_counter()
        dist.all_reduce(x)
        t1 = time.perf_counter()
        if k >= 4:
            out[case].append((t0, t1))
    q.put((rank, out))
    dist.destroy_process_group()


def main() -> None:
    import multiprocessing as mp

    from stepsim.demo.ddp_job import free_port

    ctx = mp.get_context("spawn")
    q, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, q)) for r in (0, 1)]
    for p in procs:
        p.start()
    res = dict(q.get() for _ in procs)
    for p in procs:
        p.join()
    print(f"load average {os.getloadavg()[0]:.2f}; {ROUNDS // 2} rounds per case")
    means = {}
    for case in ("together", "waited"):
        r1 = np.array([(b - a) * 1e3 for a, b in res[1][case]])
        # rank 0 from rank 1's entry (both clocks are perf_counter on one host: CLOCK_MONOTONIC)
        r0 = np.array([(b0 - a1) * 1e3 for (_, b0), (a1, _) in zip(res[0][case], res[1][case])])
        means[case] = r1.mean()
        print(f"{case:9s} rank 1 in it {r1.mean():6.2f} ms (median {np.median(r1):6.2f}); "
              f"rank 0 from rank 1's entry {r0.mean():6.2f} (median {np.median(r0):6.2f})")
    print(f"waited / together (rank 1's transfer): {means['waited'] / means['together']:.3f}")


WAITS_MS = (0.0, 10.0, 20.0, 40.0)
DDP_COLS = ("bwd", "bwd_cpu", "wait", "xfer0", "opt_cpu", "opt", "post")


def _ddp_cols(r0: dict, r1: dict) -> dict[tuple[int, str], float]:
    """Per (rank, column) the mean over one run's steps (ms), from both ranks' results."""
    out = {}
    p = [np.asarray(r["phases"], float) for r in (r0, r1)]
    n = min(len(p[0]), len(p[1]))
    for rank, (ph, r) in enumerate(zip(p, (r0, r1))):
        s = np.asarray(r["step_starts_us"], float)
        ph = ph[:n]
        _t1, t2, tg, t3, t4, _c0, _c1, c2, cg, c3, c4 = ph.T
        cols = {"bwd": tg - t2, "bwd_cpu": cg - c2, "wait": t3 - tg,
                "xfer0": p[0][:n, 3] - p[1][:n, 2],
                "opt_cpu": c4 - c3, "opt": t4 - t3, "post": s[1:n + 1] - tg}
        for c in DDP_COLS:
            out[(rank, c)] = float(np.mean(cols[c])) / 1e3
    return out


def main_ddp(rounds: int = 6) -> None:
    from stepsim.demo.ddp_job import Run, run_plan

    plan = [Run(f"w{w:g}{'b' * b}#{k}", straggler_ms=w, barrier=b, steps=8, warmup=2)
            for k in range(rounds) for b in (False, True) for w in WAITS_MS]
    got = run_plan(plan)
    for b in (False, True):
        _print_ddp({w: [_ddp_cols(*got[f"w{w:g}{'b' * b}#{k}"]) for k in range(rounds)]
                    for w in WAITS_MS}, rounds, "with a barrier before backward" if b else
                   "no barrier")


def _print_ddp(per: dict, rounds: int, what: str) -> None:
    print(f"{what}: load average {os.getloadavg()[0]:.2f}; {rounds} rounds x 8 steps per wait; "
          "ms at 0 wait (median of rounds), then per wait the paired difference to the "
          "round's 0 ms run: median [min, max]")
    for rank in (0, 1):
        for c in DDP_COLS:
            if c == "xfer0" and rank == 1:
                continue
            base = [r[(rank, c)] for r in per[0.0]]
            line = f"r{rank} {c:8s} {np.median(base):6.2f}"
            for w in WAITS_MS[1:]:
                d = np.array([r[(rank, c)] for r in per[w]]) - base
                line += f" | {w:2.0f} ms {np.median(d):+5.2f} [{d.min():+5.2f},{d.max():+5.2f}]"
            print(line)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["ddp"]:
        main_ddp(int(sys.argv[2]) if len(sys.argv) > 2 else 6)
    else:
        main()
