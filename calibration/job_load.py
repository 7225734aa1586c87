"""Outside load on a re-measured run of several processes on one host (a DDP job's ranks):
the job's own threads are every rank's, so the cores one rank's threads could not hold because
another rank held them are the job's, not outside load.

:func:`calibration.outside_load.outside_load` reads one process's busy intervals against the
host's cores. Read rank by rank, a 2-rank gloo job on 2 cores, torch's default 2 intra-op
threads a rank, held 50.5-51.5 % in each rank (validate said "about 2.0x slower than the
machine alone" and left 2 of 3 rows out of the ledger's score), while the sidecars'
``/proc/stat`` readings (the rule calibration uses, :func:`calibration.outside_load.speed_change`)
gave other processes 0-4 % of the cores: each rank counted the other as outside load. Swept
together, every rank's intervals on one host with their runnable threads summed, the same runs
held 97.3-98.7 % (a user's runs, 2026-12-07: b100-1..3, base-1, baseline). One rule, then:
every rank of the run being scored is the run.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from stepsim.calibration.outside_load import (BATCH, OutsideLoad, cut_to_span, busy_spans,
                                              held_over)
from stepsim.calibration.run_drift import MIN_AFTER_STEPS, settled_after
from stepsim.calibration.sidecar_cross import step_window
from stepsim.calibration.sidecar_fit import fit_produce, steady_records


def threads_per_worker(side) -> int:
    """The threads each of the capture's DataLoader workers ran on, fitted from its steady
    batches (:func:`calibration.sidecar_fit.fit_produce`); 1 without them."""
    nw = side.loader.num_workers
    recs = steady_records(side, nw)
    return fit_produce(recs, nw, side.host_cores)[1] if recs else 1


def _rank_rows(side) -> tuple[np.ndarray, int] | None:
    """One rank's busy intervals cut to the span it is scored on (its settled unprofiled
    steps when at least :data:`MIN_AFTER_STEPS`, else its profiled window, as
    :func:`calibration.run_load.remeasured_load` reads one process), and how many of them were
    unprofiled steps (0: the window); None where its sidecar cannot tell."""
    after = settled_after(side).steps
    scored = after if len(after) >= MIN_AFTER_STEPS else None
    span = step_window(side.steps) if scored is None else step_window(scored, profiled=False)
    if not side.host_cores or span is None:
        return None
    nw = side.loader.num_workers
    a = busy_spans(side, nw, threads_per_worker(side), side.torch_num_threads or 1)
    if not a.size or not (a[:, 4] == BATCH).any():
        return None
    return cut_to_span(a, *span), len(scored or [])


def job_load(sides: list) -> OutsideLoad | None:
    """The outside load on a re-measured job of several ranks (``sides``: each rank's
    sidecar): per host (``host_name``), every rank's busy intervals swept as one run's
    (:func:`calibration.outside_load.held_over`), the host whose ranks held the least; None
    where any rank's sidecar is missing or cannot tell."""
    if not sides or any(s is None for s in sides):
        return None
    hosts: dict = {}
    for side in sides:
        rows = _rank_rows(side)
        if rows is None:
            return None
        hosts.setdefault((side.host_name, side.host_cores), []).append(rows)
    worst = None
    for (_, cores), group in hosts.items():
        load = held_over(np.concatenate([a for a, _ in group]), cores)
        if load is None or load.held <= 0:
            return None
        n = min(k for _, k in group)
        where = (f"the {n} unprofiled steps it is scored on" if n else "its profiled window")
        load = replace(load, where=f"{where}, its {len(group)} ranks' threads together")
        if worst is None or load.held < worst.held:
            worst = load
    return worst
