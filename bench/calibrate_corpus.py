"""Calibrate every trace under a folder, as a user would, and count what calibrates.

For each trace file (``*.json``, ``*.json.gz``) under ``ROOT`` (default ``../shared/traces``),
and each folder holding several of them (calibrated as one job's ranks), prints one line:
``ok`` with the steps used, how the steps were found, the measured median step (ms) and the
warnings that say what the trace lacks, or ``refused`` with the one-line reason. Ends with the
counts. Run from the repository root: ``python bench/calibrate_corpus.py [ROOT]``.
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from stepsim.fit import calibrate
from stepsim.simcore.errors import StepsimError

ROOT = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
TELLING = ("whole capture", "top-level annotation", "memset", "graph", "after the last step",
           "skipped", "not ranks of one job", "truncated", "excluded", "repeating")


def targets(root: Path) -> list[Path]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz"))
                   and p.name != "sidecar.json")
    dirs = sorted({p.parent for p in files if sum(q.parent == p.parent for q in files) > 1})
    return files + dirs


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else ROOT
    if not root.is_dir():
        print(f"{root}: no such folder")
        return 1
    counts: Counter = Counter()
    for p in targets(root):
        rel = str(p.relative_to(root)) + ("/" if p.is_dir() else "")
        t = time.perf_counter()
        try:
            m = calibrate(p)
        except StepsimError as e:
            counts["refused"] += 1
            print(f"refused  {rel}: {e}", flush=True)
            continue
        counts["ok"] += 1
        notes = m.meta.notes
        how = notes.get("step_method") or notes.get("steps_found_by") or ""
        said = [w for w in m.meta.warnings if any(k in w for k in TELLING)]
        print(f"ok       {rel}: {len(m.meta.measured_step_us)} step(s) {how} median "
              f"{notes.get('measured_median_step_us', 0) / 1e3:.2f} ms "
              f"({time.perf_counter() - t:.1f} s)" + "".join(f"\n           - {w[:300]}" for w in said),
              flush=True)
    print(f"\n{counts['ok']} calibrated, {counts['refused']} refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
