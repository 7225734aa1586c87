"""Why the demo's 0-worker runs did their work in less CPU than its capture (issue 10), from
the runs `stepsim demo` records: no new runs, so it needs no lock.

Per demo folder (``OUT/runs/nwS-rK``), from each run's sidecar
(:func:`calibration.work_gauge._work_parts`: the mean CPU µs of a batch's produce, and of a
training step outside ``next()`` less its page faults):

* ``capture / other 1-worker runs``: the capture (``nw1-r0``) against the mean of its
  replicates. The demo's table gives every setting's CPU ("CPU time ×") against the capture
  alone, so a capture that ran on a slow stretch of the host reads every other setting cheap;
* ``S workers / 1 worker``: each setting's mean batch and step CPU against the 1-worker
  runs' pooled mean (the speed calibration centres on: the capture and its replicates);
* the co-run interference coefficient each implies under the model's form
  (:mod:`calibration.corun`: CPU work × ``1 + a·o``, ``o`` the busy share of the other core
  beside it, measured per run by :func:`calibration.corun.corun_loads`):
  ``ratio = (1 + a·o_S) / (1 + a·o_1)``, solved for ``a``.

Over the folders: medians, and the median's P10–P90 over a bootstrap of the folders (a set's
runs share one stretch of the host, so the set is the unit). Run from anywhere with the
package importable: ``python -m stepsim.bench.zero_workers OUT [OUT ...]``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import brentq

from stepsim.calibration.corun import activities, corun_loads
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_fit import after_startup
from stepsim.calibration.work_gauge import _work_parts

KINDS = ("batch", "step")
BOOT = 2000


def _run(d: Path) -> dict:
    """One run's mean batch and step CPU (µs) and their mean co-run loads."""
    side = load_sidecar(d / "sidecar.json")
    parts = _work_parts(side)
    acts = activities(after_startup(side.produce), side.steps, side.loader.num_workers > 0,
                      side.torch_num_threads or 1)
    loads = corun_loads(acts, side.host_cores or 2)
    out = {"batch": parts.get("produce", np.nan), "step": parts.get("train", np.nan)}
    for kind in KINDS:
        sel = [x for a, x in zip(acts, loads) if a.kind == kind and a.fitted]
        out[f"o_{kind}"] = float(np.mean(sel)) if sel else np.nan
    return out


def folder(out: Path) -> dict:
    """Per setting: the means over its runs; ``capture``: the capture's batch + step over
    its replicates' mean."""
    per: dict[int, list[tuple[int, dict]]] = {}
    for d in (out / "runs").iterdir():
        s, k = map(int, re.findall(r"\d+", d.name))
        per.setdefault(s, []).append((k, _run(d)))
    mean = {s: {f: float(np.nanmean([r[f] for _, r in rs])) for f in rs[0][1]}
            for s, rs in per.items()}
    one = per[1]
    cap = [r for k, r in one if k == 0][0]
    rest = [r for k, r in one if k != 0]
    work = np.mean([r["batch"] + r["step"] for r in rest]) if rest else np.nan
    return {"settings": mean, "capture": (cap["batch"] + cap["step"]) / work}


MIN_LOAD_CHANGE = 0.1
"""Least change of co-run load between two settings that :func:`implied` reads a coefficient
from: the training step's load is 0.97 at 1 worker and 0.97-0.99 at 2-8, so its CPU ratio
there (×0.87-1.29 over three sets, host noise) would imply coefficients of ±1 and more."""


def implied(ratio: float, o_s: float, o_1: float) -> float:
    """``a`` with ``(1 + a·o_s) / (1 + a·o_1) = ratio`` (nan where the loads differ by less
    than :data:`MIN_LOAD_CHANGE`)."""
    if abs(o_s - o_1) < MIN_LOAD_CHANGE:
        return float("nan")
    return (ratio - 1) / (o_s - ratio * o_1)


def _work_a(one: dict, zero: dict) -> float:
    """One ``a`` for a 0-worker step's work (its batch and its training step, loads 0)
    against the 1-worker runs' (loads ``o_batch``, ``o_step``):
    ``(b / (1 + a·o_b) + s / (1 + a·o_s)) / (b + s)`` = the measured ratio of the sums."""
    b, s = one["batch"], one["step"]
    want = (zero["batch"] + zero["step"]) / (b + s)

    def gap(a: float) -> float:
        return (b / (1 + a * one["o_batch"]) + s / (1 + a * one["o_step"])) / (b + s) - want

    return float(brentq(gap, -0.5, 5.0)) if gap(-0.5) * gap(5.0) < 0 else float("nan")


def _boot(v: np.ndarray, rng) -> str:
    v = v[np.isfinite(v)]
    if not v.size:
        return "none (the load did not change)"
    meds = np.median(v[rng.integers(0, v.size, (BOOT, v.size))], axis=1)
    lo, hi = np.percentile(meds, [10, 90])
    return f"median {np.median(v):+.3f} (bootstrap P10-P90 {lo:+.3f} to {hi:+.3f}, n {v.size})"


def main(outs: list[str]) -> None:
    rows = {}
    caps, works = [], []
    for out in map(Path, outs):
        f = folder(out)
        caps.append(f["capture"])
        one = f["settings"][1]
        line = f"{out.name}: capture / other 1-worker runs {f['capture']:.3f}"
        for s, m in sorted(f["settings"].items()):
            if s == 1:
                continue
            line += f" | nw{s}"
            for kind in KINDS:
                r = m[kind] / one[kind]
                a = implied(r, m[f"o_{kind}"], one[f"o_{kind}"])
                rows.setdefault((s, kind), []).append((r, a))
                line += f" {kind} x{r:.3f} (o {one[f'o_{kind}']:.2f}->{m[f'o_{kind}']:.2f}, a {a:+.2f})"
        zero = f["settings"].get(0)
        if zero is not None:
            works.append(_work_a(one, zero))
            line += f" | nw0 batch + step: a {works[-1]:+.3f}"
        print(line)
    rng = np.random.default_rng(0)
    w = np.array(works)
    print(f"nw0 batch + step CPU: implied a {_boot(w, rng)}; over the sets P10-P90 "
          f"{np.nanpercentile(w, 10):+.3f} to {np.nanpercentile(w, 90):+.3f}")
    print(f"capture / its replicates (batch + step CPU): {_boot(np.array(caps), rng)}")
    for (s, kind), v in sorted(rows.items()):
        v = np.array(v)
        print(f"nw{s} {kind:5} CPU / 1 worker's: ratio {_boot(v[:, 0], rng)}; "
              f"implied a {_boot(v[:, 1], rng)}")


if __name__ == "__main__":
    main(sys.argv[1:])
