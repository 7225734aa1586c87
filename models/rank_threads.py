"""Ranks that share a host, each on torch's intra-op threads: more compute threads than the
host has cores, and what that did to the captured steps.

torch's default is one intra-op thread per core *per process*: two DDP ranks on a 2-core host
run 2 × 2 OpenMP threads (besides each rank's DataLoader workers and gloo's threads), and an
OpenMP team spins at every parallel region while one of its threads waits for a core. Measured
on this project's 2-core machine (a user's 2-rank gloo transformer, 2026-12-06, 2 threads a
rank, 1 worker a rank): steps in two modes, 200–250 ms and 900–1,400 ms, the main thread
burning about 600 ms of CPU in the slow ones. Re-measured in one lock-held session
(2026-12-06 09:10, load 1.3–2.3; job step = the slower rank's, 23 unprofiled steps a run):
at 1 thread a rank (OMP_NUM_THREADS=1) 101.5 and 101.0 ms mean (P10–P90 93–111 ms, slowest
120 ms), at 2 threads 745 ms mean (median 257, P10–P90 152–1,590, slowest 2,180 ms): ×7.4,
and the slow mode gone. A multi-rank CPU model runs each rank's host ops
on one thread (no parallel part), so it holds none of that spin and no interval covers it.

The check is on values a capture records (sidecar: ``torch_num_threads``, ``host_cores``,
``ddp.hosts``), so calibration and every verb say the same sentence. Times are µs.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from stepsim.models.warning_record import said

__all__ = ["HEAVY_TAIL", "ranks_on_host", "rank_threads_warning", "model_rank_threads",
           "fitting_rank_threads"]

HEAVY_TAIL = 2.0
"""Steps are heavy-tailed (or bimodal) when the slowest is at least this many times the median,
or the P90 this many times the P10 (assumed; the spinning team's slow mode measured 4–6× the
fast one, 900–1,400 against 200–250 ms)."""


def ranks_on_host(hosts: Sequence[str | None]) -> tuple[str, int]:
    """(host name, ranks on it) of the host with the most ranks; ("", 0) when no rank names
    its host."""
    named = Counter(h for h in hosts if h)
    return named.most_common(1)[0] if named else ("", 0)


def _tail(steps_us: Sequence[float]) -> str:
    """Words for heavy-tailed steps (:data:`HEAVY_TAIL`), "" when they are not (or fewer than
    3 steps)."""
    s = np.asarray(steps_us, dtype=float)
    if s.size < 3 or not np.all(s > 0):
        return ""
    med, (p10, p90) = float(np.median(s)), np.percentile(s, [10, 90])
    if s.max() < HEAVY_TAIL * med and p90 < HEAVY_TAIL * p10:
        return ""
    return (f"its steps are heavy-tailed (median {med / 1e3:.0f} ms, slowest "
            f"{s.max() / 1e3:.0f} ms, P10–P90 {p10 / 1e3:.0f}–{p90 / 1e3:.0f} ms)")


PRICED = "prices one thread a rank from this capture's least-spun steps"
UNPRICED = ("cannot price one thread a rank from this capture (its sidecars lack the steps' "
            "or the threads' CPU: ddp.threads)")


def fitting_rank_threads(cores: int, ranks: int) -> int:
    """The intra-op threads a rank that fit the host's cores: ``cores // ranks``, at least 1."""
    return max(cores // max(ranks, 1), 1)


def rank_threads_warning(hosts: Sequence[str | None], threads: int, cores: int,
                         workers: int, steps_us: Sequence[float], priced: bool = False
                         ) -> str | None:
    """One sentence when the ranks on one host × their intra-op ``threads`` exceed its
    ``cores`` and the measured ``steps_us`` (µs) are heavy-tailed: the cause and the fix
    (``torch.set_num_threads(cores // ranks)``); None otherwise. ``workers``: DataLoader
    workers a rank; ``priced``: whether the model holds the readings that price one thread a
    rank (:mod:`scenarios.rank_one_thread`)."""
    host, ranks = ranks_on_host(hosts)
    if ranks < 2 or threads < 2 or ranks * threads <= cores:
        return None
    tail = _tail(steps_us)
    if not tail:
        return None
    n = fitting_rank_threads(cores, ranks)
    return said(f"oversubscribed intra-op threads across ranks: {ranks} ranks on host {host} × "
            f"{threads} intra-op threads = {ranks * threads} compute threads (besides "
            f"{ranks * workers} DataLoader worker(s) and gloo's threads) on its {cores} cores, "
            f"and {tail}: torch's intra-op team spins at each parallel region while a thread "
            "waits for a core, which this model does not simulate (each rank's host ops run "
            "on one thread), so no interval covers it, and main-thread CPU read as outside "
            f"load may be this spin; set torch.set_num_threads({n}) in each rank (cores // "
            f"ranks on the host; or OMP_NUM_THREADS={n}) and re-capture; --fix "
            "intra_op_threads " + (PRICED if priced else UNPRICED),
                "rank_threads", uncovered=True)


def model_rank_threads(model) -> tuple[str | None, int]:
    """(:func:`rank_threads_warning` of a calibrated StepModel, the fitting threads a rank):
    its ranks' hosts, the intra-op threads its capture recorded (``meta.notes``
    ``intra_op_threads``, else its team's), ``loader.host_cores`` and its measured steps."""
    threads = model.meta.notes.get("intra_op_threads")
    threads = threads if isinstance(threads, int) else model.team_threads()
    hosts = [r.host for r in model.ranks]
    cores = model.loader.host_cores
    said = rank_threads_warning(hosts, threads, cores, model.loader.num_workers,
                                model.meta.measured_step_us,
                                "one_thread_cpu_us" in model.meta.notes)
    return said, fitting_rank_threads(cores, ranks_on_host(hosts)[1])
