"""The training step's and the batch's CPU at 2 against 3 runnable threads on 2 cores, in one
run (issue 10, resid17: which lane pays past the cores?).

One process loops the demo's training step (:func:`demo.workload.make_model`, SGD, a fixed
batch; the DataLoader's main thread without its ``next()``), and two processes each produce the
demo's batches (:class:`demo.workload.JpegDataset`, :data:`demo.workload.BATCH_SIZE` samples
stacked, as a worker does), all at one intra-op thread, none pinned. Every ``block`` seconds
the second producer is switched on or off (off: it sleeps, not runnable), so the step runs
beside one producer (``R = 2``, as at ``num_workers=1`` with its input ready) or two (``R = 3``,
as at 2 workers). Each lane's thread CPU per item (``time.thread_time``) is taken per block
(median of the items that began and ended in it); a block at ``R = 3`` is divided by the mean
of the ``R = 2`` blocks either side of it, so the host's drift over seconds cancels.

Prints per lane the ratio (median over blocks, P10–P90) and what the model charges at its
prior midpoints (``host.interference`` 0.08 on the other core's busy share, ``host.oversub``
0.08 × (1 − cores/R)): the same factor for both lanes; and the two lanes' ratio within each
block (both ran at once, so the host's speed in that block cancels), whose change the model
puts at ×1.

Run under the CPU-timing lock with the package importable, 2 vCPUs:
``flock /tmp/cpu-timing.lock python bench/lane_corun.py [block_s] [blocks]`` (default 4 s,
13 blocks: about 1 minute). Record ``uptime`` beside it.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _train(log, stop):
    import torch
    torch.set_num_threads(1)
    from stepsim.demo.workload import BATCH_SIZE, CLASSES, CROP_PX, make_model
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lf = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH_SIZE, 3, CROP_PX, CROP_PX, generator=g)
    y = torch.randint(0, CLASSES, (BATCH_SIZE,), generator=g)
    while not stop.is_set():
        t0, c0 = time.time(), time.thread_time()
        opt.zero_grad(set_to_none=True)
        lf(model(x), y).backward()
        opt.step()
        log.put(("step", t0, time.time(), time.thread_time() - c0))


def _produce(k, on, log, stop):
    import torch
    torch.set_num_threads(1)
    from stepsim.demo.workload import BATCH_SIZE, JpegDataset, make_jpegs
    ds = JpegDataset(make_jpegs(64, k), 10 ** 9, k)
    i = 0
    while not stop.is_set():
        if not on.value:
            time.sleep(0.002)
            continue
        t0, c0 = time.time(), time.thread_time()
        torch.stack([ds[i + j][0] for j in range(BATCH_SIZE)])
        i += BATCH_SIZE
        log.put((f"batch{k}", t0, time.time(), time.thread_time() - c0))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    block = float(argv[0]) if argv else 4.0
    blocks = int(argv[1]) if len(argv) > 1 else 13
    import torch   # imported once, before the fork: the children share it

    from stepsim.demo.workload import BATCH_SIZE
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    log, stop = ctx.Queue(), ctx.Event()
    on = [ctx.Value("i", 1), ctx.Value("i", 0)]
    procs = [ctx.Process(target=_train, args=(log, stop))]
    procs += [ctx.Process(target=_produce, args=(k, on[k], log, stop)) for k in range(2)]
    for p in procs:
        p.start()
    seen, recs = set(), []
    while len(seen) < 2:                  # until the step and the first producer have run
        recs.append(log.get())
        seen.add(recs[-1][0][:5])
    edges = []
    for b in range(blocks):               # R = 2, 3, 2, 3, ..., 2
        on[1].value = b % 2
        t = time.time()
        time.sleep(block)
        edges.append((t, time.time(), 2 + b % 2))
    stop.set()
    while any(p.is_alive() for p in procs) or not log.empty():
        try:
            recs.append(log.get(timeout=0.5))
        except Exception:
            pass
    for p in procs:
        p.join()
    # a block's items: those that began 0.3 s after its start and ended before its end
    per = {"step": [], "batch": []}
    for t0, t1, r in edges:
        for lane in per:
            v = [c for name, s, e, c in recs if name.startswith(lane) and s >= t0 + 0.3 and e <= t1]
            per[lane].append(float(np.median(v)) * 1e3 if v else np.nan)
    print(f"blocks of {block:.0f} s, R per block {[e[2] for e in edges]}, {len(recs)} items "
          f"(batches of {BATCH_SIZE} samples)")
    model = (1 + 0.08 * 1) / (1 + 0.08 * 1) * (1 + 0.08 * (1 - 2 / 3))
    per["batch/step"] = list(np.array(per["batch"]) / np.array(per["step"]))   # one block's
    for lane, v in per.items():
        v = np.array(v)
        ratios = [v[b] / ((v[b - 1] + v[b + 1]) / 2) for b in range(1, blocks - 1, 2)]
        print(f"{lane}: CPU ms per item, R=2 blocks {np.nanmedian(v[0::2]):.1f}, R=3 blocks "
              f"{np.nanmedian(v[1::2]):.1f}; R=3 / R=2 (bracketed) median x{np.nanmedian(ratios):.3f} "
              f"(P10-P90 {np.nanpercentile(ratios, 10):.3f}-{np.nanpercentile(ratios, 90):.3f}, "
              f"{len(ratios)} blocks); model x{1.0 if '/' in lane else model:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
