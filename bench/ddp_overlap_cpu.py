"""What an all-reduce reduced beside the backward costs the backward's training thread
(issue 12: bucket_cap_mb=1 and =25 against DDP's default on the DDP demo's job).

The DDP demo's job (:mod:`demo.ddp_job`: 2 gloo ranks, the 8 MiB MLP, one intra-op thread
each) runs, interleaved per round: DDP's default (two buckets: 1 MiB reduced during backward,
7 MiB after it), ``bucket_cap_mb=25`` (an explicit cap caps the first bucket too: one 8 MiB
bucket, reduced after backward), ``bucket_cap_mb=1`` (eight 1 MiB buckets, seven reduced during
backward) and ``no_sync`` (no all-reduce at all). Per setting it prints the medians over the
rounds of each rank's per-step medians: the backward's compute (from its start to the last
gradient's hook) in wall time and in the training thread's CPU (``thread_time``), the wait
after it (the all-reduces still running), the job's step (the slower rank's start-to-start),
and the backend threads' CPU a step. The backward's CPU against ``no_sync``'s is what the
collectives beside it cost the training thread beyond waiting for a core (the simulator
charges the wait, not this).

``python bench/ddp_overlap_cpu.py [ROUNDS] [STEPS]`` (default 6 rounds of 20 steps, about
40 s), under the timing lock.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from stepsim.demo.ddp_job import Run, run_plan

SETTINGS = {"default (1+7 MiB)": {}, "bucket_cap_mb=25 (8)": {"bucket_cap_mb": 25},
            "bucket_cap_mb=1 (8x1)": {"bucket_cap_mb": 1}, "no_sync (none)": {"no_sync": True}}


def per_rank(r: dict) -> dict:
    """One rank's per-step medians (ms)."""
    p = np.array(r["phases"])
    st = np.array(r["step_starts_us"])[:len(p)]
    backend = sum(t["cpu_us"] for t in r["threads"] if not t["main"]) / len(p)
    return {"fwd": np.median(p[:, 0] - st), "bwd wall": np.median(p[:, 2] - p[:, 1]),
            "bwd cpu": np.median(p[:, 8] - p[:, 7]), "wait": np.median(p[:, 3] - p[:, 2]),
            "wait cpu": np.median(p[:, 9] - p[:, 8]), "opt": np.median(p[:, 4] - p[:, 3]),
            "backend cpu": backend}


def job_ms(ranks: list[dict]) -> float:
    d = [np.diff(np.array(r["step_starts_us"])) for r in ranks]
    n = min(len(x) for x in d)
    return float(np.max([x[:n] for x in d], axis=0).mean()) / 1e3


def main(rounds: int = 6, steps: int = 20) -> None:
    plan = [Run(f"{label}#{k}", steps=steps, **kw) for k in range(rounds)
            for label, kw in SETTINGS.items()]
    load = os.getloadavg()[0]
    runs = run_plan(plan, timeout_s=900)
    cols = ["job", "fwd", "bwd wall", "bwd cpu", "wait", "wait cpu", "opt", "backend cpu"]
    print(f"{rounds} rounds x {steps} steps, load {load:.1f} -> {os.getloadavg()[0]:.1f}; "
          "ms, medians over rounds (rank 0 / rank 1)")
    print(f"{'setting':24s}" + "".join(f"{c:>14s}" for c in cols))
    table = {}
    for label in SETTINGS:
        rows = [[per_rank(r) for r in runs[f"{label}#{k}"]] for k in range(rounds)]
        jobs = [job_ms(runs[f"{label}#{k}"]) for k in range(rounds)]
        med = {c: [float(np.median([row[i][c] for row in rows])) / 1e3 for i in (0, 1)]
               for c in cols[1:]}
        table[label] = med
        print(f"{label:24s}{np.median(jobs):14.2f}" + "".join(
            f"{med[c][0]:7.2f}/{med[c][1]:<6.2f}" for c in cols[1:]))
    ref = table["no_sync (none)"]
    for label, med in table.items():
        extra = [med["bwd cpu"][i] - ref["bwd cpu"][i] for i in (0, 1)]
        print(f"{label:24s} backward CPU over no_sync's: {extra[0]:+.2f} / {extra[1]:+.2f} ms "
              f"(x{med['bwd cpu'][0] / ref['bwd cpu'][0]:.3f} / "
              f"x{med['bwd cpu'][1] / ref['bwd cpu'][1]:.3f})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
