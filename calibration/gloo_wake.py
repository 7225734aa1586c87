"""A gloo collective's wake-ups and each one's wait for a core, from the capture's per-bucket
schedstat (``comm.wakeups``, ``comm.wakeups_per_mb``, ``comm.wakeup_wait_us``).

Gloo's threads block between messages (the worker waits for the TCP loop thread's receive,
the loop for the socket), so one all-reduce is many wake-ups; on a host whose cores the
training threads keep busy, each wake-up waits for a running thread's slice before it runs.
The DDP demo (2 ranks, 2 vCPUs, 2026-12-05, load 1.0-1.4) measured per rank-step 42, 80 and
32 timeslices of the backend threads with 2, 8 and 1 all-reduces of the same 8 MiB (about
7 per collective and 3 per MiB), and 143-164 µs of run-queue wait per timeslice while
backward kept the cores busy.

The job's bucket marks (``ddp.bucket_cpu``: from one bucket's readiness to the next's, the
last to the step's end) carry the backend threads' timeslices and run-queue wait
(``measured``):

* wake-ups per collective ``w0 + w1 × MiB``: least squares of each mark's timeslices per step
  against its bucket's MiB over every rank (and replicate); with one size, ``w1 = 0`` and
  ``w0`` their mean;
* the wait per wake-up when every core is busy, ``L``: run-queue wait over timeslices in the
  marks of the buckets before the last (reduced while backward runs on the cores); the last
  bucket's runs after backward, with the cores not all busy, and its waits are part of the
  measured transfer that :mod:`calibration.gloo_transfer` fits.

Without the marks' timeslices (an older sidecar) the values are :data:`PRIOR` (``assumed``,
drawn ±50 % in the intervals); without a bucket before the last (a single bucket), ``L`` alone
is.
"""
from __future__ import annotations

import numpy as np

__all__ = ["PRIOR", "wake_params", "pool_wake"]

MIB = 2 ** 20

PRIOR = {"wakeups": 7.0, "wakeups_per_mb": 3.0, "wakeup_wait_us": 150.0}
"""Assumed when the capture lacks the marks: the DDP demo's measurement above (2 vCPUs), a
CFS wake-up onto a busy core waiting a fraction of the running thread's slice."""

KEYS = tuple(PRIOR)


def wake_params(sidecars, warnings: list[str] | None = None) -> tuple[dict, dict]:
    """``(values, sources)`` of ``comm.wakeups``, ``comm.wakeups_per_mb`` and
    ``comm.wakeup_wait_us`` from the capture sidecars ``sidecars`` (any iterable; None
    entries skipped), as the module docstring says."""
    rows, rhs, wait_us, slices = [], [], 0.0, 0
    complete = True
    for side in sidecars:
        marks = list(getattr(getattr(side, "ddp", None), "bucket_cpu", None) or [])
        if not marks:
            continue
        if any(b.timeslices is None or b.runqueue_us is None for b in marks):
            complete = False
            continue
        for k, b in enumerate(marks):
            rows.append([1.0, b.bytes / MIB])
            rhs.append(b.timeslices / b.steps)
            if k < len(marks) - 1:
                wait_us += b.runqueue_us
                slices += b.timeslices
    vals, src = dict(PRIOR), dict.fromkeys(KEYS, "assumed")
    if not rows or not complete:
        if warnings is not None:
            warnings.append("the capture sidecars lack the backend threads' timeslices per "
                            "bucket: each gloo collective is assumed to wake its threads "
                            f"{PRIOR['wakeups']:g} + {PRIOR['wakeups_per_mb']:g}/MiB times, "
                            f"{PRIOR['wakeup_wait_us']:g} µs each on busy cores")
        return vals, _sources(src)
    A, y = np.array(rows), np.array(rhs)
    w0 = w1 = None
    if len({round(r[1], 9) for r in rows}) >= 2:
        (w0, w1), *_ = np.linalg.lstsq(A, y, rcond=None)
    if w0 is None or w0 < 0 or w1 < 0:
        w0, w1 = float(y.mean()), 0.0
    vals.update(wakeups=float(w0), wakeups_per_mb=float(w1))
    src.update(wakeups="measured", wakeups_per_mb="measured")
    if slices:
        vals["wakeup_wait_us"] = wait_us / slices
        src["wakeup_wait_us"] = "measured"
    elif warnings is not None:
        warnings.append("no DDP bucket was reduced during backward in the capture: the wait "
                        f"for a core per wake-up on busy cores is assumed "
                        f"({PRIOR['wakeup_wait_us']:g} µs)")
    return vals, _sources(src)


def _sources(src: dict) -> dict:
    return {f"comm.{k}": v for k, v in src.items()}


def pool_wake(model, runs: list[list]):
    """``model`` (a gloo job's) with the wake-up parameters fitted over every run's rank
    sidecars (``runs``: the capture's and its replicates', the same setting measured again);
    unchanged when the capture's were not measured or a run lacks the marks."""
    if model.meta.sources.get("comm.wakeups") != "measured" or len(runs) < 2 or not all(
            run and all(getattr(getattr(s, "ddp", None), "bucket_cpu", None) for s in run)
            for run in runs):
        return model
    vals, src = wake_params([s for run in runs for s in run])
    if src["comm.wakeups"] != "measured":
        return model
    comm = model.comm.model_copy(update=vals)
    meta = model.meta.model_copy(update={"sources": {**model.meta.sources, **src}})
    return model.model_copy(update={"comm": comm, "meta": meta})
