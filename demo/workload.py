"""The demo's real training workload, run with torch on the CPU, or on a GPU where torch sees one.

A small CNN classifies generated images. Each sample is stored as JPEG bytes; the dataset's
``__getitem__`` does real per-sample CPU work: JPEG decode (Pillow), a random resized crop,
a random flip and normalisation, as a vision input pipeline does. The training step runs with
one intra-op thread (``torch.set_num_threads(1)``) so the host thread is one CPU consumer, as
DataLoader workers are one thread each (PyTorch's ``_worker_loop`` sets one thread per worker).

Where ``torch.cuda.is_available()`` (and ``--device`` is not ``cpu``) the model trains on the GPU:
the DataLoader pins its batches (``pin_memory=True``) and each batch is copied host to device
with ``non_blocking=True``, so the trace holds real H2D copies, kernels and the host's launches.

Run as ``python -m demo.workload --num-workers N --out DIR`` to capture one run with the
harness (:mod:`calibration.capture`): ``DIR/trace.json.gz`` and ``DIR/sidecar.json``.
"""
from __future__ import annotations

import argparse
import io
import sys

import numpy as np

from stepsim.calibration.run_drift import SCORE_AFTER_STEPS

IMAGE_PX = 320      # stored image side (pixels)
CROP_PX = 64       # training crop side (pixels)
BATCH_SIZE = 32
N_IMAGES = 512      # distinct images; the dataset cycles over them
CLASSES = 10
PROBE_STEPS = 8     # recorded steps of the optional probe at a second num_workers
AFTER_STEPS = SCORE_AFTER_STEPS
"""Steps timed after the profiled window with the profiler stopped (and, with workers,
``num_workers × prefetch_factor`` more, since that many can be drained: :func:`after_steps`,
the advice of :data:`calibration.run_drift.SCORE_AFTER_STEPS`): a validation scores these
(the steps as the user pays them, without the profiler's per-op cost; :mod:`calibration.measure`),
less the first ones that drain the prefetch queue the workers filled while the profiler's stop
paused the loop (:func:`calibration.run_drift.settled_after`: 3 of them at ``num_workers=1``
here, so 6 after-steps left 3 to score).
At ``num_workers=0`` the main thread decodes and augments each batch under the profiler. In two
quick demo runs here the profiled steps at ``num_workers=0`` took 1.40× and 0.97× the
unprofiled ones beside them: what moved was the machine (load average 1.4, then 3-4), not a
profiler cost this demo could measure."""


def after_steps(num_workers: int, prefetch_factor: int) -> int:
    """Steps the demo times after its profiled window: :data:`AFTER_STEPS` past the
    ``num_workers × prefetch_factor`` batches the first of them can drain (none without
    workers)."""
    return AFTER_STEPS + (num_workers * prefetch_factor if num_workers > 0 else 0)


def make_jpegs(n: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEG-encoded RGB images of ``IMAGE_PX``² with smooth random content (bytes)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:IMAGE_PX, 0:IMAGE_PX] / IMAGE_PX
    for _ in range(n):
        f = rng.uniform(1, 6, size=(3, 2))
        ph = rng.uniform(0, 6.28, size=3)
        chans = [np.sin(f[c, 0] * 6.28 * xx + f[c, 1] * 6.28 * yy + ph[c]) for c in range(3)]
        img = (np.stack(chans, -1) * 100 + 128 + rng.normal(0, 20, (IMAGE_PX, IMAGE_PX, 3)))
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class JpegDataset:
    """Map-style dataset of ``length`` samples over the given JPEGs: decode, random resized
    crop, Gaussian blur, colour jitter, resize to ``CROP_PX``, random horizontal flip, normalise. Returns (float32 tensor
    [3, CROP_PX, CROP_PX], int label)."""

    def __init__(self, jpegs: list[bytes], length: int, seed: int = 0):
        self.jpegs, self.length, self.seed = jpegs, length, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        import torch
        from PIL import Image, ImageEnhance, ImageFilter

        rng = np.random.default_rng((self.seed, i))
        img = Image.open(io.BytesIO(self.jpegs[i % len(self.jpegs)])).convert("RGB")
        scale = rng.uniform(0.5, 1.0)
        side = int(IMAGE_PX * scale)
        x0, y0 = rng.integers(0, IMAGE_PX - side + 1, size=2)
        img = img.crop((int(x0), int(y0), int(x0) + side, int(y0) + side))
        img = img.filter(ImageFilter.GaussianBlur(radius=1.0))
        img = ImageEnhance.Color(img).enhance(float(rng.uniform(0.7, 1.3)))
        img = img.resize((CROP_PX, CROP_PX), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.float32) / 255.0
        if rng.random() < 0.5:
            arr = arr[:, ::-1]
        arr = (arr - 0.5) / 0.25
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))), int(i % CLASSES)


def make_model():
    """A small CNN (three conv blocks, ~25 k parameters)."""
    import torch.nn as nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.MaxPool2d(2))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 48),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, CLASSES))


def run(num_workers: int, out_dir: str, active: int = 8, seed: int = 0,
        prefetch_factor: int = 2, probe_workers: int | None = None,
        threads: int | None = 1, batch_size: int | None = None,
        probe_batch_size: int | None = None, device: str = "auto") -> None:
    """Train the CNN with the given ``num_workers`` and ``batch_size`` (None: the demo's),
    capturing ``active`` profiled steps (then a probe at ``probe_workers`` or at
    ``probe_batch_size``, if given); ``threads``: torch's intra-op threads (None: torch's
    default, one per core); ``device``: ``auto`` (CUDA where torch sees a GPU), ``cpu`` or
    ``cuda``."""
    import torch

    from stepsim.calibration.capture import Capture

    torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    dev = torch.device("cuda" if device == "cuda" or (device == "auto" and torch.cuda.is_available())
                       else "cpu")
    model = make_model().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    cap = Capture(out_dir)
    skip_first, wait, warmup = 4, 1, 2
    after = after_steps(num_workers, prefetch_factor)
    total = skip_first + wait + warmup + active + after
    # The dataset holds more batches than the loop takes, so workers never run dry mid-window.
    probe = 0 if probe_workers is None and probe_batch_size is None else PROBE_STEPS + 2
    batch = batch_size or BATCH_SIZE
    ds = JpegDataset(make_jpegs(N_IMAGES, seed),
                     length=(max(total, probe) + 4 * max(num_workers, probe_workers or 0, 1))
                     * max(batch, probe_batch_size or 0), seed=seed)
    kwargs = dict(batch_size=batch, shuffle=False, num_workers=num_workers,
                  pin_memory=dev.type == "cuda")
    if num_workers > 0:
        kwargs["prefetch_factor"] = prefetch_factor
    loader = cap.dataloader(ds, **kwargs)
    for x, y in cap.steps(loader, active=active, wait=wait, warmup=warmup, skip_first=skip_first,
                          probe_workers=probe_workers, probe_steps=PROBE_STEPS,
                          after=after, probe_batch_size=probe_batch_size):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-workers", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--active", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--probe-workers", type=int, default=None)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: default)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--probe-batch-size", type=int, default=None)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: CUDA where torch sees a GPU (pinned batches, H2D copies)")
    a = p.parse_args(argv)
    run(a.num_workers, a.out, active=a.active, seed=a.seed, probe_workers=a.probe_workers,
        threads=a.threads or None, batch_size=a.batch_size, probe_batch_size=a.probe_batch_size, device=a.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
