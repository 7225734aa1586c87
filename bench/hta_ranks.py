"""Issue 11's rank-file row against its reference measured in the same run: HTA's loader
(``hta.trace_analysis.TraceAnalysis(trace_files={rank: file})``, Holistic Trace Analysis,
which parses every rank file it is given; given the folder instead, HTA finds each file's rank
with the pattern ``"rank":\\s+N``, which the compact JSON these folders are written in does not
match, and then parses one file as rank 0) and ``stepsim calibrate`` of the same folder, each
in a child process, interleaved ``--rounds`` times.

HTA is not a dependency of stepsim: install it for the benchmark only, apart from the project's
environment, and name where (``pip install --target /tmp/hta-pkgs HolisticTraceAnalysis``, then
``--hta /tmp/hta-pkgs``). The folders are ``bench/issue11.py``'s (the DLRM job's eight files
copied to N ranks). Run it alone (``flock /tmp/cpu-timing.lock python bench/hta_ranks.py
--hta /tmp/hta-pkgs``); each round prints ``uptime``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from issue11_calibrate import child, rank_folder  # noqa: E402
from issue11_env import PY, uptime  # noqa: E402

_HTA = """
import resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from pathlib import Path
from hta.trace_analysis import TraceAnalysis
files = {int(f.name[4:8]): str(f) for f in sorted(Path(sys.argv[1]).glob("rank*.json"))}
TraceAnalysis(trace_files=files)
ch = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - c0 + ch.ru_utime + ch.ru_stime
print(f"{time.perf_counter() - t0:.3f} {cpu:.3f}")
"""


def hta_load(folder: Path, hta: str, timeout: float) -> tuple[float, float]:
    """HTA's load of ``folder``: (wall s, CPU s of it and its children), imports included."""
    env = dict(os.environ, PYTHONPATH=hta)
    p = subprocess.run([PY, "-c", _HTA, str(folder)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise SystemExit(f"HTA failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    wall, cpu = map(float, p.stdout.split()[-2:])
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta", required=True, help="folder HTA was installed into (--target)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    for n in a.ranks:
        d = rank_folder(n)
        try:
            for r in range(a.rounds):
                h_wall, h_cpu = hta_load(d, a.hta, a.timeout)
                cal = child("calibrate", d, a.timeout)
                print(f"{n} rank files, round {r + 1}: stepsim calibrate {cal['s']:.1f} s "
                      f"({cal['cpu_s'] / cal['s']:.2f} cores) {cal.get('error', '')}; HTA load "
                      f"{h_wall:.1f} s ({h_cpu / h_wall:.2f} cores) = {cal['s'] / h_wall:.2f}x "
                      f"HTA (goal <= 1x) [{uptime()}]", flush=True)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
