"""Does the plain demo's profiled window price the training step the run pays? Per run of the
calibration setting of each stored demo (``runs/nw1-r*/sidecar.json``), and, with
``--rescore``, the demo's table again from the same runs with the current code.

Per run: ``held`` (the share of core time its threads held, :func:`calibration.run_load.load_over`;
``*`` marks the run the demo calibrates from, :func:`demo.calibration_run.calibration_run`),
``d`` = C_u / (f_edge · C_p) (:func:`calibration.single_window.single_drift`, gloo_window's
check on one process) and ``!`` where beyond its noise, and ``d_applied`` = C_u / (f · C_p)
with ``f`` the factor :func:`calibration.profiler_overhead.step_factor` prices the step at
(its drift included): 1 where the model's step is the run's unprofiled step. Pooled: the
geometric mean and log sd of each.

Then per demo the calibration setting's runs' host speed (CPU per identical work, the
model's ``host.speed_runs``; log sd) and each scored row's speed against the predicted
one (its ``CPU time ×`` over ``host.cpu_scale × window_speed``), in units of the interval's
host term for a pooled mean of ``k`` runs against ``n`` calibration runs, sd·√(1/k + 1/n):
the measured run-to-run noise is the right width where these z are about unit normal (80 %
inside ±1.28).

Run from the repository root: ``python bench/window_drift.py [--rescore] DEMO_DIR [...]``.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

from stepsim.calibration.run_load import load_over
from stepsim.calibration.profiler_overhead import step_factor
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.single_window import single_drift
from stepsim.demo.calibration_run import calibration_run

CAL = 1
Z80 = 1.2816


def _runs(demo: Path) -> dict[int, list[Path]]:
    runs: dict[int, list[tuple[int, Path]]] = {}
    for p in (demo / "runs").iterdir():
        s, k = p.name[2:].split("-r")
        runs.setdefault(int(s), []).append((int(k), p))
    return {s: [p for _, p in sorted(v)] for s, v in runs.items()}


def drift_rows(demo: Path) -> list[tuple[str, float | None, float, float, bool, bool]]:
    """``(run, held, d, d_applied, beyond, applied beyond)`` per calibration run with both
    measured."""
    cal = _runs(demo)[CAL]
    k = calibration_run(cal)[0]
    out = []
    for i, run in enumerate(cal):
        side = load_sidecar(run / "sidecar.json")
        w, sf = single_drift(side), step_factor(side)
        priced = single_drift(side, sf[1].factor) if sf is not None else None
        if w is None or priced is None:
            continue
        load = load_over(side)
        out.append((("*" if i == k else "") + run.name, load.held if load else None, w.d,
                    priced.d, w.beyond_noise, priced.beyond_noise))
    return out


def speed_z(demo: Path) -> list[float]:
    """Each scored row's host speed against the predicted, in host-term units (module doc)."""
    t = json.loads((demo / "table.json").read_text())
    m = json.loads((demo / "model.json").read_text())
    speeds = m["host"].get("speed_runs") or []
    if len(speeds) < 2:
        return []
    sd = float(np.log(speeds).std(ddof=1))
    pred = m["host"]["cpu_scale"] * m["meta"]["notes"].get("window_speed", 1.0)
    k = t.get("repeats", 4)
    unit = sd * np.sqrt(1 / k + 1 / len(speeds))
    return [float(np.log(r["host_cpu_time_x"] / pred) / unit) for r in t["rows"]
            if not r["calibration"] and not r.get("load_set_apart")]


def rescore(demo: Path) -> str:
    """The demo's table from its stored runs with the current code (one line)."""
    from stepsim.calibration.host_noise import identical_work_us
    from stepsim.demo import run as demo_run
    from stepsim.fit import calibrate
    import tempfile

    runs = _runs(demo)
    cal = runs[CAL]
    base = cal[calibration_run(cal)[0]]
    model = calibrate(base / "trace.json.gz", sidecar=base / "sidecar.json",
                      replicates=[x for x in cal if x != base])
    work0 = identical_work_us(load_sidecar(base / "sidecar.json"))
    with tempfile.TemporaryDirectory() as out:
        rows = [demo_run._validated_row(model, runs, s, Path(out), 0, work0, [], [])
                for s in sorted(runs)]
    sc = [r for r in rows if not r["calibration"] and not r["load_set_apart"]]
    errs = [abs(r["error_pct"]) for r in sc]
    return ("; ".join(f"{r['num_workers']}{'*' if r['calibration'] else ''}"
                      f"{'‡' if r['load_set_apart'] else ''} {r['error_pct']:+.1f} % "
                      f"{'in' if r['inside'] else 'out'}" for r in rows)
            + f" | median {statistics.median(errs):.1f} max {max(errs):.1f} inside "
              f"{sum(bool(r['inside']) for r in sc)}/{len(sc)} width "
              f"{statistics.median(r['width_pct'] for r in sc):.1f} %")


def main(argv: list[str]) -> None:
    again = "--rescore" in argv
    demos = [Path(a) for a in argv if a != "--rescore"]
    d, da, beyond, beyond_a, zs = [], [], 0, 0, []
    for demo in demos:
        rows = drift_rows(demo)
        print(f"{demo}: " + " ".join(f"{r}: held {h if h is None else round(h, 3)} d {x:.3f}"
                                      f"{'!' if b else ''} applied {a:.3f}{'!' if ba else ''}"
                                      for r, h, x, a, b, ba in rows))
        d += [r[2] for r in rows]
        da += [r[3] for r in rows]
        beyond += sum(r[4] for r in rows)
        beyond_a += sum(r[5] for r in rows)
        z = speed_z(demo) if (demo / "table.json").exists() else []
        zs += z
        if z:
            print("  rows' host speed against the predicted, host-term units: "
                  + " ".join(f"{v:+.2f}" for v in z))
        if again:
            print("  rescored: " + rescore(demo), flush=True)
    for name, v in (("d (edge factor)", d), ("d against the applied factor", da)):
        lv = np.log(v)
        print(f"{name}: {len(v)} runs, geometric mean {np.exp(lv.mean()):.3f}, log sd "
              f"{lv.std(ddof=1):.3f}, beyond noise {beyond if v is d else beyond_a}")
    if zs:
        z = np.array(zs)
        print(f"rows' speed z: {z.size} rows, rms {np.sqrt((z ** 2).mean()):.2f}, inside "
              f"±{Z80}: {(np.abs(z) < Z80).sum()} of {z.size}")


if __name__ == "__main__":
    main(sys.argv[1:])
