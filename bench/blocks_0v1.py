"""0 against 1 DataLoader worker at torch's default intra-op threads, in alternating blocks
inside ONE process, so that the host's speed (which moved identical work ×1.6 between runs
minutes apart here, 2026-12-06) is shared by both settings on a seconds scale.

The job is fresh6's (issue 10, 2026-12-06): a 256×256 JPEG decoded, cropped, flipped, blurred,
resized to 64×64 and hashed per item, a 3-conv CNN at batch 64, SGD. Blocks of ``--block``
steps alternate 0, 1, 1, 0, 0, 1, ... between a ``num_workers=0`` loader and a persistent
1-worker loader; the first 3 steps of each block are left out (the worker's prefetched
batches, or its last batches still in flight). Per step it records the wall of ``next()`` and
of the train step, the CPU and run-queue wait of every thread of the main process
(``/proc/self/task/*/schedstat``) and of the worker process. Prints per block pair the 0 ÷ 1
step ratio and the main thread's batch CPU ÷ the worker's, then their geometric mean.

Run alone under the lock: ``flock /tmp/cpu-timing.lock python bench/blocks_0v1.py``.
"""
import argparse, glob, hashlib, io, json, math, os, random, statistics as st, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image, ImageFilter
from torch.utils.data import DataLoader, Dataset

SKIP = 3


class JpegDataset(Dataset):
    """fresh6's Dataset: decode, random crop + flip + blur, resize, hash, to tensor."""

    def __init__(self, n=100000, seed=0):
        rng = np.random.default_rng(seed)
        self.jpegs = []
        for _ in range(64):
            arr = (rng.random((256, 256, 3)) * 255).astype(np.uint8)
            arr[::8] = 0
            buf = io.BytesIO()
            Image.fromarray(arr).save(buf, format="JPEG", quality=85)
            self.jpegs.append(buf.getvalue())
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raw = self.jpegs[i % len(self.jpegs)]
        img = Image.open(io.BytesIO(raw)).convert("RGB")
        r = random.Random(i)
        x, y = r.randint(0, 64), r.randint(0, 64)
        img = img.crop((x, y, x + 192, y + 192))
        if r.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        img = img.filter(ImageFilter.GaussianBlur(1.5)).resize((64, 64))
        hashlib.sha256(raw * 8).digest()
        t = torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)
        return t, i % 10


class SmallNet(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


p = argparse.ArgumentParser()
p.add_argument("--block", type=int, default=8)
p.add_argument("--blocks", type=int, default=6, help="pairs of blocks")
p.add_argument("--json", action="store_true", help="print the raw rows as one JSON line too")
a = p.parse_args()

torch.manual_seed(0)
model = SmallNet()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ds = JpegDataset()


def train_step(batch):
    x, y = batch
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()


def sched(path):
    try:
        run, wait, _ = open(path).read().split()
        return int(run) / 1e3, int(wait) / 1e3
    except OSError:
        return 0.0, 0.0


def snap(pids):
    me = os.getpid()
    th = {int(t.split("/")[-1]): sched(t + "/schedstat") for t in glob.glob(f"/proc/{me}/task/*")}
    wk = {}
    for pid in pids:
        tot = [0.0, 0.0]
        for t in glob.glob(f"/proc/{pid}/task/*"):
            r, w = sched(t + "/schedstat")
            tot[0] += r
            tot[1] += w
        wk[pid] = tot
    return time.perf_counter() * 1e6, th, wk


inline = DataLoader(ds, batch_size=64, num_workers=0, shuffle=True)
l1 = DataLoader(ds, batch_size=64, num_workers=1, shuffle=True, persistent_workers=True)
it0, it1 = iter(inline), iter(l1)
pids = [w.pid for w in it1._workers]
me = os.getpid()
rows = []


def d(x, y):
    main = y[1].get(me, (0, 0))[0] - x[1].get(me, (0, 0))[0]
    team = sum(y[1][t][0] - x[1].get(t, (0, 0))[0] for t in y[1] if t != me)
    mwait = y[1].get(me, (0, 0))[1] - x[1].get(me, (0, 0))[1]
    twait = sum(y[1][t][1] - x[1].get(t, (0, 0))[1] for t in y[1] if t != me)
    wk = sum(y[2][p][0] - x[2][p][0] for p in pids)
    wkw = sum(y[2][p][1] - x[2][p][1] for p in pids)
    return dict(wall=y[0] - x[0], main=main, team=team, mwait=mwait, twait=twait, wk=wk, wkw=wkw)


for b in range(a.blocks * 2):
    w = b % 2 if (b // 2) % 2 == 0 else 1 - b % 2   # 0 1 1 0 0 1 1 0 ...
    it = it1 if w else it0
    for k in range(a.block):
        s0 = snap(pids)
        batch = next(it)
        s1 = snap(pids)
        train_step(batch)
        s2 = snap(pids)
        rows.append(dict(block=b, k=k, workers=w, next=d(s0, s1), train=d(s1, s2)))
if a.json:
    print(json.dumps(dict(threads=torch.get_num_threads(), t=time.time(), rows=rows)))
blocks = {}
for x in rows:
    if x["k"] >= SKIP:
        blocks.setdefault(x["block"], []).append(x)


def agg(b):
    R = blocks[b]
    w = R[0]["workers"]
    step = st.mean([x["next"]["wall"] + x["train"]["wall"] for x in R])
    batch = st.mean([x["next"]["main"] if w == 0 else x["next"]["wk"] + x["train"]["wk"] for x in R])
    return w, step, batch


A = [agg(b) for b in sorted(blocks)]
steps, batches = [], []
for i in range(0, len(A) - 1, 2):
    z, o = (A[i], A[i + 1]) if A[i][0] == 0 else (A[i + 1], A[i])
    steps.append(z[1] / o[1])
    batches.append(z[2] / o[2])
print(f"torch threads {torch.get_num_threads()}; per block pair, step 0 ÷ 1 worker:",
      " ".join(f"{r:.3f}" for r in steps))
print("   batch CPU, main thread at 0 ÷ the worker at 1:", " ".join(f"{r:.3f}" for r in batches))
for name, v in (("step", steps), ("batch CPU", batches)):
    g = math.exp(st.mean([math.log(r) for r in v]))
    print(f"geometric mean {name} ratio {g:.3f} over {len(v)} pairs")
