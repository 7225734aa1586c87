"""Replay table: calibrate every shared GPU trace, replay it, compare with the measurement.

For each trace file under ``../shared/traces`` (and each directory of per-rank files, as one
multi-rank model), prints: the measured median step (ms, over the complete steps), the
replayed median step of the coarsened model (``models.simulate.simulate(coarsen(model),
steps=STEPS, warmup=WARMUP)``) and of the fine model, the replay error, the GPU busy % (union
of every GPU activity over the step) measured and replayed, the measured kernel-sum ÷
step-wall, and exposed communication (ms per step) measured and replayed, and the seconds the
coarse replay took. ``trace_filter/`` files are HTA-sampled subsets and are marked
``partial``.

Run from the repository root: ``python bench/replay_table.py [--fine] [--only SUBSTR]``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.gpu import calibrate_gpu  # noqa: E402
from models.coarsen import coarsen  # noqa: E402
from models.metrics import summarize  # noqa: E402
from models.simulate import simulate  # noqa: E402
from simcore.errors import StepsimError  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
STEPS, WARMUP = 10, 3


def targets(root: Path) -> list[Path]:
    """Every trace file, plus every directory holding several trace files (listed only when
    they are distinct ranks of one job)."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and (
        p.name.endswith(".json") or p.name.endswith(".json.gz")))
    dirs = sorted({p.parent for p in files if sum(q.parent == p.parent for q in files) > 1})
    return files + dirs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fine", action="store_true", help="also replay the fine (uncoarsened) model")
    ap.add_argument("--only", default=None, help="only paths containing this text")
    a = ap.parse_args(argv)
    if not TRACES.is_dir():
        print(f"shared traces not found at {TRACES}")
        return 1
    hdr = (f"{'trace':62s} {'steps':>5s} {'meas ms':>8s} {'replay':>8s} {'err %':>7s}"
           + (f" {'fine':>8s} {'err %':>7s}" if a.fine else "")
           + f" {'busy %':>6s} {'sim %':>6s} {'ksum/wall':>9s} {'exp.comm':>8s} {'sim.comm':>8s}"
           + f" {'sim s':>5s}  note")
    print(hdr)
    print("-" * len(hdr))
    for p in targets(TRACES):
        rel = str(p.relative_to(TRACES)) + ("/" if p.is_dir() else "")
        if a.only and a.only not in rel:
            continue
        note = "partial (HTA-sampled)" if "trace_filter" in rel else ""
        try:
            m = calibrate_gpu(p, coarse=False)
        except StepsimError as e:
            print(f"{rel[-62:]:62s} not calibrated: {e}")
            continue
        if p.is_dir() and len(m.ranks) < 2:
            continue  # one rank (several captures of it): already listed file by file
        meas = m.meta.notes.get("measured_median_step_us")
        c = coarsen(m)
        t = time.perf_counter()
        r = simulate(c, steps=STEPS, warmup=WARMUP)
        dt = time.perf_counter() - t
        s = summarize(r)
        sim = r.median_step_us
        line = (f"{rel[-62:]:62s} {len(m.meta.measured_step_us):5d} {meas / 1e3:8.2f} "
                f"{sim / 1e3:8.2f} {100 * (sim - meas) / meas:+7.2f}")
        if a.fine:
            rf = simulate(m, steps=STEPS, warmup=WARMUP)
            line += f" {rf.median_step_us / 1e3:8.2f} {100 * (rf.median_step_us - meas) / meas:+7.2f}"
        n = m.meta.notes
        if len(m.ranks) > 1:
            note = (note + " " if note else "") + f"{len(m.ranks)} ranks, job step = slowest rank"
        busy = 100 * s.device_busy_us / s.rank_step_us[s.rank]
        line += (f" {n['gpu_busy_pct']:6.1f} {busy:6.1f} {n['kernel_sum_over_step_wall']:9.2f} "
                 f"{n['exposed_comm_us'] / 1e3:8.2f} {s.exposed_comm_us / 1e3:8.2f} {dt:5.1f}  {note}")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
