"""A gloo all-reduce's backend CPU per rank: trains of small collectives against one large one
(issue 12: what ``comm.host_cpu_us`` per collective is).

Two ranks (gloo, CPU tensors, one intra-op thread each) run, per round, each case after a
barrier: all-reduces of the listed MiB enqueued with ``async_op=True``, the training thread
busy (spinning, as in backward) for ``gap`` ms after each enqueue, then waiting for all.
Every other thread's CPU (``/proc/self/task/*/schedstat``) over the case is split into gloo's
TCP loop thread (``gloo_tcp_loop``) and its worker threads (``pt_gloo_runloop``). Prints per
rank the medians over the rounds (µs) and the ratios that say whether a collective has a
per-collective cost beyond its bytes: 8 x 1 MiB over 1 x 8 MiB (per thread) and a train
(1 ms apart) over isolated ones (5 ms apart, each done before the next is enqueued).

``python bench/gloo_collective_cpu.py [ROUNDS]`` (default 25), under the timing lock.
Measured 2026-12-05 (medians of 25 rounds, rank 0 / rank 1): 21:24 UTC, load 2.5-2.9 (the
scratch version of this script): TCP loop 8 x 1 MiB train / 1 x 8 MiB 1.15 / 1.22, total train
/ isolated 1.01 / 0.97 (5.63 / 5.41 against 5.56 / 5.56 ms), per collective 269 / 129 µs;
21:34 UTC, load 5.3 (this script): 0.77 / 0.97, 0.92 / 0.99, 66 / 151 µs. A collective's TCP
loop CPU is per byte, a train costs what isolated collectives do, and the per-collective part
is 0.07-0.27 ms (the worker threads' per-collective CPU in the demo's captures: 0.11-0.22).
"""
from __future__ import annotations

import collections
import os
import socket
import sys
import threading
import time

MIB = 2 ** 20
CASES = {"1x1": ([1], 0.0), "1x8": ([8], 0.0), "1+7": ([1, 7], 7.0),
         "8x1 train": ([1] * 8, 1.0), "8x1 isolated": ([1] * 8, 5.0)}
"""Per case: the all-reduces' MiB and the busy gap (ms) after each enqueue."""


def _threads_cpu_us() -> dict[str, float]:
    """CPU µs so far of every thread of this process but the calling one, by thread name."""
    out: dict[str, float] = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == threading.get_native_id():
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu_ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[f.read().strip()] += cpu_ns / 1e3
        except (OSError, ValueError):
            continue
    return out


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def _worker(rank: int, port: int, rounds: int, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    bufs = {k: [torch.ones(m * MIB // 4) for m in sizes] for k, (sizes, _) in CASES.items()}
    res = collections.defaultdict(list)
    for n in range(rounds + 2):                      # two rounds of warm-up
        for k, (_, gap) in CASES.items():
            dist.barrier()
            time.sleep(0.003)
            before = _threads_cpu_us()
            works = []
            for b in bufs[k]:
                works.append(dist.all_reduce(b, async_op=True))
                _spin(gap)
            for w in works:
                w.wait()
            _spin(3.0)
            after = _threads_cpu_us()
            if n >= 2:
                res[k].append({t: after[t] - before.get(t, 0.0) for t in after})
    dist.destroy_process_group()
    queue.put((rank, dict(res)))


def main() -> None:
    import numpy as np
    import torch.multiprocessing as mp

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, rounds, queue)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()

    def med(rank, case, name=None):
        return float(np.median([sum(v for t, v in x.items() if name is None or t == name)
                                for x in got[rank][case]]))
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds; medians, µs per case")
    for r in (0, 1):
        for k in CASES:
            print(f"rank {r} {k:13s} total {med(r, k):7.0f}  tcp loop "
                  f"{med(r, k, 'gloo_tcp_loop'):7.0f}  workers {med(r, k, 'pt_gloo_runloop'):6.0f}")
        print(f"rank {r} ratios: tcp loop 8x1 train / 1x8 "
              f"{med(r, '8x1 train', 'gloo_tcp_loop') / med(r, '1x8', 'gloo_tcp_loop'):.2f}; "
              f"total train / isolated {med(r, '8x1 train') / med(r, '8x1 isolated'):.2f}; "
              f"per collective (1x1 and 1x8) {(8 * med(r, '1x1') - med(r, '1x8')) / 7:.0f} µs")


if __name__ == "__main__":
    main()
