"""The main thread's batch at ``num_workers=0`` against a worker's at 1, at torch's default
intra-op threads (issue 10: a user's transformer at 2 threads, 0 workers predicted −13.2 %).

A user-like job: a 3-layer transformer encoder (d 192, 4 heads, sequence 96, batch 32, AdamW)
on a Dataset that hashes words in Python (``hashlib.blake2b``, ~1 ms of CPU a sample), each
setting in a fresh process (:data:`CONFIGS`: ``num_workers`` 0 or 1 × torch threads 1 or 2 ×
``OMP_WAIT_POLICY`` unset or ``passive``, read by libgomp at start-up, so a process each),
rotated order per round. Per step, after ``WARM`` steps:

* ``sample``: the batch's CPU on the thread that made it, summed over its samples inside
  ``__getitem__`` (``time.thread_time``): the same code measured the same way on the main
  thread (0 workers) and in the worker (1 worker);
* ``next``: the main thread's CPU and wall in ``next()`` (at 0 workers: the batch, its
  collate and the fetch);
* ``team``: the CPU of the process's other threads (``/proc/self/task/*/schedstat``, ns: the
  intra-op team) during ``next()`` and during the step; a running thread's count is updated
  at scheduler ticks, so a single step's reading is off by up to a tick: these two are means
  over the steps, the others medians;
* ``step``: the main thread's CPU and wall of the step outside ``next()``, and its run-queue
  wait (schedstat's second field).

Prints per setting the medians over the round's steps (ms), then per round the ratios
``sample(0 workers) / sample(1 worker)`` at each threads × policy, the whole step's wall at 0
against 1, and the 0-worker step outside ``next()`` against the model's closed form from the
1-worker one (its wall × ``s^T``, ``s`` the team's share of a core there: 1 where the model's
inversion is right), and their spread over rounds. Run under the CPU lock: ``python -m stepsim.bench.inline_threads [ROUNDS] [STEPS]``
(defaults 2, 25); ``--one W T POLICY STEPS``: one child, medians as JSON; ``--spin [STEPS]``:
the spin's cost on the batch within one process (:func:`_spin`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

CONFIGS = [(w, t, p) for p in ("default", "passive") for t in (2, 1) for w in (0, 1)]
"""(num_workers, torch threads, OMP_WAIT_POLICY) of each child process."""
WARM = 5
FIELDS = ("sample", "next_cpu", "next_wall", "team_next", "step_cpu", "step_wall",
          "team_step", "step_wait")


def _sched(tid: int) -> tuple[int, int]:
    """(on-CPU ns, run-queue wait ns) of thread ``tid`` of this process."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        a = f.read().split()
    return int(a[0]), int(a[1])


def _others(main: int) -> int:
    """On-CPU ns of this process's threads other than ``main``."""
    tot = 0
    for t in os.listdir("/proc/self/task"):
        if int(t) != main:
            try:
                tot += _sched(int(t))[0]
            except OSError:
                pass
    return tot


def _child(workers: int, threads: int, steps: int, spin_pairs: bool = False):
    import hashlib

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Hashing(Dataset):
        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            c0 = time.thread_time_ns()
            words = np.random.default_rng(i).integers(0, 1 << 30, 200)
            toks = [int.from_bytes(hashlib.blake2b(str(w).encode(), digest_size=4).digest(),
                                   "little") % 4096 for w in words for _ in range(3)]
            x = torch.tensor(toks[:96], dtype=torch.long)
            return x, int(words[0] % 10), time.thread_time_ns() - c0

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(4096, 192)
            self.pos = nn.Parameter(torch.zeros(1, 96, 192))
            layer = nn.TransformerEncoderLayer(192, 4, 768, batch_first=True, dropout=0.0)
            self.enc = nn.TransformerEncoder(layer, 3)
            self.head = nn.Linear(192, 10)

        def forward(self, x):
            return self.head(self.enc(self.emb(x) + self.pos).mean(1))

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    it = iter(DataLoader(Hashing(), batch_size=32, num_workers=workers, shuffle=True))
    main = threading.get_native_id()
    rows = []
    for k in range(WARM + steps):
        if spin_pairs and k % 2:
            time.sleep(SLEEP_S)             # the team's spin runs out before this batch
        c0, w0, o0 = time.thread_time_ns(), time.perf_counter_ns(), _others(main)
        x, y, sc = next(it)
        c1, w1, o1 = time.thread_time_ns(), time.perf_counter_ns(), _others(main)
        q0 = _sched(main)[1]
        opt.zero_grad(set_to_none=True)
        lossf(model(x), y).backward()
        opt.step()
        c2, w2, o2 = time.thread_time_ns(), time.perf_counter_ns(), _others(main)
        q1 = _sched(main)[1]
        if k >= WARM:
            rows.append((int(sc.sum()), c1 - c0, w1 - w0, o1 - o0, c2 - c1, w2 - w1, o2 - o1,
                         q1 - q0))
    a = np.array(rows, dtype=float) / 1e6
    if spin_pairs:
        return a
    return {f: float(np.mean(a[:, i]) if f.startswith("team") else np.median(a[:, i]))
            for i, f in enumerate(FIELDS)}


