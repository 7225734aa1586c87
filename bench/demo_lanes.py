"""Where a plain demo's rows miss, lane by lane: the point prediction's lanes against the
re-measured runs' (issue 10, resid17).

For each recorded plain demo folder (``stepsim demo``'s output: ``model.json``, ``table.json``,
``runs/nw<N>-r<k>/{trace.json.gz,sidecar.json}``) and each setting it captured with workers,
per step of the scored window (the steps ``validate`` scores), in ms:

* ``main``: the main thread's CPU (the sidecar's ``cpu_us``, ``next()`` included) against the
  simulated host lane's busy time;
* ``batch``: the workers' CPU per batch (the batches that ended in the window, their
  ``cpu_us`` and the work between batches, ``gap_cpu_us``) against the worker lanes' busy
  time per step;
* ``idle``: the cores' time nobody of the job used, ``cores × step − main − batch``;
* ``rq``: the main thread's run-queue wait (runnable, no core) against the host lane's
  ``cpu_cores`` wait; ``next``: the wall time of ``next()`` against the simulated one;
  ``ivcsw``: the main thread's involuntary switches a step (not simulated).

With the cores saturated the step is ``(main + batch + idle) / cores``, so the three first
rows' differences, divided by the cores, add up to the row's miss (the step's ``Δ``).

Then, within each run (both lanes run at once on one host, so its speed cancels), a batch's
CPU over a training step's (``cpu_us − next_cpu_us``) at N workers against 1 worker,
measured (geometric means over the runs, with the log standard error) against the model's
charge (its lanes' ratio).

Usage: ``python bench/demo_lanes.py DEMO_DIR [DEMO_DIR ...] [--steps 300] [--seed 0]``.
Deterministic (the simulation is seeded); it reads the recorded runs, it runs none.
"""
from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import numpy as np

from stepsim.calibration.measure import measured_steps
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.op_text import parse_set
from stepsim.scenarios.transforms import apply_ops

LANES = ("step", "main", "batch", "idle", "rq", "next", "ivcsw")


def measured_lanes(run: Path, cores: int) -> dict[str, float]:
    """One re-measured run's lanes (ms a step over its scored steps; see the module)."""
    side = json.loads((run / "sidecar.json").read_text())
    idx = list(measured_steps(run / "trace.json.gz").step_numbers)
    st = [side["steps"][i] for i in idx]
    t0 = st[0]["t_start_us"]
    t1 = st[-1]["t_start_us"] + st[-1]["wall_us"]
    n = len(st)

    def per_step(key: str, unit: float = 1e3) -> float:
        return float(np.mean([s.get(key) or 0.0 for s in st])) / unit

    batches = [p for p in side["produce"] if t0 < p["t_end_us"] <= t1]
    batch = sum(p["cpu_us"] + (p.get("gap_cpu_us") or 0.0) for p in batches) / n / 1e3
    step_ms = (t1 - t0) / n / 1e3
    main = per_step("cpu_us")
    return {"step": step_ms, "main": main, "batch": batch,
            "idle": cores * step_ms - main - batch, "rq": per_step("run_wait_us")
            + per_step("next_run_wait_us"), "next": per_step("next_wall_us"),
            "ivcsw": per_step("ivcsw", 1) + per_step("next_ivcsw", 1),
            "train": main - per_step("next_cpu_us"),
            "batch_each": float(np.mean([p["cpu_us"] for p in batches])) / 1e3}


