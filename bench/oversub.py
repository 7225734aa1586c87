"""CPU per batch against the runnable threads per core (issue 10: the slowdown past the cores).

``N`` forked processes each produce the demo's batches (:class:`demo.workload.JpegDataset`,
one intra-op thread, a batch of :data:`demo.workload.BATCH_SIZE` samples stacked, as a
DataLoader worker does) for ``block`` seconds at once; ``N`` in rotation, ``rounds`` rounds.
Per ``N`` it prints the median thread CPU per batch (ms) per round, its ratio to the ``N ≤ cores``
rows' mean, and per batch the context switches (``getrusage(RUSAGE_THREAD)``: voluntary /
involuntary) and the time slices and run-queue wait (``/proc/thread-self/schedstat``).

Run under the CPU-timing lock from the repository's parent with the package importable:
``flock /tmp/cpu-timing.lock python -m stepsim.bench.oversub [block_s] [rounds] [N ...]``
(default 6 s, 2 rounds, N = 1 2 3 4 6 8); ``--train``: beside one process running the demo's
training step in a loop (the main thread's work; ``R = N + 1``). Record ``uptime`` beside it.
"""
from __future__ import annotations

import os
import resource
import sys
import time

import numpy as np


def _schedstat() -> tuple[float, float, int]:
    """(on-CPU ns, run-queue wait ns, time slices) of the calling thread."""
    with open("/proc/thread-self/schedstat") as f:
        run, wait, slices = f.read().split()
    return float(run), float(wait), int(slices)


def _produce(ds, seconds: float, w, start: float) -> None:
    import torch
    torch.set_num_threads(1)
    from stepsim.demo.workload import BATCH_SIZE
    n = len(ds)
    i = 0
    torch.stack([ds[j % n][0] for j in range(BATCH_SIZE)])   # warm-up batch
    while time.time() < start:
        time.sleep(0.001)
    rows = []
    end = start + seconds
    while time.time() < end:
        c0, r0, s0 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD), _schedstat()
        torch.stack([ds[(i + j) % n][0] for j in range(BATCH_SIZE)])
        c1, r1, s1 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD), _schedstat()
        i += BATCH_SIZE
        rows.append((c1 - c0, r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw,
                     s1[2] - s0[2], (s1[1] - s0[1]) / 1e9))
    w.write(repr(rows).encode())
    w.close()


def _train(seconds: float, start: float) -> None:
    """The demo's training step (its CNN, a batch of random crops, SGD) in a loop: the main
    thread's work beside the workers, always runnable."""
    import torch
    torch.set_num_threads(1)
    from stepsim.demo.workload import BATCH_SIZE, CLASSES, CROP_PX, make_model
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(BATCH_SIZE, 3, CROP_PX, CROP_PX), torch.randint(0, CLASSES, (BATCH_SIZE,))
    while time.time() < start + seconds:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def block(ds, n: int, seconds: float, train: bool = False) -> np.ndarray:
    """Rows (cpu s, nvcsw, nivcsw, slices, wait s) of every batch of ``n`` producers (beside
    one training loop with ``train``)."""
    start = time.time() + 1.0 + 0.3 * n
    pipes = []
    if train:
        tpid = os.fork()
        if tpid == 0:
            try:
                _train(seconds, start)
            finally:
                os._exit(0)
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _produce(ds, seconds, os.fdopen(w, "wb"), start)
            finally:
                os._exit(0)
        os.close(w)
        pipes.append((pid, os.fdopen(r, "rb")))
    rows = []
    for pid, f in pipes:
        rows += eval(f.read().decode())   # our own children's repr of tuples of numbers
        os.waitpid(pid, 0)
    if train:
        os.waitpid(tpid, 0)
    return np.array(rows)


def main(argv: list[str]) -> None:
    import torch  # noqa: F401  (imported before the forks, so no block pays it)
    from stepsim.demo.workload import N_IMAGES, JpegDataset, make_jpegs
    train = "--train" in argv
    argv = [a for a in argv if a != "--train"]
    secs = float(argv[0]) if argv else 6.0
    rounds = int(argv[1]) if len(argv) > 1 else 2
    ns = [int(a) for a in argv[2:]] or [1, 2, 3, 4, 6, 8]
    cores = os.cpu_count()
    ds = JpegDataset(make_jpegs(N_IMAGES, 0), 10 ** 6, seed=0)
    res: dict[int, list[np.ndarray]] = {n: [] for n in ns}
    print(f"cores {cores}; {os.popen('uptime').read().strip()}")
    for k in range(rounds):
        for n in (ns if k % 2 == 0 else ns[::-1]):
            res[n].append(block(ds, n, secs, train))
    print(f"end: {os.popen('uptime').read().strip()}")
    within = [n for n in ns if n + train <= cores]
    base = np.mean([np.median(b[:, 0]) for n in within for b in res[n]])
    print(f"{'beside one training loop: ' if train else ''}ratios to N = {within}")
    print("N  R/c   ms/batch per round      x(N<=cores)  batches  nvcsw  nivcsw  slices  wait ms  /batch")
    for n in ns:
        meds = [np.median(b[:, 0]) * 1e3 for b in res[n]]
        allb = np.vstack(res[n])
        print(f"{n:<2} {(n + train) / cores:4.1f}  " + " / ".join(f"{m:6.1f}" for m in meds)
              + f"   {np.mean(meds) / 1e3 / base:6.3f} ({min(meds) / 1e3 / base:.3f}-"
              f"{max(meds) / 1e3 / base:.3f})  {len(allb):5d}  {allb[:, 1].mean():5.2f}  "
              f"{allb[:, 2].mean():6.2f}  {allb[:, 3].mean():6.2f}  {allb[:, 4].mean() * 1e3:7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
