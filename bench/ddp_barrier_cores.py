"""After a straggler's barrier releases: which core each rank's training thread is on, and how
long it waits for one (issue 12, the straggler + barrier row).

Runs the DDP demo's job (its MLP, 2 gloo ranks, one intra-op thread each) in its own loop, as
``bench/ddp_held_wake.py`` does, with rank 1 spinning ``W`` ms at its forward's end, settings
interleaved each round (8 steps each after 2 warm-up steps): ``W`` 40 with a barrier before
backward, 40 without, 0 with. At the barrier's return and at every gradient hook (16 a
backward, about 0.5 ms apart) each training thread records the wall clock (``perf_counter``:
one clock for both processes), its CPU (``thread_time``), its run-queue wait (the second
field of ``/proc/thread-self/schedstat``) and the core it last ran on (field 39 of
``/proc/thread-self/stat``). The two ranks' samples are then paired in time: for each
interval between a rank's samples, the other rank's training thread is on the same core when
its nearest sample (in wall time) names the same core and it was in its backward then.

Prints per setting and rank (medians over steps, ms): the backward (barrier's return to last
hook) wall, CPU and run-queue wait; the share of that wall the two training threads sat on
one core, and the run-queue share of the wall in the intervals on one core and on different
cores. ``python bench/ddp_barrier_cores.py [ROUNDS] [EVERY]`` (default 6), alone under the CPU lock.

Measured 2026-12-07 (2 vCPUs, kernel 6.18; alone under the lock; 5 rounds each; W40 barrier /
W40 without / W0 barrier, rank 0 then 1). 05:41, load 1.0-1.3, every hook read (17 reads a
backward, which cost it about 2 ms of CPU: 9.3 against the demo's 7.0): on one core 0.63 /
0.67 of the backward after the 40 ms barrier, 0.00 without, 0.70 / 0.65 after the 0 ms one;
run-queue share of the wall there 0.49-0.53, elsewhere 0.14-0.27; run-queue wait 6.61 / 5.63
ms against 0.17 / 0.81 without. 05:49, load 1.5-1.8, the last hook only: on one core 0.15 /
0.18 (W0 0.08 / 0.07), run-queue 0.85 / 0.24 against 0.09 / 0.00; every 4th hook: 0.37 / 0.31
(W0 0.51 / 0.54), run-queue 1.28 / 1.99 against 0.10 / 0.45. The threads woke on one core
at 0.23-0.70 of the barrier's releases, never more than 0.42 without a barrier, and without
one they were never on one core during the backward (the other rank slept).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from ddp_held_wake import (_others, fresh_ddp, rank_done, rank_setup,  # bench/, as run
                           run_ranks)

SETTINGS = ((40.0, True), (40.0, False), (0.0, True))


def _rq() -> int:
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


def _core() -> int:
    with open("/proc/thread-self/stat") as f:
        s = f.read()
    return int(s[s.rindex(")") + 2:].split()[36])


def _rank(rank: int, port: int, plan: list, steps: int, every: int, q) -> None:
    import threading

    import torch
    import torch.distributed as dist

    from stepsim.demo.ddp_job import spin

    x, y = rank_setup(rank, port)
    pc, tt = time.perf_counter_ns, time.thread_time_ns
    out = []
    for ms, bar in plan:
        model, opt, params = fresh_ddp()
        samples: list = []
        me = threading.get_native_id()
        tids = [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]

        count = [0]

        def hook(grad):
            count[0] += 1
            if count[0] % every == 0:
                samples.append((pc(), tt(), _rq(), _core()))

        hs = [p.register_hook(hook) for p in params]
        rows = []
        for k in range(steps + 2):
            o = model(x)
            if ms and rank == 1:
                spin(ms)
            loss = torch.nn.functional.mse_loss(o, y)
            t1 = (pc(), tt(), _rq(), _core())
            if bar:
                dist.barrier()
            samples.clear()
            count[0] = 0
            samples.append((pc(), tt(), _rq(), _core()))
            o0 = _others(tids)
            loss.backward()
            t3, o1 = pc(), _others(tids)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if k >= 2:
                rows.append({"t1": t1, "s": list(samples), "t3": t3, "oth": o1 - o0})
        for h in hs:
            h.remove()
        dist.barrier()
        out.append(rows)
    rank_done(q, rank, out)


def _pair(a: dict, b: dict) -> tuple[float, float, float, float, float]:
    """For rank a's backward: (wall, rq, wall on b's core, rq on b's core, rq elsewhere) ns."""
    sa, sb = np.array(a["s"], float), np.array(b["s"], float)
    same_w = same_q = diff_w = diff_q = 0.0
    for (w0, _c0, q0, k0), (w1, _c1, q1, k1) in zip(sa[:-1], sa[1:]):
        mid = (w0 + w1) / 2
        inside = sb[0, 0] <= mid <= sb[-1, 0]
        j = int(np.argmin(np.abs(sb[:, 0] - mid)))
        on = inside and sb[j, 3] == k1
        if on:
            same_w, same_q = same_w + w1 - w0, same_q + q1 - q0
        else:
            diff_w, diff_q = diff_w + w1 - w0, diff_q + q1 - q0
    return sa[-1, 0] - sa[0, 0], sa[-1, 2] - sa[0, 2], same_w, same_q, diff_q


def main(rounds: int = 6, steps: int = 8, every: int = 1) -> None:
    plan = [s for _ in range(rounds) for s in SETTINGS]
    res = run_ranks(_rank, plan, steps, every)
    print(f"load average {os.getloadavg()[0]:.2f}; {rounds} rounds x {steps} steps a "
          "setting; medians over steps, ms")
    for s in SETTINGS:
        idx = [i for i, p in enumerate(plan) if p == s]
        for rk in (0, 1):
            v = []
            for i in idx:
                for a, b in zip(res[rk][i], res[1 - rk][i]):
                    wall, rq, sw, sq, dq = _pair(a, b)
                    cpu = a["s"][-1][1] - a["s"][0][1]
                    v.append((wall, cpu, rq, sw, sq, wall - sw, dq,
                              a["s"][0][3] == b["s"][0][3], a["oth"],
                              a["s"][-1][0] - b["s"][-1][0]))
            v = np.array(v, float)
            m = np.median(v, axis=0) / 1e6
            sh = v[:, 4].sum() / max(v[:, 3].sum(), 1.0)
            dh = v[:, 6].sum() / max(v[:, 5].sum(), 1.0)
            print(f"W{s[0]:2.0f} {'barrier' if s[1] else 'no barr'} r{rk}: bwd {m[0]:5.2f} "
                  f"cpu {m[1]:5.2f} rq {m[2]:5.2f} | on one core {v[:, 3].sum() / v[:, 0].sum():4.2f}"
                  f" of the wall, rq share there {sh:4.2f}, elsewhere {dh:4.2f} | same core at "
                  f"the start {v[:, 7].mean():4.2f} | gloo threads' CPU to backward's end {m[8]:5.2f}, "
                  f"last hook after the other's {m[9]:5.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 6, 8,
         int(sys.argv[2]) if len(sys.argv) > 2 else 1)