def predicted_lanes(model: StepModel, workers: int, steps: int, seed: int) -> dict[str, float]:
    """The point prediction's lanes at ``loader.num_workers=workers`` (ms a step): the
    model simulated as ``predict``'s point simulates it, its spans read over the window."""
    final = apply_ops(model, [parse_set(f"loader.num_workers={workers}")])
    res = simulate(final, steps=steps, warmup=20, seed=seed)
    t0, t1 = res.window_us
    acc: dict[str, float] = defaultdict(float)
    for sp in res.every_span():
        if not t0 <= sp.start_us < t1:
            continue
        host = sp.lane.endswith(".host")
        if sp.kind == "busy":
            acc["main" if host else "batch"] += sp.dur_us
            if host and sp.name == "training step":
                acc["train"] += sp.dur_us
        elif host and sp.cause == "cpu_cores":
            acc["rq"] += sp.dur_us
        if host and sp.name.startswith(("unpickle", "next(")):
            acc["next"] += sp.dur_us
    n = res.step_us.shape[1]
    out = {k: v / n / 1e3 for k, v in acc.items()}
    out["step"] = res.mean_step_us / 1e3
    out["idle"] = final.loader.host_cores * out["step"] - out["main"] - out.get("batch", 0.0)
    out["ivcsw"] = float("nan")
    return out


def runs_by_setting(demo: Path) -> dict[int, list[Path]]:
    """The demo's run folders by their number of workers."""
    out: dict[int, list[Path]] = defaultdict(list)
    for d in sorted((demo / "runs").glob("nw*-r*")):
        m = re.fullmatch(r"nw(\d+)-r\d+", d.name)
        if m and (d / "sidecar.json").is_file():
            out[int(m.group(1))].append(d)
    return out


def lane_rows(demo: Path, steps: int, seed: int) -> dict[int, tuple[dict, list[dict]]]:
    """Per setting with workers: (predicted lanes, each run's measured lanes)."""
    model = StepModel.model_validate(json.loads((demo / "model.json").read_text()))
    cores = model.loader.host_cores
    return {nw: (predicted_lanes(model, nw, steps, seed),
                 [measured_lanes(r, cores) for r in runs])
            for nw, runs in sorted(runs_by_setting(demo).items()) if nw > 0}


def lane_misses(pred: dict, meas: list[dict]) -> dict[str, float]:
    """Measured mean − predicted, per core-time lane (ms of core time a step)."""
    return {k: float(np.mean([m[k] for m in meas])) - pred.get(k, 0.0)
            for k in ("main", "batch", "idle")}


def print_demo(demo: Path, rows: dict, cores: int) -> None:
    print(f"== {demo.name} ({cores} cores); ms a step, predicted / measured mean ± sd over runs")
    base_d = lane_misses(*rows[1]) if 1 in rows else None
    for nw, (pred, meas) in rows.items():
        cells = []
        for k in LANES:
            v = np.array([m[k] for m in meas])
            sd = f"±{v.std(ddof=1):.1f}" if len(v) > 1 else ""
            cells.append(f"{k} {pred.get(k, 0.0):.1f} / {v.mean():.1f}{sd}")
        print(f"  {nw} workers ({len(meas)} runs): " + "; ".join(cells))
        d = lane_misses(pred, meas)
        print(f"    Δ step {np.mean([m['step'] for m in meas]) - pred['step']:+.1f} ms ="
              + "".join(f" {k} {v / cores:+.1f}" for k, v in d.items()))
        if base_d is not None and nw != 1:
            print("    less the 1-worker runs' own Δ (what changes with the workers):"
                  + "".join(f" {k} {(v - base_d[k]) / cores:+.1f}" for k, v in d.items()
                            if k != "idle"))
    if 1 not in rows:
        return
    p1, m1 = rows[1]
    base = np.log([m["batch_each"] / m["train"] for m in m1])
    for nw, (pred, meas) in rows.items():
        if nw == 1:
            continue
        lr = np.log([m["batch_each"] / m["train"] for m in meas])
        se = np.sqrt(lr.var(ddof=1) / len(lr) + base.var(ddof=1) / len(base))
        model_x = (pred["batch"] / pred["train"]) / (p1["batch"] / p1["train"])
        print(f"    within-run batch/step, {nw} against 1 worker: measured "
              f"x{np.exp(lr.mean() - base.mean()):.3f} (log se {se:.3f}), model x{model_x:.3f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("demos", nargs="+", type=Path)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for demo in a.demos:
        model = json.loads((demo / "model.json").read_text())
        print_demo(demo, lane_rows(demo, a.steps, a.seed), model["loader"]["host_cores"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
