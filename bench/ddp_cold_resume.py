"""A backward's CPU after a pause (issue 12: why the DDP demo's straggler rows ran long).

One process, the DDP demo's MLP (:func:`demo.ddp_job.build_mlp`, one intra-op thread, no
DDP): per round, for each pause (ms) and each way of pausing (``spin``: busy on
``perf_counter`` like the demo's straggler; ``sleep``), a training step whose forward is
followed by the pause, then backward and the optimizer. Prints per case the medians over the
rounds of the training thread's CPU (``thread_time``) in backward and in the optimizer, and
their ratio to the pause-0 case of the same way: what a rank that resumes after the pause
pays beyond the capture's backward (which follows its forward at once).

``python bench/ddp_cold_resume.py [ROUNDS]`` (default 25), under the timing lock.
Measured 2026-12-06 (2 vCPUs, KVM, L2 2 MiB per core, L3 shared with other guests; medians of
25 rounds): 00:21 UTC, load 3.0-3.6: backward ×1.00 (1 ms), ×1.00 (3 ms), ×1.04-1.08
(10 ms), ×1.10-1.15 (20 ms), ×1.10-1.15 (40 ms) against 6.45-6.70 ms at 0; the optimizer
×1.13-1.19 at 40 ms; spin and sleep alike. An earlier run (00:21, 40 rounds, load 2.6):
backward ×1.14 after a 40 ms spin, ×1.16 after a 40 ms sleep, ×1.06 after streaming 64 MiB
through the caches with no pause. The data leave the caches while the thread is off them;
a spin keeps the core but not the data.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

PAUSES_MS = (0, 1, 3, 10, 20, 40)


def main(rounds: int = 25) -> None:
    import torch

    from stepsim.demo.ddp_job import BATCH, WIDTH, build_mlp, spin

    torch.set_num_threads(1)
    m = build_mlp()
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    tt = time.thread_time

    def step(ms: float, how: str) -> tuple[float, float]:
        loss = torch.nn.functional.mse_loss(m(x), y)
        if ms:
            spin(ms) if how == "spin" else time.sleep(ms / 1e3)
        c0 = tt()
        loss.backward()
        c1 = tt()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return (c1 - c0) * 1e3, (tt() - c1) * 1e3

    for _ in range(5):
        step(0, "spin")
    cases = [(ms, how) for how in ("spin", "sleep") for ms in PAUSES_MS]
    got = {c: [] for c in cases}
    for _ in range(rounds):
        for c in cases:
            got[c].append(step(*c))
    print(f"load average {os.getloadavg()[0]:.1f}, {rounds} rounds; medians (ms) and ratio "
          "to the same way's pause 0")
    for how in ("spin", "sleep"):
        b0, o0 = np.median(np.array(got[(0, how)]), axis=0)
        for ms in PAUSES_MS:
            b, o = np.median(np.array(got[(ms, how)]), axis=0)
            print(f"{how:5s} {ms:3d} ms: backward {b:.2f} (x{b / b0:.3f})  optimizer {o:.2f} "
                  f"(x{o / o0:.3f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 25)
