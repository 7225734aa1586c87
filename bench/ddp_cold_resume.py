"""A backward's CPU after a pause (issue 12: why the DDP demo's straggler rows ran long).

One process, the DDP demo's MLP (:func:`demo.ddp_job.build_mlp`, one intra-op thread, no
DDP): per round, for each pause (ms) and each way of pausing (``spin``: busy on
``perf_counter`` like the demo's straggler; ``sleep``), a training step whose forward is
followed by the pause, then backward and the optimizer. Prints per case the medians over the
rounds of the training thread's CPU (``thread_time``) in backward and in the optimizer, and
their ratio to the pause-0 case of the same way: what a rank that resumes after the pause
pays beyond the capture's backward (which follows its forward at once).

``python bench/ddp_cold_resume.py [ROUNDS]`` (default 25), under the timing lock.
Measured 2026-12-06 (2 vCPUs, KVM, L2 2 MiB per core, an L3 shared with other guests;
medians of 25 rounds, backward's ratio to pause 0, spin / sleep):
00:37 UTC, load 2.3: 1 ms 0.94 / 1.00, 3 ms 0.96 / 0.97, 10 ms 0.97 / 1.01, 20 ms 1.03 / 1.07,
40 ms 1.11 / 1.14 (5.9 / 5.8 ms at 0); the optimizer 1.28 / 1.30 at 40 ms.
00:22 UTC, load 3.0-3.6 (the scratch version): 10 ms 1.04 / 1.09, 20 ms 1.10 / 1.10, 40 ms
1.10 / 1.15. 00:21 UTC, load 2.6, 40 rounds: 40 ms 1.14 / 1.16; streaming 64 MiB through the
caches with no pause 1.06.
The data leave the caches while the thread is off them; a spin keeps the core, not the data.
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
