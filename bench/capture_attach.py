"""Does attaching to an existing DataLoader measure what the harness's own loader measures?

Records the same training loop twice, in one process, alternating (and alternating which goes first): once with
``Capture.dataloader(...)`` (the harness wraps the dataset), once with a plain
``torch.utils.data.DataLoader`` attached by ``Capture.steps`` (the workers' own dataset copies
take a timing subclass). Prints, for each, the median per-batch produce wall and CPU time of
the steady-state batches and the attach / harness ratios; ratios near 1 say the two ways record
the same thing, if the run-to-run range of each (printed) is narrow. Also the mean step time of each, as a ratio (the attachment's overhead on the
run). Run from the repository root: ``python bench/capture_attach.py [--rounds 4]``.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
import torch.utils.data as tud

from stepsim.calibration.capture import Capture
from stepsim.calibration.sidecar_fit import steady_records
from stepsim.calibration.sidecar import load_sidecar


class Work(tud.Dataset):
    """About a millisecond of single-threaded torch work per sample."""

    def __len__(self):
        return 8 * 200

    def __getitem__(self, i):
        x = torch.arange(256, dtype=torch.float32) + i
        for _ in range(60):
            x = torch.tanh(x).sort().values + x
        return x, i % 2


def record(out: Path, attach: bool) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cap = Capture(out)
    kw = dict(batch_size=8, num_workers=2)
    loader = tud.DataLoader(Work(), **kw) if attach else cap.dataloader(Work(), **kw)
    for x, y in cap.steps(loader, active=12, wait=1, warmup=2, skip_first=3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    side = load_sidecar(out / "sidecar.json")
    recs = steady_records(side, 2)
    prof = [s.wall_us for s in side.steps if s.profiled]
    return {"wall": statistics.median(r.wall_us for r in recs),
            "cpu": statistics.median(r.cpu_us for r in recs),
            "step": statistics.fmean(prof), "n": len(recs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="stepsim-bench-"))
    rows = {True: [], False: []}
    for k in range(a.rounds):
        for attach in ((False, True) if k % 2 == 0 else (True, False)):  # alternate the order
            rows[attach].append(record(tmp / f"{k}-{int(attach)}", attach))
    for key, label in (("wall", "produce wall"), ("cpu", "produce CPU"), ("step", "step wall")):
        h = statistics.median(r[key] for r in rows[False])
        t = statistics.median(r[key] for r in rows[True])
        spread = [r[key] / 1e3 for r in rows[False]], [r[key] / 1e3 for r in rows[True]]
        print(f"{label:13s} harness {h / 1e3:8.2f} ms  attach {t / 1e3:8.2f} ms  "
              f"attach/harness {t / h:5.3f}   runs: harness {min(spread[0]):.1f}-{max(spread[0]):.1f}"
              f", attach {min(spread[1]):.1f}-{max(spread[1]):.1f} ms")
    print(f"steady batches per run: harness {[r['n'] for r in rows[False]]}, "
          f"attach {[r['n'] for r in rows[True]]}")


if __name__ == "__main__":
    main()
