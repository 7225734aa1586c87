"""A DataLoader worker's CPU per batch outside producing it (``loader.worker_handover_us``),
from the capture sidecar.

A worker process does more per batch than its produce time (first sample fetch to the end of
``collate_fn``, what the sidecar's ``produce`` records time): it hands the batch over (its
queue's feeder thread pickles the shared-memory handles and writes them to a pipe) and runs
its loop's queue work. That CPU is on the worker's core share, before the batch reaches the
main process, so beside torch's intra-op team on too few cores it lengthens the batch's turn
like produce work. The sidecar records it per batch as ``gap_cpu_us`` (the worker process's
CPU since its previous batch ended). Measured (2026-12-05, 2 cores; two users' CNNs, batches
of 64 32×32 images, 787 KB in 2 tensors): 0.77–1.06 ms a batch at 1 worker, 1.12–1.67 ms at
2 and 4 (13 captures), where the 0-worker capture's in-process produce it is added to is
14–17 ms; a worker's produce itself took ×1.03 the in-process one and ×1.06 beside any
co-runner (the team's, one thread's or two busy loops', per-thread clocks, interleaved), which
``host.interference`` prices, so the team adds no CPU of its own to a worker's batch.

A capture with workers measures it from its own records, a 0-worker capture from its probe at
a second ``num_workers`` (``Capture.steps(..., probe_workers=N)``); without either it is
:data:`HANDOVER_PRIOR_US`, assumed (drawn ±50 % by the intervals). The main process's side of
the hand-over (``loader.unpickle_us``, the main thread's CPU in ``next()``) is measured so too
(:func:`probe_unpickle`), where a 0-worker capture had taken it as 0.
"""
from __future__ import annotations

import numpy as np

HANDOVER_PRIOR_US = 1_100.0
"""The assumed hand-over CPU per batch (µs) without a worker record to measure it: the middle
of the 0.77–1.67 ms measured on the 2-core host (module docstring); the intervals draw it
±50 % (0.55–1.65 ms), as every assumed value. A faster host or a batch of many tensors can
lie outside it: record a probe (``probe_workers=N``) to measure it."""
UNPICKLE_PRIOR_US = 900.0
"""The main thread's CPU per batch received from a worker (``loader.unpickle_us``, µs)
assumed for a 0-worker capture without a probe: measured 0.7–1.2 ms of CPU in ``next()`` at
1–4 workers on the same batches (the main thread's ``next_cpu_us``, 2026-12-05; before, 0 was
assumed, so a what-if adding workers to a 0-worker capture left it out); drawn ±50 %."""
MIN_RECORDS = 3
"""Fewest worker batches with a measured gap (or probe steps) a median is taken over."""
PROBE_FIRST_STEPS = 2
"""A probe's first steps, left out (they carry its workers' start-up)."""


def probe_unpickle(side) -> tuple[dict, dict]:
    """``(loader fields, sources)`` for ``loader.unpickle_us`` of a 0-worker capture (a
    capture with workers measures it from its own steps, :func:`~calibration.sidecar_fit.
    loader_from_sidecar`): the median main-thread CPU in ``next()`` over its probe's steps at
    a second ``num_workers``, measured; else :data:`UNPICKLE_PRIOR_US`, assumed."""
    key = "loader.unpickle_us"
    probe = side.probe if side is not None else None
    if probe is not None and probe.num_workers > 0:
        cpu = [s.next_cpu_us for s in probe.steps[PROBE_FIRST_STEPS:]]
        if len(cpu) >= MIN_RECORDS:
            return {"unpickle_us": float(np.median(cpu))}, {key: "measured"}
    return {"unpickle_us": UNPICKLE_PRIOR_US}, {key: "assumed"}


def handover_from_sidecar(side) -> tuple[dict, dict, list[str]]:
    """``(loader fields, sources, warnings)`` for ``loader.worker_handover_us``: the median
    ``gap_cpu_us`` of the capture's worker batches, else of its probe's (a probe at a second
    ``num_workers``), measured; else :data:`HANDOVER_PRIOR_US`, assumed, and a warning says
    so, unless the capture timed no batch (no DataLoader: nothing to hand over). A worker's
    first batch has no gap (its start-up is before it)."""
    key = "loader.worker_handover_us"
    if side is None:
        return {"worker_handover_us": HANDOVER_PRIOR_US}, {key: "assumed"}, []
    where = [("capture", side.produce)]
    if side.probe is not None and side.probe.num_workers > 0:
        where.append((f"probe at num_workers={side.probe.num_workers}", side.probe.produce))
    for name, recs in where:
        gaps = [r.gap_cpu_us for r in recs if r.worker >= 0 and r.gap_cpu_us is not None]
        if len(gaps) >= MIN_RECORDS:
            return {"worker_handover_us": float(np.median(gaps))}, {key: "measured"}, []
    warnings = [
        f"a worker's hand-over CPU per batch was not measured (no worker batches in the "
        f"capture or a probe): {HANDOVER_PRIOR_US / 1e3:.1f} ms assumed, drawn ±50 %, for "
        "what-ifs with workers (record a probe, Capture.steps(..., probe_workers=N))"
    ] if side.produce else []
    return {"worker_handover_us": HANDOVER_PRIOR_US}, {key: "assumed"}, warnings
