"""A gloo barrier's release after the ranks waited in it, from the harness's barrier probe
(``ddp.barrier_probe``: :func:`demo.ddp_job.barrier_probe`; ``comm.barrier_exit``,
``measured``).

Mechanism (``bench/ddp_held_wake.py``, the DDP demo's job, 2 vCPUs, 2026-12-06 10:39-10:49,
load 1.5-1.75, 6 and 8 rounds of 8 steps): with rank 1 spinning 40 ms before a barrier, rank 1
(the last to arrive) left it 2.00 / 2.28 ms after its arrival (median; 0.40 / 0.45 with no
wait) and rank 0, which had waited, 0.65 / 0.63 ms after it; rank 1's training thread spent
0.91 ms of that runnable on no core (its run-queue wait in the barrier; 0.08 ms without the
wait). In backward the held rank's wall was its thread's CPU plus its run-queue wait to
0.01 ms (no time blocked, none stolen): a resume after a long wait is late because its
threads wake onto cores that others' threads hold, not because they run slower. The DDP
demo's re-measured straggler + barrier runs (2026-12-06, five demos) spent 1.45-1.68 ms in the
last rank's barrier, where the barrier what-if priced it at ``comm.latency_us`` (0.18-0.44 ms
predicted).

The probe runs each wait as a run of consecutive steps, as a straggler's job does: one 40 ms
step between steps without a wait released the last rank 0.50 ms after its arrival (a demo
capture of 10:56, pooled over 4 runs), a run of them 1.11 ms (11:18), against 1.03-1.29 ms in
that demo's re-measured straggler + barrier runs.

Out of sample (DDP demos, 2026-12-06, each alone under the lock, load 1.3-1.9): the last
rank's time in the barrier predicted / measured 1.11 / 1.17 and 1.58 / 1.73 ms (the same
what-if on main's code 0.34 / 2.08 and 0.20 / 1.64 ms); the straggler + barrier row −1.2 % and
+0.4 %, −2.1 % and −0.3 % on the same runs without the probe.

Per wait, the release is the smallest of a run's ranks' median times in the barrier (the last
to arrive waits only for the release; with no wait, whichever rank arrived last), averaged over
the runs given (the capture's and its replicates'), weighted by their steps.
"""
from __future__ import annotations

__all__ = ["barrier_params", "pool_barrier"]


def barrier_params(runs) -> list[tuple[float, float]]:
    """``comm.barrier_exit`` from ``runs`` (each a list of one run's rank sidecars; None
    entries and sidecars without a probe skipped): ``(wait µs, release µs)`` per wait probed,
    increasing; empty without a probe."""
    sums: dict[float, list[float]] = {}
    for run in runs:
        per: dict[float, list] = {}
        for side in run:
            for p in getattr(getattr(side, "ddp", None), "barrier_probe", None) or []:
                per.setdefault(float(p.wait_us), []).append((p.barrier_us, p.steps))
        for wait, got in per.items():
            if len(got) < 2:       # one rank's record: not which rank arrived last
                continue
            us, steps = min(got)
            acc = sums.setdefault(wait, [0.0, 0])
            acc[0] += us * steps
            acc[1] += steps
    return [(w, sums[w][0] / sums[w][1]) for w in sorted(sums)]


def pool_barrier(model, runs: list[list]):
    """``model`` with ``comm.barrier_exit`` from every run's rank sidecars (``runs``: the
    capture's and its replicates'); unchanged when none has a probe."""
    pts = barrier_params(runs)
    if not pts:
        return model
    comm = model.comm.model_copy(update={"barrier_exit": pts})
    meta = model.meta.model_copy(update={"sources": {**model.meta.sources,
                                                     "comm.barrier_exit": "measured"}})
    return model.model_copy(update={"comm": comm, "meta": meta})
