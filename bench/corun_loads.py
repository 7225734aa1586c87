"""Time ``calibration.corun.corun_loads`` on many records (a breaker's sidecar of 500,000
took over 120 s with the pairwise form it replaced).

Records as a capture makes them: 2 workers' batches back to back (2 threads each, 8-12 ms)
beside the main thread's steps (1 thread, 3-5 ms), on one monotonic clock in µs. Prints, per
record count, the seconds of the sort-and-integrate form, and of the pairwise form where it is
short enough to run (its time grows as n²). Run from the repository root:
``python bench/corun_loads.py [N ...]`` (default 2000 20000 500000).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from stepsim.calibration.corun import Activity, corun_loads
from stepsim.tests.test_corun_loads_fast import brute

PAIRWISE_MAX = 2_000


def records(n: int, seed: int = 0) -> list[Activity]:
    rng = np.random.default_rng(seed)
    out, clock = [], {0: 1.7e12, 1: 1.7e12, "main": 1.7e12}
    for k in range(n):
        lane = k % 3 if k % 3 < 2 else "main"
        wall = rng.uniform(8e3, 12e3) if lane != "main" else rng.uniform(3e3, 5e3)
        start = clock[lane] + rng.uniform(0, 500)
        clock[lane] = start + wall
        out.append(Activity(start, start + wall, 2.0 if lane != "main" else 1.0, wall,
                            "batch" if lane != "main" else "step"))
    return out


def main(ns: list[int]) -> None:
    for n in ns:
        acts = records(n)
        t = time.perf_counter()
        fast = corun_loads(acts, 2)
        dt = time.perf_counter() - t
        line = f"{n:>8} records: {dt:7.3f} s sorted"
        if n <= PAIRWISE_MAX:
            t = time.perf_counter()
            slow = brute(acts, 2)
            line += (f", {time.perf_counter() - t:7.3f} s pairwise, largest difference "
                     f"{float(np.max(np.abs(fast - slow))):.1e}")
        print(line, flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 20000, 500000])
