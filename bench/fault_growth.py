"""How a CPU training step's page faults grow with the batch size, and why (issue 10).

A fresh user's 3-conv CNN at batch 32 re-faulted 3,424 pages a step and at 64 11,488 (×3.4 for
×2 the samples), where ``scenarios/batch_size.py`` scaled them ×2. The candidate mechanism is
glibc malloc's: a request of at least ``M_MMAP_THRESHOLD`` is served by a fresh ``mmap`` (its
pages faulted in on first touch, given back by ``munmap`` on free), the threshold rises to the
size of each such chunk freed up to ``DEFAULT_MMAP_THRESHOLD_MAX`` (32 MiB on 64-bit), and
the heap's free top is given back past ``M_TRIM_THRESHOLD`` (twice the threshold). So in the
steady state a tensor over 32 MiB is mmapped (and re-faulted) every step, and below that the
heap's trimming decides; a larger batch pushes tensors past the 32 MiB ceiling.

Each (batch, malloc mode, repeat) runs in a fresh process, interleaved: STEPS training steps of
the workload on random inputs (a fresh input each step, as a DataLoader's), then one more step
under ``torch.profiler`` with ``profile_memory=True``, whose host ``[memory]`` events give the
step's allocation sizes. Malloc modes: ``dyn`` (glibc's default), ``cap`` (threshold held at
its 32 MiB ceiling from the start, trim at 64 MiB: the dynamic threshold's limit), ``off``
(1 GiB thresholds: nothing mmapped, nothing trimmed). Printed per run (medians of the steps
after SKIP): the main thread's minor faults a step (what the capture sidecar records), the
process's, the first step's, the main thread's CPU ms; and from the memory events: MB
allocated a step, the largest allocation, and ``big``: the pages of the allocations over
32 MiB (the faults the mechanism predicts in ``cap`` mode, at the least in ``dyn``).

Run under the timing lock, the package importable::

    flock /tmp/cpu-timing.lock python bench/fault_growth.py demo 16,32,64,128 2
    flock /tmp/cpu-timing.lock python bench/fault_growth.py /path/train.py 16,32,64,128 2

A script workload defines ``make_model()``, ``INPUT_SHAPE`` (C, H, W) and ``THREADS`` (None:
torch's default); ``demo`` is :mod:`demo.workload`'s CNN at one thread.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import resource
import runpy
import subprocess
import sys
import tempfile
import time

import numpy as np

STEPS, SKIP = 14, 4
PAGE = 4096
MMAP_MAX = 32 << 20
"""glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (4 × 1024 × 1024 × sizeof(long))."""
MODES = {"dyn": "", "cap": f"glibc.malloc.mmap_threshold={MMAP_MAX}:"
                          f"glibc.malloc.trim_threshold={2 * MMAP_MAX}",
         "off": "glibc.malloc.mmap_threshold=1073741824:glibc.malloc.trim_threshold=4294967296"}


def _workload(name: str):
    if name == "demo":
        from stepsim.demo.workload import CROP_PX, make_model
        return make_model, (3, CROP_PX, CROP_PX), 1
    ns = runpy.run_path(name)
    return ns["make_model"], tuple(ns["INPUT_SHAPE"]), ns.get("THREADS")


def _alloc_sizes(trace_dir: str) -> list[int]:
    """Bytes of each host allocation in the one trace under ``trace_dir``."""
    path = glob.glob(os.path.join(trace_dir, "*.json*"))[0]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return [int(e["args"]["Bytes"]) for e in events if e.get("name") == "[memory]"
            and e["args"].get("Device Type", 0) == 0 and e["args"].get("Bytes", 0) > 0]


def one(name: str, bs: int) -> dict:
    """This process's run of workload ``name`` at batch ``bs`` (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    make_model, shape, threads = _workload(name)
    torch.manual_seed(0)
    if threads is not None:
        torch.set_num_threads(threads)
    net = make_model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

    def step():
        x, y = torch.randn(bs, *shape), torch.randint(0, 10, (bs,))
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    rows = []
    for _ in range(STEPS):
        t0, p0, c0 = (resource.getrusage(resource.RUSAGE_THREAD),
                      resource.getrusage(resource.RUSAGE_SELF), time.thread_time())
        step()
        t1, p1, c1 = (resource.getrusage(resource.RUSAGE_THREAD),
                      resource.getrusage(resource.RUSAGE_SELF), time.thread_time())
        rows.append((t1.ru_minflt - t0.ru_minflt, p1.ru_minflt - p0.ru_minflt, (c1 - c0) * 1e3))
    with tempfile.TemporaryDirectory() as d:
        from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     on_trace_ready=tensorboard_trace_handler(d)):
            step()
        sizes = _alloc_sizes(d)
    steady = np.array(rows[SKIP:])
    return {"thread": float(np.median(steady[:, 0])), "thread_max": int(steady[:, 0].max()),
            "proc": float(np.median(steady[:, 1])), "first": int(rows[0][1]),
            "cpu_ms": float(np.median(steady[:, 2])),
            "alloc_mb": sum(sizes) / 1e6, "largest_mb": max(sizes) / 1e6,
            "big": sum(-(-s // PAGE) for s in sizes if s > MMAP_MAX)}


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--one":
        print(json.dumps(one(argv[1], int(argv[2]))))
        return 0
    name, batches = argv[0], [int(v) for v in argv[1].split(",")]
    repeats = int(argv[2]) if len(argv) > 2 else 1
    modes = argv[3].split(",") if len(argv) > 3 else list(MODES)
    print(f"workload {name}; medians of steps {SKIP}-{STEPS - 1}; load {os.getloadavg()[0]:.2f}")
    print("rep mode  batch  thread  (max)   proc  first  cpu_ms  alloc_MB  largest_MB  big")
    for k in range(repeats):
        for bs in batches:
            for mode in modes:
                env = dict(os.environ)
                if MODES[mode]:
                    env["GLIBC_TUNABLES"] = MODES[mode]
                out = subprocess.run([sys.executable, __file__, "--one", name, str(bs)],
                                     check=True, capture_output=True, text=True, env=env).stdout
                r = json.loads(out.strip().splitlines()[-1])
                print(f"{k:3d} {mode:4s} {bs:6d} {r['thread']:7.0f} {r['thread_max']:6d} "
                      f"{r['proc']:6.0f} {r['first']:6d} {r['cpu_ms']:7.1f} {r['alloc_mb']:9.1f} "
                      f"{r['largest_mb']:11.1f} {r['big']:5d}", flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
