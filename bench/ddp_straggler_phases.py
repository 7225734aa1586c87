"""Where a DDP demo's straggler rows spend their time beyond the defaults (issue 12).

Reads the demo folders' ``runs.json`` (each rank's per-step instants and thread CPU,
:attr:`demo.ddp_job.RunResult.phases`) and prints per setting and rank the means over the
repeats' steps (ms) of: forward (with the spin), the barrier, backward to the last
gradient's hook (wall, and the training thread's CPU), the wait after it (the last
all-reduce, untraced), the optimizer, and the step; then, per rank, each straggler row's
increments over the defaults. No timing of its own: ``python bench/ddp_straggler_phases.py
DEMO_DIR...``.

Demos of 2026-12-05 22:54-23:12 (main 34ec93a, load 1.5-1.8), the straggler rank (1) over the
defaults: forward +40.2 to +40.3 ms (its CPU +0.2 to +0.3 beyond the spin), backward's wall
-0.4 to +0.05 ms while its CPU rose 0.9-1.1 ms (the other rank's freed core taken back by
the cold resume, bench/ddp_cold_resume.py), the wait for the last all-reduce +0.6 to +2.0
ms, the optimizer +0.1 to +0.2 ms.
"""
from __future__ import annotations

import sys

import numpy as np
import orjson

SETTINGS = ("defaults (replay)", "straggler 40 ms", "straggler + barrier")
COLS = ("fwd", "barrier", "bwd", "bwd_cpu", "wait", "opt", "step")


def phases(rank: dict) -> dict[str, np.ndarray]:
    """One rank's per-step phases (µs) from its run result."""
    p = np.array(rank["phases"])
    s = np.array(rank["step_starts_us"])
    t0, nxt = s[:len(p)], s[1:len(p) + 1]
    t1, t2, tg, t3, t4, _c0, _c1, c2, cg, _c3, _c4 = p.T
    return {"fwd": t1 - t0, "barrier": t2 - t1, "bwd": tg - t2, "bwd_cpu": cg - c2,
            "wait": t3 - tg, "opt": t4 - t3, "step": nxt - t0}


def table(runs: dict) -> dict[tuple[str, int], dict[str, float]]:
    """Per (setting, rank), each column's mean (ms) over every repeat's steps."""
    out = {}
    for label in SETTINGS:
        keys = sorted(k for k in runs if k.rsplit("#", 1)[0] == label)
        for r in (0, 1):
            ph = [phases(runs[k][r]) for k in keys]
            out[(label, r)] = {c: float(np.mean(np.concatenate([x[c] for x in ph]))) / 1e3
                               for c in COLS}
    return out


def main(dirs: list[str]) -> None:
    for d in dirs:
        t = table(orjson.loads(open(f"{d}/runs.json", "rb").read()))
        print(d)
        for (label, r), v in t.items():
            print(f"  {label[:20]:20s} r{r} " + " ".join(f"{c} {v[c]:6.2f}" for c in COLS))
        for label in SETTINGS[1:]:
            for r in (0, 1):
                base, v = t[(SETTINGS[0], r)], t[(label, r)]
                print(f"  {label[:20]:20s} r{r} over the defaults: "
                      + " ".join(f"{c} {v[c] - base[c]:+6.2f}" for c in COLS))


if __name__ == "__main__":
    main(sys.argv[1:])
