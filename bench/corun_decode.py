"""The demo's batch beside a co-runner on the other vCPU, paired within seconds (issue 10:
is the 0-worker runs' lower CPU a co-run cost?).

Thread CPU of one demo batch (:data:`demo.workload.BATCH_SIZE` JPEG samples decoded and
augmented, :class:`demo.workload.JpegDataset`) on process A (pinned to vCPU 0) beside a
persistent co-runner B (pinned to vCPU 1) in mode idle / alu (a pure-Python loop, no memory
traffic) / decode (the same decode, continuous) / duty (decode, then sleep as long: the other
vCPU halts and wakes every sample); and A itself sleeping between its batches ("self-duty",
B idle) or 2 ms after every sample ("self-slices", B idle). The conditions rotate every
round; each is a ratio to the same round's idle (the host's drift over seconds cancels).
Measured 2026-12-06 14:21-14:25 (100 rounds × 2 batches, alone under the lock, load
2.0 → 1.5): decode ×1.018 (bootstrap 0.995-1.033), alu ×0.992, duty ×1.004, self-duty
×1.010, self-slices ×1.055 (1.026-1.068), while the batch took 117-185 ms (P10-P90) from
round to round (docs/measurements.md, "The 0-worker runs' lower CPU").

Run under the CPU-timing lock with the package importable (2 vCPUs):
``flock /tmp/cpu-timing.lock python -m stepsim.bench.corun_decode ROUNDS PER OUT.json``
(e.g. 100 2: about 4 minutes). Record ``uptime`` beside it.
"""
import os, sys, time, json
os.environ["OMP_NUM_THREADS"] = "1"
import multiprocessing as mp
import numpy as np

def corunner(mode, ready):
    import torch; torch.set_num_threads(1)
    from stepsim.demo.workload import JpegDataset, make_jpegs
    os.sched_setaffinity(0, {1})
    ds = JpegDataset(make_jpegs(64, 1), 10**9, 1); ready.set(); k = 0
    while True:
        m = mode.value
        if m in (0, 4, 5): time.sleep(0.005)
        elif m == 1:
            s = 0
            for i in range(100000): s += i ^ (i >> 3)
        elif m == 2: ds[k]; k += 1
        elif m == 3:
            t = time.perf_counter(); ds[k]; k += 1; time.sleep(time.perf_counter() - t)

if __name__ == "__main__":
    import torch; torch.set_num_threads(1)
    from stepsim.demo.workload import JpegDataset, make_jpegs
    rounds = int(sys.argv[1]); per = int(sys.argv[2])
    mode, ready = mp.Value("i", 0), mp.Event()
    p = mp.Process(target=corunner, args=(mode, ready), daemon=True); p.start(); ready.wait()
    os.sched_setaffinity(0, {0})
    ds = JpegDataset(make_jpegs(64, 0), 10**9, 0)
    names = ["idle", "alu", "decode", "duty", "self-duty", "self-slices"]
    res = []; t0 = time.time(); k = 0
    for r in range(rounds):
        conds = list(range(6)); order = conds[r % 6:] + conds[:r % 6]
        for m in order:
            mode.value = m; time.sleep(0.02)
            for _ in range(per):
                c = time.thread_time_ns(); w = time.perf_counter_ns()
                if m == 5:
                    for i in range(32):
                        ds[k * 32 + i]; time.sleep(0.002)
                else:
                    for i in range(32): ds[k * 32 + i]
                k += 1
                cpu = (time.thread_time_ns() - c) / 1e6
                res.append((r, m, cpu, (time.perf_counter_ns() - w) / 1e6, time.time() - t0))
                if m == 4: time.sleep(cpu / 1e3)
    mode.value = 0
    json.dump(res, open(sys.argv[3], "w"))
    a = np.array(res)
    base = {r: np.median(a[(a[:, 0] == r) & (a[:, 1] == 0), 2]) for r in range(rounds)}
    for m in range(6):
        sel = a[:, 1] == m
        rat = np.array([np.median(a[(a[:, 0] == r) & sel, 2]) / base[r] for r in range(rounds)])
        bo = [np.median(rat[np.random.default_rng(i).integers(0, len(rat), len(rat))]) for i in range(300)]
        print(f"A beside {names[m]:11}: batch CPU med {np.median(a[sel, 2]):6.1f} ms (P10-P90 {np.percentile(a[sel,2],10):.1f}-{np.percentile(a[sel,2],90):.1f}) "
              f"ratio to the round's idle: median {np.median(rat):.3f} (boot P10-P90 {np.percentile(bo,10):.3f}-{np.percentile(bo,90):.3f}; rounds P10-P90 {np.percentile(rat,10):.3f}-{np.percentile(rat,90):.3f})")
