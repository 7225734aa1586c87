"""The main thread's training step after making its batch itself against after receiving it
from a worker (issue 10: the 0-worker rows predicted low in every demo).

The demo's workload (:mod:`demo.workload`: its CNN and SGD on one intra-op thread, a batch of
:data:`demo.workload.BATCH_SIZE` JPEG samples decoded and augmented, stacked) in one process,
four settings of where the batch comes from, one step of each per cycle in rotated order,
``rounds × steps`` cycles (a ratio is taken within a cycle: the host's drift over seconds
cancels):

* ``inline``: the main thread decodes the batch, then trains on it (``num_workers=0``);
* ``handover``: a DataLoader worker made it (``num_workers=1``, persistent); the main thread
  slept before ``next()`` until the worker had filled its prefetch slots, so the step runs
  with the worker idle: no co-runner, only the hand-over differs from ``inline``;
* ``corun``: the same loader without the sleep: ``next()`` sends the worker a new index and
  it decodes beside the step (the demo's calibration setting);
* ``warm``: the main thread trains on batches it decoded at the start (no decode between two
  steps, no worker): the decode's own effect on the step, without a hand-over.

Per step: the main thread's CPU (``time.thread_time``), minor page faults and system CPU
(``getrusage(RUSAGE_THREAD)``) over the step (forward, backward, SGD), and the batch's CPU on
the thread that made it (measured inside the worker for the loader settings). Prints per
setting the medians and the ratios to the same cycle's ``handover`` step: the cycles'
P10 / median / P90, and the median's bootstrap P10–P90. (Every setting but ``corun`` sleeps
before its step so the worker is idle; sleeping costs no CPU.)

``--fresh``: each of ``inline``, ``handover`` and ``corun`` in a fresh process of its own, as
the demo runs each ``num_workers`` (a process's heap layout sets how much its step re-faults,
:mod:`calibration.page_faults`, which one process shared by the settings cannot show),
``rounds`` rounds of one process each, ``steps`` steps; ratios to the same round's ``corun``
process (the demo's calibration setting). The children inherit the environment, so
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=268435456:glibc.malloc.trim_threshold=1073741824``
before the command holds glibc's thresholds (nothing is given back to the kernel, so no step
re-faults) and parts the page faults from the rest of a setting's cost.

Run under the CPU-timing lock with the package importable:
``flock /tmp/cpu-timing.lock python -m stepsim.bench.same_thread [--fresh] [rounds] [steps]``
(default 8 × 8 = 64 cycles). Record ``uptime`` beside it.
"""
from __future__ import annotations

import resource
import sys
import time

import numpy as np

SETTINGS = ("inline", "handover", "corun", "warm")


class BatchSet:
    """Whole batches as items (the DataLoader runs with ``batch_size=None``): item ``b`` is
    batch ``b`` of the demo's dataset, stacked, with the CPU (s) and minor faults its making
    took on the thread that made it."""

    def __init__(self, ds, batch: int):
        self.ds, self.batch = ds, batch

    def __len__(self) -> int:
        return len(self.ds) // self.batch

    def __getitem__(self, b: int):
        import torch
        c0, f0 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        items = [self.ds[b * self.batch + j] for j in range(self.batch)]
        x = torch.stack([t for t, _ in items])
        y = torch.tensor([c for _, c in items])
        return x, y, time.thread_time() - c0, \
            resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0


def _worker_init(_):
    import torch
    torch.set_num_threads(1)


def _rows(settings, cycles: int) -> dict:
    """Per setting, rows of (step CPU s, faults, batch CPU s, faults, step system CPU s): 3
    warm-up cycles, then
    ``cycles`` cycles of one step of each of ``settings``, their order rotated; a DataLoader
    worker only where a setting takes its batch from one."""
    import torch
    from torch.utils.data import DataLoader

    from stepsim.demo.workload import BATCH_SIZE, N_IMAGES, JpegDataset, make_jpegs, make_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, loss_fn = make_model(), torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    n_batches = (cycles + 4) * 2 + 8
    bs = BatchSet(JpegDataset(make_jpegs(N_IMAGES, 0), n_batches * BATCH_SIZE, 0), BATCH_SIZE)
    warm = [bs[b][:2] for b in range(4)] if "warm" in settings else []
    it = iter(DataLoader(bs, batch_size=None, num_workers=1, prefetch_factor=2,
                         persistent_workers=True, worker_init_fn=_worker_init)) \
        if {"handover", "corun"} & set(settings) else None
    nxt = {"b": 0}

    def step(x, y):
        r0, c0 = resource.getrusage(resource.RUSAGE_THREAD), time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()
        c1, r1 = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD)
        return c1 - c0, r1.ru_minflt - r0.ru_minflt, r1.ru_stime - r0.ru_stime

    idle = {"s": 0.3}                       # wall s for the worker to finish its slots

    def one(setting: str, k: int):
        if setting != "corun" and it is not None:
            time.sleep(idle["s"])           # the worker idle: nothing runs beside this step
        if setting == "inline":
            x, y, bc, bf = bs[nxt["b"] % len(bs)]
            nxt["b"] += 1
        elif setting == "warm":
            (x, y), bc, bf = warm[k % len(warm)], float("nan"), float("nan")
        else:
            x, y, bc, bf = next(it)
            idle["s"] = 2.5 * bc + 0.01
        sc, sf, ss = step(x, y)
        return sc, sf, bc, bf, ss

    for k in range(3):                      # warm-up: the first steps fault in the heap
        for s in settings:
            one(s, k)
    rows = {s: [] for s in settings}
    for c in range(cycles):
        r = c % len(settings)
        for s in settings[r:] + settings[:r]:
            rows[s].append(one(s, c))
    return rows


