"""Issue 11's sweep row taken apart: where the wall of ``stepsim sweep`` (32 points × 200
steps of the calibrated ResNet-50 trace, as ``bench/issue11.py sweep`` runs it) goes, and one
``calibrate`` of the same trace beside it, for this checkout and, interleaved, a reference copy.

    git archive main | tar -x -C /tmp/ref/stepsim      # the reference: any stepsim copy
    flock /tmp/cpu-timing.lock python bench/sweep_parts.py --ref /tmp/ref [--rounds 5]

Each round runs the sweep once in a driver that marks (wall seconds from the launch): the CLI
imported, the pool handed its items (``scenarios.parallel._run``), the first point started,
the last point ended, the pool's results all in, the interpreter's exit handlers, and the
process's end; each point's CPU (ms) is read in its worker. Then one ``calibrate``, timed
whole. The driver imports ``stepsim.scenarios.parallel`` before the CLI (to mark it), so its
imports run in another order than a plain ``stepsim sweep``'s; their sum is the same. Both
run with their bytecode compiled once (``bench/installed.py``). Timings mean something only
under ``flock /tmp/cpu-timing.lock``; ``uptime`` is printed before and after.
"""
from __future__ import annotations

import argparse
import ast
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from installed import installed_env  # noqa: E402
from issue11_env import CACHE, PY, RESNET, uptime  # noqa: E402

DRIVER = """
import atexit, os, sys, time
T0 = float(sys.argv[1])
M = []
def mark(name):
    M.append((name, time.time() - T0, time.process_time(), os.getpid()))
import stepsim.scenarios.parallel as par
_run0, _guard0 = par._run, par._guard
def _guard(fn, item):
    mark("point0")
    out = _guard0(fn, item)
    mark("point1")
    sys.stderr.write("MARKS " + repr(M[-2:]) + "\\n")
    return out
def _run(*a, **k):
    mark("pool0")
    out = _run0(*a, **k)
    mark("pool1")
    return out
par._run, par._guard = _run, _guard
def bye():
    mark("exit")
    sys.stderr.write("MARKS " + repr([m for m in M if not m[0].startswith("point")]) + "\\n")
atexit.register(bye)   # before the CLI's: run after them
from stepsim.cli import main
mark("cli")
sys.argv = ["stepsim"] + sys.argv[2:]
main()
"""


def sweep_args(points: int, steps: int, model: Path) -> list[str]:
    vals = ",".join(f"{0.5 + 1.5 * k / max(1, points - 1):.3f}" for k in range(points))
    return ["sweep", str(model), f"device.gap_scale={vals}", "--steps", str(steps),
            "--warmup", "3"]


def one_sweep(env: dict, args: list[str]) -> dict:
    """The marks of one sweep (seconds from its launch), its points' CPU (ms) and its stdout."""
    t0 = time.time()
    p = subprocess.run([PY, "-c", DRIVER, repr(t0), *args], capture_output=True, text=True,
                       env=env)
    end = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"sweep failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    marks = [m for line in p.stderr.splitlines() if line.startswith("MARKS ")
             for m in ast.literal_eval(line[6:])]
    main = {m[0]: m for m in marks if not m[0].startswith("point")}
    by_pid: dict[int, list] = {}
    for m in marks:
        if m[0].startswith("point"):
            by_pid.setdefault(m[3], []).append(m)
    cpu, first, count = [], [], []
    for ms in by_pid.values():
        ms.sort(key=lambda m: m[1])
        each = [(ms[i + 1][2] - ms[i][2]) * 1e3 for i in range(0, len(ms) - 1, 2)]
        first.append(each[0])
        cpu.extend(each[1:])
        count.append(len(each))
    starts = [m[1] for m in marks if m[0] == "point0"]
    ends = [m[1] for m in marks if m[0] == "point1"]
    if not starts:
        raise SystemExit("no point ran in a worker process (one usable CPU, or one point)")
    return {"wall": end, "cli": main["cli"][1], "pool0": main["pool0"][1],
            "first": min(starts), "last": max(ends), "pool1": main["pool1"][1],
            "exit": main["exit"][1], "main_cpu_at_pool": main["pool0"][2],
            "point_ms": statistics.median(cpu) if cpu else math.nan, "first_ms": first,
            "per_worker": count, "stdout": p.stdout}


def calibrate_s(env: dict, trace: Path, out: Path) -> float:
    t = time.perf_counter()
    p = subprocess.run([PY, "-m", "stepsim", "calibrate", str(trace), "-o", str(out)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"calibrate failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    return time.perf_counter() - t


def show(tag: str, r: dict, cal: float) -> str:
    w = r["wall"]
    parts = (("to the CLI", r["cli"]), ("to the pool", r["pool0"] - r["cli"]),
             ("pool to 1st point", r["first"] - r["pool0"]),
             ("points", r["last"] - r["first"]), ("pool's tail", r["pool1"] - r["last"]),
             ("after the pool", r["exit"] - r["pool1"]), ("exit", w - r["exit"]))
    text = ", ".join(f"{n} {s * 1e3:.0f} ms ({s / w:.0%})" for n, s in parts)
    return (f"{tag}: sweep {w:.3f} s = {w / cal:.2f}x one calibrate ({cal:.3f} s); {text}; "
            f"a point {r['point_ms']:.1f} ms CPU (median; each worker's first "
            f"{', '.join(f'{x:.1f}' for x in r['first_ms'])}), points per worker "
            f"{r['per_worker']}; the main process's CPU at the pool {r['main_cpu_at_pool']:.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", type=Path, help="a folder holding a reference stepsim package")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--points", type=int, default=32)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    CACHE.mkdir(exist_ok=True)
    model = CACHE / "sweep-parts-model.json"
    runs = [("this", installed_env(CACHE))]
    if a.ref is not None:
        env = dict(os.environ, PYTHONPATH=f"{a.ref}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        runs.append(("ref", installed_env(CACHE) | {"PYTHONPATH": env["PYTHONPATH"]}))
        subprocess.run([PY, "-m", "compileall", "-q", str(a.ref)], env=runs[1][1],
                       capture_output=True, check=False)
    calibrate_s(runs[0][1], RESNET, model)   # the model both sweep (and warm caches)
    print(uptime())
    for k in range(1, a.rounds + 1):
        for tag, env in runs:
            cal = calibrate_s(env, RESNET, CACHE / f"sweep-parts-{tag}.json")
            print(show(f"{tag} {k}", one_sweep(env, sweep_args(a.points, a.steps, model)), cal),
                  flush=True)
    print(uptime())


if __name__ == "__main__":
    main()
