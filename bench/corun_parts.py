"""Past the cores, part by part: what moved in a plain demo's re-measured runs, against what
the calibration setting's own runs measure.

For each ``stepsim demo`` output folder (``runs/nw{N}-r{K}/sidecar.json``), per setting,
pooled over its runs, each against the demo's calibration runs (``num_workers=1``; ratios, so
the host's speed over the demo cancels in the mean):

* ``batch``: a batch's produce CPU (a worker's process CPU; at 0 workers the main thread's),
  the workers' first batches left out; ``o`` its co-run load, ``f`` ``1 − cores/runnable``
  (:func:`calibration.corun.corun_loads`, :func:`calibration.oversub.oversub_shares`);
* ``step``: the training step's CPU outside ``next()`` less its page faults at one cost per
  fault for the demo (the within-run slope of CPU on faults, pooled over every run: one run's
  fit moved 0.7–2.1 µs a fault), over the steps the probe fit compares;
* ``faults``: the step's page faults, a share of the calibration runs' mean;
* ``lost``: over the steps ``validate`` scores (after the profiled window, less its drain),
  the two cores' time the run's threads did not use — ``cores × wall − (batches + worker
  gaps + steps + next())`` CPU — a share of ``cores × wall`` (``busy`` beside it: the
  machine's ``/proc/stat`` busy share over the profiled window, where it is recorded);
* with a probe at 0 workers in the calibration runs: each part's probe ÷ its run, the
  coefficient each part gives (``(1/ratio − 1) / o``) and the factor the model's form
  (:func:`models.cpu_slowdown.slowdown`) gives each part at each setting with it and the
  oversub prior's middle, beside the measured one.

Run from the repository root: ``python bench/corun_parts.py DEMO_DIR [DEMO_DIR ...]``.
Prints ratios only: no timing.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from stepsim.calibration.corun import activities, corun_loads
from stepsim.calibration.measure import measured_steps
from stepsim.calibration.outside_load import BATCH, GAP, NEXT, STEP, busy_spans, cut_to_span
from stepsim.calibration.oversub import OVERSUB_PRIOR, oversub_shares
from stepsim.calibration.probe_steps import after_startup, probe_base_steps
from stepsim.calibration.sidecar import load_sidecar


def _run(d: Path) -> dict:
    side = load_sidecar(d / "sidecar.json")
    nw, cores = side.loader.num_workers, side.host_cores or 2
    base = probe_base_steps(side)
    acts = activities(after_startup(side.produce), side.steps, nw > 0, 1, set(base))
    o, f = corun_loads(acts, cores), oversub_shares(acts, cores)

    def mean(kind, v):
        return float(np.mean([x for a, x in zip(acts, v) if a.kind == kind and a.fitted]))

    steps = [side.steps[i] for i in base]
    n = len(measured_steps(d / "trace.json.gz").step_us)
    scored = side.steps[-n:]
    lo, hi = scored[0].t_start_us, scored[-1].t_start_us + scored[-1].wall_us
    spans = cut_to_span(busy_spans(side, nw, 1, 1), lo, hi)
    used = spans[np.isin(spans[:, 4], [BATCH, GAP, STEP] + ([NEXT] if nw else [])), 3].sum()
    m = side.machine
    return dict(nw=nw, side=side, cpu=np.array([s.compute_cpu_us for s in steps]),
                flt=np.array([s.minflt or 0 for s in steps], dtype=float),
                batch=float(np.mean([r.work_us for r in after_startup(side.produce)
                                     if (r.worker >= 0) == (nw > 0)])),
                bo=mean("batch", o), bf=mean("batch", f), so=mean("step", o), sf=mean("step", f),
                lost=1 - used / (cores * (hi - lo)),
                busy=m.busy_us / (m.cores * m.wall_us) if m is not None else float("nan"))


def per_fault_us(runs: list[dict]) -> float:
    """The within-run slope of step CPU on faults, pooled over ``runs`` (µs a fault)."""
    num = sum(((r["flt"] - r["flt"].mean()) * (r["cpu"] - r["cpu"].mean())).sum() for r in runs)
    den = sum(((r["flt"] - r["flt"].mean()) ** 2).sum() for r in runs)
    return float(num / den)


def _factor(k: float, a: float, o: float, f: float, o_ref: float) -> float:
    return (1 + k * o) / (1 + k * o_ref) * (1 + a * f)


def demo(folder: Path) -> None:
    runs = [_run(d) for d in sorted((folder / "runs").iterdir())]
    c = per_fault_us(runs)
    cal = [r for r in runs if r["nw"] == 1]
    ref_b = np.mean([r["batch"] for r in cal])
    ref_s = np.mean([(r["cpu"] - c * r["flt"]).mean() for r in cal])
    ref_f = np.mean([r["flt"].mean() for r in cal])
    print(f"== {folder.name}: {per_fault_us(runs):.2f} µs a fault")
    probed = [r for r in cal if r["side"].probe is not None and r["side"].probe.num_workers == 0]
    ks = None
    if probed:
        pb = [np.mean([p.work_us for p in r["side"].probe.produce]) / r["batch"] for r in probed]
        ps = [np.mean([s.compute_cpu_us - c * (s.minflt or 0) for s in r["side"].probe.steps])
              / (r["cpu"] - c * r["flt"]).mean() for r in probed]
        ob, os_ = np.mean([r["bo"] for r in cal]), np.mean([r["so"] for r in cal])
        ks = ((1 / np.mean(pb) - 1) / ob, (1 / np.mean(ps) - 1) / os_, ob, os_)
        print(f"probe at 0 workers ÷ its run ({len(probed)} runs): batch ×{np.mean(pb):.4f}, "
              f"step ×{np.mean(ps):.4f}: coefficient batch {ks[0]:.3f}, step {ks[1]:.3f}")
    a = sum(OVERSUB_PRIOR) / 2
    for nw in sorted({r["nw"] for r in runs}):
        rs = [r for r in runs if r["nw"] == nw]
        b = np.mean([r["batch"] for r in rs]) / ref_b
        s = np.mean([(r["cpu"] - c * r["flt"]).mean() for r in rs]) / ref_s
        g = lambda key: np.mean([r[key] for r in rs])    # noqa: E731
        line = (f"nw{nw}: batch ×{b:.3f} (o {g('bo'):.2f}, f {g('bf'):.2f}) | step ×{s:.3f} "
                f"(o {g('so'):.2f}, f {g('sf'):.2f}) | faults ×{np.mean([r['flt'].mean() for r in rs]) / ref_f:.2f}"
                f" | lost {100 * g('lost'):.1f} % (busy {100 * g('busy'):.1f} %)")
        if ks is not None:
            line += (f" | form: batch ×{_factor(ks[0], a, g('bo'), g('bf'), ks[2]):.3f}, step "
                     f"×{_factor(ks[1], a, g('so'), g('sf'), ks[3]):.3f}")
        print(line)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        demo(Path(arg))
