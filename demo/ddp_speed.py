"""Two readings of a DDP demo row's re-measured runs that say whether its error is the host's
or the model's (issue 12: the bucket_cap_mb=25 row, predicted 7-30 % slow in ten demos).

* **The host, from identical work.** The forward is the same work in every setting without a
  straggler (the same MLP and batch; DDP's buckets only change backward and what follows), and
  nothing else of the rank runs beside it. So a setting's forward CPU (the training thread's
  ``thread_time`` from the step's start to the forward's end) over the defaults' in the same
  round is the host's speed during that setting's runs relative to the defaults' runs (per
  round, then the median over rounds). Below 1, the setting ran on a faster host and that much
  of a slow prediction is the host's. Ten kept demos of 2026-12-06 (08:47-15:25), re-scored:
  bucket_cap_mb=25 0.87-1.02 (median 0.95), bucket_cap_mb=1 0.97-1.05 (median 0.99). The 25 MB
  runs did run on a faster host in most demos, but by less than their rows' errors: 11:58's
  +32.0 % at 0.92, 15:25's +22.6 % at 1.01; the host explains at most 8 points of the row.
  Straggler settings get
  none: the straggler spins in its forward and the other rank's forward follows a 40 ms wait
  (3.67 against the defaults' 3.29 ms, the same demos), so neither is identical work.
* **The backend's CPU.** Every non-training thread's CPU (gloo's TCP loop and workers,
  kernel ``schedstat``) per rank-step, measured, against the model's price
  (:attr:`models.param_comm.CommParams.host_cpu_us` per collective plus
  ``host_cpu_us_per_mb`` per MiB, summed over the setting's collectives, the barrier's
  included: :func:`models.engine.comm_cpu_us`). The same ten
  demos, measured / priced: the defaults 1.03 (median; 0.83-1.19), bucket_cap_mb=25 0.83
  (0.64-1.05): one 8 MiB all-reduce took 0.9 ms less backend CPU a rank-step than the line
  through the capture's 1 and 7 MiB buckets prices it (15:25: 2.84 against 3.74 ms, the
  defaults 3.98 against 3.85), so the defaults' 7 MiB collective costs more than in proportion
  to its bytes (not modelled; see docs/measurements.md).
"""
from __future__ import annotations

import numpy as np

from stepsim.models.engine import comm_cpu_us

__all__ = ["forward_cpu_us", "backend_cpu_us", "fwd_ratio", "priced_backend_us",
           "row_readings"]


def forward_cpu_us(ranks: list[dict]) -> float | None:
    """One run's forward CPU (µs): the median over its steps of the training thread's CPU from
    the step's start to the forward's end, the mean over ranks (each a
    :class:`demo.ddp_job.RunResult` as a dict); None without phases."""
    per = []
    for r in ranks:
        p = np.asarray(r.get("phases") or [], dtype=float).reshape(-1, 11)
        if len(p):
            per.append(float(np.median(p[:, 6] - p[:, 5])))
    return float(np.mean(per)) if per else None


def backend_cpu_us(ranks: list[dict]) -> float | None:
    """One run's backend CPU per rank-step (µs): every thread but the training thread
    (``threads``, main False) over the run's steps, the mean over ranks; None without the
    records."""
    per = []
    for r in ranks:
        n = len(r.get("phases") or [])
        if n and r.get("threads"):
            per.append(sum(t["cpu_us"] for t in r["threads"] if not t["main"]) / n)
    return float(np.mean(per)) if per else None


def fwd_ratio(runs: dict, label: str, ref: str, repeats: int) -> float | None:
    """The median over rounds of ``label``'s forward CPU over ``ref``'s in the same round
    (runs keyed ``"<label>#<k>"``); None where no round has both."""
    got = []
    for k in range(repeats):
        a, b = runs.get(f"{label}#{k}"), runs.get(f"{ref}#{k}")
        fa, fb = (forward_cpu_us(a) if a else None), (forward_cpu_us(b) if b else None)
        if fa and fb:
            got.append(fa / fb)
    return float(np.median(got)) if got else None


def priced_backend_us(model) -> float:
    """The model's backend CPU per rank-step (µs): the simulator's own price of every
    collective on its comm stream (:func:`models.engine.comm_cpu_us`: ``host_cpu_us +
    host_cpu_us_per_mb × MiB``, a barrier's zero bytes ``host_cpu_us`` alone), summed; 0
    where collectives take no host core."""
    return float(sum(comm_cpu_us(model).values()))


def row_readings(runs: dict, label: str, ref: str, repeats: int, model,
                 straggler: bool) -> dict:
    """A row's ``host_fwd_ratio`` (None for a straggler setting), its measured backend CPU per
    rank-step (``backend_cpu_ms``, mean over its runs) and the model's price of it
    (``backend_priced_ms``, ``model`` the setting's what-if applied)."""
    back = [backend_cpu_us(runs[f"{label}#{k}"]) for k in range(repeats)
            if f"{label}#{k}" in runs]
    back = [b for b in back if b is not None]
    return {"host_fwd_ratio": None if straggler else fwd_ratio(runs, label, ref, repeats),
            "backend_cpu_ms": float(np.mean(back)) / 1e3 if back else None,
            "backend_priced_ms": priced_backend_us(model) / 1e3}
