"""Per-rank reading and fitting in processes (issue 11 §4): ``calibrate`` of N rank files
split into its stages, with one process and with the pool, in one run.

Prints, for the DLRM job's eight rank files copied to N ranks (``bench/issue11.py``'s
``rank_folder``): read + fit of every rank (the fine model, ranks combined) with
``STEPSIM_CALIBRATION_JOBS=1`` and with the default pool, wall and CPU seconds (the pool's
workers included), the ratio of the two and the cores used; then the coarsening of the
combined model (serial: its probe simulates every rank), which the ``calibrate-ranks`` row
also pays. ``python bench/rank_pool.py [N]`` (default 128); run it under ``/tmp/quiet``. The
rank folder is written to /tmp and deleted after.
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from issue11_calibrate import rank_folder  # noqa: E402


def cpu_s() -> float:
    """CPU seconds of this process and its finished children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def read_and_fit(folder: Path, jobs: str | None):
    """(model, wall s, CPU s) of read_folder + calibrate_gpu(coarse=False) with ``jobs``."""
    from stepsim.calibration.folders import read_folder
    from stepsim.fit import calibrate_gpu
    from stepsim.calibration.rank_pool import JOBS_ENV

    if jobs is None:
        os.environ.pop(JOBS_ENV, None)
    else:
        os.environ[JOBS_ENV] = jobs
    t, c = time.perf_counter(), cpu_s()
    model = calibrate_gpu(read_folder(folder), coarse=False)
    return model, time.perf_counter() - t, cpu_s() - c


def main() -> None:
    from stepsim.models.coarsen import coarsen

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    folder = rank_folder(n)
    one, w1, c1 = read_and_fit(folder, "1")
    pooled, w2, c2 = read_and_fit(folder, None)
    same = one.model_dump_json() == pooled.model_dump_json()
    print(f"{n} ranks, read + fit: one process {w1:.1f} s wall ({c1:.1f} s CPU); pool "
          f"{w2:.1f} s wall ({c2:.1f} s CPU, {c2 / w2:.2f} cores used) = {w1 / w2:.2f}x faster; "
          f"same model: {same}")
    t = time.perf_counter()
    coarsen(pooled)
    print(f"coarsening the {n}-rank model (serial, its probe simulates every rank): "
          f"{time.perf_counter() - t:.1f} s")
    shutil.rmtree(folder, ignore_errors=True)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
