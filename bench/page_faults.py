"""The demo's training step: its main-thread CPU and minor page faults per step, per num_workers.

Each setting runs in a fresh process (as ``stepsim demo`` runs its captures), 40 steps of the
demo's CNN (:mod:`demo.workload`, one intra-op thread, no profiler, no harness), and prints the
medians of steps 8-39: ``next()``'s CPU, the training step's CPU, wall, minor faults, system
and user CPU (ms). Whether glibc gives the step's freed activations back to the kernel (to be
faulted in again next step) is set by each process's heap: compare a run with
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824``
(glibc then keeps the memory, and the step never re-faults): docs/measurements.md, "Page
faults of the training step" (:mod:`calibration.page_faults`).

Run under the timing lock from the repository's parent with the package importable::

    flock /tmp/cpu-timing.lock python bench/page_faults.py 0,1,2,4 [REPEATS]
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

STEPS, SKIP = 40, 8


def one(nw: int, steps: int = STEPS, seed: int = 0) -> list[dict]:
    """Per-step rows of the demo's loop at ``num_workers=nw`` in this process."""
    import torch

    from stepsim.demo.workload import BATCH_SIZE, N_IMAGES, JpegDataset, make_jpegs, make_model

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    ds = JpegDataset(make_jpegs(N_IMAGES, seed), length=(steps + 10) * BATCH_SIZE, seed=seed)
    kw = dict(batch_size=BATCH_SIZE, num_workers=nw, **({"prefetch_factor": 2} if nw else {}))
    it = iter(torch.utils.data.DataLoader(ds, **kw))
    rows = []
    for _ in range(steps):
        r0, c0, w0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
        x, y = next(it)
        r1, c1, w1 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
        opt.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        opt.step()
        r2, c2, w2 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time(), time.perf_counter()
        rows.append({"next_cpu": (c1 - c0) * 1e3, "train_cpu": (c2 - c1) * 1e3,
                     "train_wall": (w2 - w1) * 1e3, "faults": r2.ru_minflt - r1.ru_minflt,
                     "sys": (r2.ru_stime - r1.ru_stime) * 1e3,
                     "user": (r2.ru_utime - r1.ru_utime) * 1e3})
    return rows


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--one":
        print(json.dumps(one(int(argv[1]))))
        return 0
    settings = [int(v) for v in (argv[0] if argv else "0,1,2,4").split(",")]
    repeats = int(argv[1]) if len(argv) > 1 else 1
    print(f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}")
    print("run  workers  next_cpu  train_cpu  train_wall  faults  sys  user  (medians, ms)")
    for k in range(repeats):
        for nw in settings:
            out = subprocess.run([sys.executable, __file__, "--one", str(nw)], check=True,
                                 capture_output=True, text=True).stdout
            rows = json.loads(out.strip().splitlines()[-1])[SKIP:]
            med = {c: float(np.median([r[c] for r in rows])) for c in rows[0]}
            print(f"{k:3d}  {nw:7d}  {med['next_cpu']:8.1f}  {med['train_cpu']:9.1f}  "
                  f"{med['train_wall']:10.1f}  {med['faults']:6.0f}  {med['sys']:4.1f}  "
                  f"{med['user']:4.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