SLEEP_S = 0.03
"""``--spin``: the sleep (s) before every other step's ``next()``, past libgomp's spin
(6-7 ms measured after a step)."""


def _spin(steps: int) -> None:
    """``--spin``: one process at 0 workers on 2 threads; every other batch made right after
    the step (the team spinning beside it) and the others after :data:`SLEEP_S` of sleep (the
    team asleep), so a pair's ratio holds the spin's cost with the host's drift over seconds
    cancelled."""
    a = _child(0, 2, steps, spin_pairs=True)
    if WARM % 2:
        a = a[1:]
    n = len(a) // 2 * 2
    hot, cold = a[0:n:2], a[1:n:2]           # odd steps slept: rows from an even step
    r = hot[:, 0] / cold[:, 0]
    print(f"{n // 2} pairs: batch CPU beside the spinning team {np.median(hot[:, 0]):.2f} ms "
          f"(team CPU in next() {np.mean(hot[:, 3]):.2f} ms), after the sleep "
          f"{np.median(cold[:, 0]):.2f} ms (team {np.mean(cold[:, 3]):.2f} ms); per pair "
          f"ratio P10/median/P90 {'/'.join(f'{v:.3f}' for v in np.percentile(r, [10, 50, 90]))}")


def _run(cfg, steps: int) -> dict:
    w, t, p = cfg
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if p != "default":
        env["OMP_WAIT_POLICY"] = p
    got = subprocess.run([sys.executable, "-m", "stepsim.bench.inline_threads", "--one", str(w),
                          str(t), p, str(steps)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def _share(m: dict, threads: int) -> float:
    """Each team thread's share of a core through the step outside ``next()``: the main
    thread's and the team's CPU over ``threads × wall`` (:func:`calibration.cpu.stalled_team_wall`'s
    ``s``; the step's work alone is its wall × ``s^threads`` there, the model's ``γ`` 1)."""
    return min((m["step_cpu"] + m["team_step"]) / (threads * m["step_wall"]), 1.0)


def main(argv=None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    if argv[:1] == ["--one"]:
        print(json.dumps(_child(int(argv[1]), int(argv[2]), int(argv[4]))))
        return 0
    if argv[:1] == ["--spin"]:
        _spin(int(argv[1]) if len(argv) > 1 else 60)
        return 0
    rounds, steps = ([int(a) for a in argv] + [2, 25][len(argv):])[:2]
    res = {c: [] for c in CONFIGS}
    for r in range(rounds):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for cfg in order:
            res[cfg].append(_run(cfg, steps))
            m = res[cfg][-1]
            print(f"round {r} w{cfg[0]} t{cfg[1]} {cfg[2]:8} " + "  ".join(
                f"{f} {m[f]:7.2f}" for f in FIELDS), flush=True)
    print(f"{rounds} rounds × {steps} steps; per round: sample CPU at 0 workers ÷ at 1 worker, "
          "step wall at 0 ÷ at 1")
    for p in ("default", "passive"):
        for t in (2, 1):
            s = [a["sample"] / b["sample"] for a, b in zip(res[(0, t, p)], res[(1, t, p)])]
            n = [a["next_cpu"] / b["sample"] for a, b in zip(res[(0, t, p)], res[(1, t, p)])]
            sw = [(a["next_wall"] + a["step_wall"]) / (b["next_wall"] + b["step_wall"])
                  for a, b in zip(res[(0, t, p)], res[(1, t, p)])]
            inv = [a["step_wall"] / (b["step_wall"] * _share(b, t) ** t)
                   for a, b in zip(res[(0, t, p)], res[(1, t, p)])]
            print(f"threads {t} {p:8}: sample x{' '.join(f'{v:.3f}' for v in s)}  "
                  f"next CPU/worker sample x{' '.join(f'{v:.3f}' for v in n)}  "
                  f"step wall x{' '.join(f'{v:.3f}' for v in sw)}  "
                  f"0-worker step / 1-worker step x s^T x{' '.join(f'{v:.3f}' for v in inv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
