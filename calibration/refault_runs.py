"""The share of its most re-faulted pages a run's training step re-faults
(``host.refault_share``, :mod:`calibration.page_faults`), measured over the capture and its
replicates instead of assumed.

Whether a process's step gives its memory back to the kernel, and so re-faults it the next
step, is set by that process's heap (glibc's thresholds and what was allocated between the
step's blocks), so one capture cannot say what the next process will do, and without
replicates the share stays assumed, uniform over 0–1 with its middle as the point. Each
replicate is another process of the same script: the mean faults of its unprofiled steps over
the capture's most (``max_faults``) is one draw of that share. Measured on a plain ``--probe``
demo (2026-12-07 08:47–08:52 UTC, zero20; docs/measurements.md): the 8 runs of its calibration
setting re-faulted 0.20–1.16 of the capture's 8,225 pages a step (mean 0.77), and the other
settings' 16 runs 0.19–1.25 (means 0.93 / 0.70 / 0.74 / 0.88 at 0 / 2 / 4 / 8 workers): the
share is a property of the workload's heap more than of its setting, and 0.5 was low here.

With :data:`MIN_RUNS` or more quiet runs whose steps count their faults, the point is the
runs' mean share (each cut at 1, the most the model prices) and the range the uniform of the
same mean and standard deviation (``mean ± √3 · sd``), cut to 0–1: the spread of one run's
share, not of the mean's. The runs' shares are kept (``host.refault_share_runs``): intervals
draw the pooled mean of a validation's runs from their Student-t predictive, which adds the
measured mean's own error (``sd / √n``) to the new runs' scatter (:mod:`models.run_share`).
Measured.
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.calibration.probe_pool import MIN_RUNS, quiet_replicates
from stepsim.calibration.probe_steps import probe_base_steps
from stepsim.models.warning_record import said, without_kinds

__all__ = ["run_share", "pool_refault_share"]


def run_share(side, max_faults: int) -> float | None:
    """The mean faults of ``side``'s unprofiled steps after the first (those
    :func:`calibration.probe_steps.probe_base_steps` compares) over ``max_faults``, cut to
    0–1; None where its steps do not count faults."""
    faults = [side.steps[i].minflt for i in probe_base_steps(side)]
    faults = [f for f in faults if f is not None]
    if not faults or max_faults <= 0:
        return None
    return min(float(np.mean(faults)) / max_faults, 1.0)


def pool_refault_share(model, side, replicates):
    """``model`` with ``host.refault_share`` and its range measured over the capture ``side``
    and its quiet ``replicates`` ((path, sidecar) pairs; see the module docstring); the model
    itself where the share is not the assumed one or fewer than :data:`MIN_RUNS` runs count
    their faults."""
    from stepsim.calibration.page_faults import refault_fit

    if side is None or model.meta.sources.get("host.refault_share") != "assumed":
        return model
    rf = refault_fit(side)
    if rf is None or rf.max_faults <= 0:
        return model
    shares = [v for v in [run_share(s, rf.max_faults) for s in
                          [side] + quiet_replicates(replicates)] if v is not None]
    if len(shares) < MIN_RUNS:
        return model
    m, sd = float(np.mean(shares)), float(np.std(shares, ddof=1))
    lo, hi = max(m - math.sqrt(3) * sd, 0.0), min(m + math.sqrt(3) * sd, 1.0)
    text = (f"the training step's page faults over {len(shares)} runs of this setting (the "
            f"capture and its quiet replicates, each its own process's heap): their steps "
            f"re-faulted " + ", ".join(f"{v:.2f}" for v in shares)
            + f" of the capture's most ({rf.max_faults} pages), mean {m:.2f}: the step adds "
              f"{m:.2f} × the re-faulting step's CPU, one run's share spread over "
              f"{lo:.2f}–{hi:.2f} (the runs' mean ± √3 sd, cut to 0–1; measured); an interval "
              f"draws the mean of its runs from the Student t over these {len(shares)} (the "
              "mean's own error included), where a capture alone assumes 0.5 over 0–1")
    kept = without_kinds(model.meta, {"page_faults"})
    note = said(text, "page_faults", effect_us=m * rf.refault_us,
                summary=f"step re-faults up to {rf.refault_us / 1e3:.1f} ms of CPU: the runs "
                        f"measured {m:.2f} × that (the interval {lo:.2f}–{hi:.2f} ×)")
    meta = model.meta.model_copy(update={
        "warnings": [*kept, note],
        "sources": {**model.meta.sources, "host.refault_share": "measured"}})
    host = model.host.model_copy(update={"refault_share": m, "refault_share_range": (lo, hi),
                                         "refault_share_runs": shares})
    return model.model_copy(update={"host": host, "meta": meta})
