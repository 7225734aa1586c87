"""Does this machine's CPU run at one speed with nothing else on it? A gauge of identical work,
per core, over time (issue 12: the DDP demo's rounds read 1.1-1.3x the CPU per identical work
of other rounds with no other process busy).

One process per core (pinned, ``os.sched_setaffinity``; torch at one intra-op thread) runs the
DDP demo's forward (:data:`demo.ddp_job.WIDTH` × :data:`demo.ddp_job.DEPTH` ``Linear`` +
ReLU at batch :data:`demo.ddp_job.BATCH`, the same work the demo's host gauge reads,
:mod:`demo.ddp_speed`) back to back for ``--seconds``, and records each forward's wall and
thread CPU (``time.thread_time``). The parent reads ``/proc/stat`` each second: the machine's
busy CPU less the gauge's own is what other processes used, and ``steal`` what the hypervisor
gave other guests. ``--cores 1`` runs on core 0 alone, the other idle.

Prints, per second and core, the median thread CPU per forward against the whole run's median
per core (so a core's own speed cancels), then the spread: the share of one-second bins past
1.10x and their largest, beside the other processes' busy share and the steal over the run.
With no process outside the gauge, bins past 1.10x mean the core's speed moves of itself,
outside this machine (the hypervisor's other guests on the same physical cores, caches and
memory bandwidth, or the clock): nothing inside the guest sees it but the CPU time of
identical work.

Run alone under the lock, from the repository root:
``flock /tmp/cpu-timing.lock python bench/host_gauge.py --seconds 45``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _gauge(core: int, seconds: float, q) -> None:
    import torch

    from stepsim.demo.ddp_job import BATCH, build_mlp

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    mlp = build_mlp()
    x = torch.randn(BATCH, mlp[0].in_features)
    with torch.no_grad():
        for _ in range(20):
            mlp(x)
        rows, end = [], time.perf_counter() + seconds
        while (t0 := time.perf_counter()) < end:
            c0 = time.thread_time()
            mlp(x)
            rows.append((t0, time.perf_counter() - t0, time.thread_time() - c0))
    q.put((core, rows, time.process_time()))


def _stat() -> tuple[float, float, float]:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return time.perf_counter(), (user + nice + system + irq + softirq + steal) * tick, steal * tick


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_gauge, args=(c, args.seconds, q)) for c in range(args.cores)]
    stats = [_stat()]
    for p in procs:
        p.start()
    got = {}
    while len(got) < len(procs):
        time.sleep(1.0)
        stats.append(_stat())
        while not q.empty():
            core, rows, cpu = q.get()
            got[core] = (np.array(rows), cpu)
    for p in procs:
        p.join()
    t_start = min(r[0][0, 0] for r in got.values())
    print(f"{args.cores} core(s), {args.seconds:.0f} s; per second, thread CPU per forward "
          "against the core's run median (and wall/CPU):")
    ratios = {}
    for core, (rows, _) in sorted(got.items()):
        sec = ((rows[:, 0] - t_start) // 1).astype(int)
        med = float(np.median(rows[:, 2]))
        ratios[core] = [(s, float(np.median(rows[sec == s, 2])) / med,
                         float(np.sum(rows[sec == s, 1]) / np.sum(rows[sec == s, 2])))
                        for s in np.unique(sec) if np.sum(sec == s) >= 20]
        print(f"  core {core}: median {med * 1e3:.3f} ms a forward over {len(rows)}")
    n = max(len(v) for v in ratios.values())
    for i in range(n):
        print("  " + "  ".join(f"t={ratios[c][i][0]:3d}s core{c} x{ratios[c][i][1]:.3f} "
                               f"(w/c {ratios[c][i][2]:.2f})" for c in sorted(ratios)
                               if i < len(ratios[c])))
    t0, b0, s0 = stats[0]
    t1, b1, s1 = stats[-1]
    own = sum(cpu for _, cpu in got.values())
    cores = os.cpu_count() or 1
    print(f"other processes busy {max(b1 - b0 - own, 0) / (cores * (t1 - t0)):.3f} of the "
          f"machine's cores' time, steal {s1 - s0:.2f} s over {t1 - t0:.0f} s")
    for c in sorted(ratios):
        r = np.array([x[1] for x in ratios[c]])
        print(f"core {c}: one-second bins past 1.10x: {np.mean(r > 1.10):.0%} "
              f"({np.sum(r > 1.10)} of {len(r)}), max x{r.max():.3f}, min x{r.min():.3f}, "
              f"P90/P10 {np.percentile(r, 90) / np.percentile(r, 10):.3f}")


if __name__ == "__main__":
    main()
