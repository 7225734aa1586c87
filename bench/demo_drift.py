"""Drift or co-run interference? CPU time per identical work in every run of `stepsim demo`.

For each demo output folder given (``runs/nw{N}-r{K}/sidecar.json``), prints one line per run
in the order the runs were captured: seconds into the demo, ``num_workers``, the median CPU
time (µs → ms) of a batch's produce and of a training step outside ``next()``, each against
the geometric mean of the calibration setting's runs (``num_workers=1``, the capture and its
replicates: what the model's ``host.cpu_scale`` is), and each record's co-run load (the other cores' busy share)
(:func:`calibration.corun.corun_loads`, as the probe fit counts them). Then, pooled over the
demos:

* per setting, the mean factor of identical work (produce + step, the demo's ``CPU time ×``)
  against the calibration runs and its run-to-run spread (log sd), beside the calibration
  runs' own pooled spread (within each demo): interference is the mean moving with the
  co-runners, drift the spread;
* the within-run slope of log CPU per batch on its co-run load (each run's mean removed, so
  the host's minute-to-minute speed cancels): the interference coefficient as one run sees it.

Run from the repository root: ``python bench/demo_drift.py DEMO_DIR [DEMO_DIR ...]``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from stepsim.calibration.corun import activities, corun_loads
from stepsim.calibration.host_noise import identical_work_us
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_fit import after_startup

CAL = 1


def run_rows(root: Path) -> list[dict]:
    """One dict per run of the demo at ``root``, in capture order."""
    rows = []
    for d in sorted((root / "runs").iterdir()):
        side = load_sidecar(d / "sidecar.json")
        nw = side.loader.num_workers
        acts = activities(after_startup(side.produce), side.steps, nw > 0,
                          side.torch_num_threads or 1)
        loads = corun_loads(acts, side.host_cores or 2)
        batch = [(a.cpu_us, x) for a, x in zip(acts, loads) if a.kind == "batch" and a.fitted]
        step = [(a.cpu_us, x) for a, x in zip(acts, loads) if a.kind == "step" and a.fitted]
        rows.append({"run": d.name, "nw": nw,
                     "t_us": min(s.t_start_us for s in side.steps if s.t_start_us is not None),
                     "work": identical_work_us(side),
                     "batch": float(np.median([c for c, _ in batch])),
                     "batch_load": float(np.mean([x for _, x in batch])),
                     "step": float(np.median([c for c, _ in step])),
                     "step_load": float(np.mean([x for _, x in step])),
                     "within": [(x, np.log(c)) for c, x in batch if c > 0]})
    return sorted(rows, key=lambda r: r["t_us"])


def main(roots: list[Path]) -> None:
    per_setting: dict[int, list[float]] = {}
    cal_dev, cal_dof, within = [], 0, []
    for root in roots:
        rows = run_rows(root)
        cal = [r for r in rows if r["nw"] == CAL]
        g = {k: float(np.exp(np.mean([np.log(r[k]) for r in cal]))) for k in ("batch", "step",
                                                                               "work")}
        print(f"== {root} (against the geometric mean of its {len(cal)} num_workers={CAL} runs)")
        print(f"{'run':8s} {'s':>5s} {'batch ms':>8s} {'x':>6s} {'load':>5s} "
              f"{'step ms':>8s} {'x':>6s} {'load':>5s} {'work x':>7s}")
        for r in rows:
            print(f"{r['run']:8s} {(r['t_us'] - rows[0]['t_us']) / 1e6:5.0f} "
                  f"{r['batch'] / 1e3:8.1f} {r['batch'] / g['batch']:6.3f} {r['batch_load']:5.2f} "
                  f"{r['step'] / 1e3:8.1f} {r['step'] / g['step']:6.3f} {r['step_load']:5.2f} "
                  f"{r['work'] / g['work']:7.3f}")
            per_setting.setdefault(r["nw"], []).append(np.log(r["work"] / g["work"]))
            if len(r["within"]) > 2:
                x, y = np.array(r["within"]).T
                within += list(zip(x - x.mean(), y - y.mean()))
        logs = np.log([r["work"] for r in cal])
        cal_dev += list(logs - logs.mean())
        cal_dof += len(logs) - 1
    print(f"== pooled over {len(roots)} demo(s): identical work (batch + step) against the "
          f"calibration runs")
    print(f"num_workers={CAL} runs: log sd {np.sqrt(np.sum(np.square(cal_dev)) / cal_dof):.3f} "
          f"({cal_dof} dof, within each demo)")
    for nw, v in sorted(per_setting.items()):
        if nw == CAL:
            continue
        v = np.array(v)
        sd = f"{v.std(ddof=1):.3f}" if len(v) > 1 else "-"
        print(f"num_workers={nw}: mean x{np.exp(v.mean()):.3f}, log sd {sd} over {len(v)} runs "
              f"(lo x{np.exp(v.min()):.3f}, hi x{np.exp(v.max()):.3f})")
    if within:
        x, y = np.array(within).T
        print(f"within-run slope of log CPU per batch on the other cores' busy share: "
              f"{np.polyfit(x, y, 1)[0]:+.3f} ({len(x)} batches)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python bench/demo_drift.py DEMO_DIR [DEMO_DIR ...]")
    main([Path(a) for a in sys.argv[1:]])