FRESH = ("inline", "handover", "corun")
"""The settings of ``--fresh``, each in a process of its own (its own heap)."""


def _fresh(rounds: int, steps: int) -> dict:
    """``rounds`` rounds of one fresh process per :data:`FRESH` setting (order rotated), each
    ``steps`` steps after its warm-up; per setting, an array of each process's medians (step
    CPU s, faults, batch CPU s, faults)."""
    import json
    import subprocess

    out = {s: [] for s in FRESH}
    for r in range(rounds):
        for s in FRESH[r % 3:] + FRESH[:r % 3]:
            got = subprocess.run([sys.executable, "-m", "stepsim.bench.same_thread", "--one", s,
                                  str(steps)], capture_output=True, text=True, check=True)
            a = np.array(json.loads(got.stdout.strip().splitlines()[-1]), dtype=float)
            out[s].append(np.median(a, axis=0))
    return {s: np.array(v) for s, v in out.items()}


def main(argv=None) -> int:
    argv = list(argv if argv is not None else sys.argv[1:])
    if argv[:1] == ["--one"]:               # a child of --fresh: one setting, rows as JSON
        import json
        rows = _rows((argv[1],), int(argv[2]))[argv[1]]
        print(json.dumps(rows))
        return 0
    fresh = argv[:1] == ["--fresh"]
    args = [int(a) for a in argv[fresh:]]
    rounds, steps = (args + [8, 8][len(args):])[:2]
    if fresh:
        rows = _fresh(rounds, steps)
        print(f"--fresh: {rounds} rounds of one process per setting, {steps} steps each; a row "
              "is one process's medians; ratio: to the same round's handover process")
        _print(rows, rounds, base="corun")
        return 0
    rows = _rows(SETTINGS, rounds * steps)
    _print({s: np.array(v, dtype=float) for s, v in rows.items()}, rounds * steps)
    return 0


def _trio(v) -> str:
    """P10 / median / P90 of ``v``."""
    return "/".join(f"{x:.3f}" for x in np.percentile(v, [10, 50, 90]))


def _boot(v, seed: int = 0) -> str:
    """The median of ``v`` with the P10–P90 of its bootstrap (the median's own spread)."""
    rng = np.random.default_rng(seed)
    b = [np.median(v[rng.integers(0, len(v), len(v))]) for _ in range(400)]
    return f"{np.median(v):.3f} ({np.percentile(b, 10):.3f}-{np.percentile(b, 90):.3f})"


def _print(rows: dict, cycles: int, base: str = "handover") -> None:
    """Per setting: medians, and each cycle's (or round's) ratio to the same one's ``base``
    setting."""
    print(f"{cycles} cycles; ratio: to the same cycle's {base} step; per-cycle ratios "
          "P10/median/P90, and their median (bootstrap P10-P90)")
    base = rows[base]
    for s, a in rows.items():
        sr = a[:, 0] / base[:, 0]
        line = (f"{s:9} step CPU {1e3 * np.median(a[:, 0]):6.2f} ms  x{_boot(sr)}  cycles "
                f"{_trio(sr)}  faults/step median {np.median(a[:, 1]):.0f} mean {np.mean(a[:, 1]):.0f}"
                f"  system CPU {1e3 * np.median(a[:, 4]):5.2f} ms")
        if s != "warm":
            br = a[:, 2] / base[:, 2]
            line += (f"  | batch CPU {1e3 * np.median(a[:, 2]):6.2f} ms  x{_boot(br)}  faults "
                     f"{np.median(a[:, 3]):.0f}")
        print(line)


if __name__ == "__main__":
    sys.exit(main())
