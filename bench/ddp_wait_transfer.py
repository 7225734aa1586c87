"""Does a gloo all-reduce take longer when one rank has waited in it? (issue 12)

Two gloo ranks on this host all-reduce the DDP demo's last bucket (7,354,368 B: 1,838,592
float32) over ``ROUNDS`` rounds, alternating: both enter together (a barrier first), or rank 1
spins ``PAUSE_MS`` first so rank 0 waits in the collective. Prints, per case, rank 1's time in
the all-reduce (from its own entry, the last one: the transfer as the simulator defines it,
:mod:`models.skew`) and rank 0's time from rank 1's entry to its own return (mean, median,
ms), and the ratio. ``python bench/ddp_wait_transfer.py`` (run it alone under the CPU lock).
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


if __name__ == "__main__":
    main()
