"""Each rank's late resume after a gloo job's last all-reduce, measured per step.

When the all-reduce that ends backward completes, every rank's training thread wakes at once
(DDP's ``finalize_backward`` waits for it, untraced) while both ranks' gloo threads still
run: on the DDP demo's 2 vCPUs one rank's main thread resumes 1.5-1.8 ms after the other's
in about a third of the captured steps (capture of 2026-12-05 07:43: 7 of 19 steps, 6 of them
rank 1), and its gloo end stamp is late by as much (the collective completes late on that
rank). In the timed runs of the same demo one rank's backward returned over 0.5 ms after
the other's in 25-47 % of steps (mean 2.2-3.2 ms), its training thread's CPU in that tail no
higher than the other's (0.77 ms): a wait, not work.

Measured here per step ``n`` and rank ``r``: the main thread's resume ``R[r, n]``, the end
of its longest gap between events after backward's compute (``finalize_backward`` copies the
buckets already reduced back into the gradients, then waits, untraced, for the last, then
copies it: ``torch.distributed.ddp.reducer::copy_bucket_to_grad``; so no later than the last
bucket's copy, :func:`calibration.gloo_steps._resume_bound`), on the job's aligned clock; the
lag ``L[r, n] = R[r, n] − min_r R[·, n]``
(µs, the first rank to resume has 0). Calibration took each step's resume lag into the
reference rank's optimizer op (from its own collective end to the step's end) and every other
rank's only as a mean shift of its optimizer phase, so the simulated ranks drew the
reference's lags (1 of 19 steps in that capture) and the measured doubling of a lag by the
job's per-step statistic (the slower rank's start-to-start time counts a rank late in step n
once in n and once, through the other's wait, in n + 1) was mostly lost. Now the optimizer op draws
its lag-free optimizer time (from the rank's resume to the step's end, which also drops the
late gloo end stamps that shortened it) and carries apart each step's late rank's lag
(``HostOp.resume_lag_us``: per step the largest lag, 0 where both resumed together), which
the simulator gives each step to the rank that entered the all-reduce last (the others
slept in it and resume at once; where they waited under 3 ms, a coin:
``StepEvents.pays_lag``), as a wait that uses no core.
Measured in the 12 kept demo captures of 2026-12-05 (124 steps with a lag over 0.3 ms):
the late rank had entered last in 29 of 34 steps where the other waited over 3 ms, in 49 of
90 where it waited less (a coin: either rank may then lack the core); the straggler what-if
(a 40 ms wait) is the first case. A rank's ``phase_extra_us`` of the optimizer is lag-free;
the profiler factor does not scale the lag.
"""
from __future__ import annotations

import numpy as np

__all__ = ["resume_after_wait", "last_resume", "resume_lags", "late_lags"]


def resume_after_wait(starts_ns: np.ndarray, ends_ns: np.ndarray, after_ns: int,
                      before_ns: int) -> int | None:
    """The end (ns) of the longest gap in the main thread's events (``starts_ns`` sorted,
    ``ends_ns`` alike) from ``after_ns`` to ``before_ns``: the start of the first event after
    the untraced wait; None when no event starts in that window."""
    i, j = (int(np.searchsorted(starts_ns, t, side="left")) for t in (after_ns, before_ns))
    if i >= j:
        return None
    s, e = np.asarray(starts_ns[i:j], float), np.asarray(ends_ns[i:j], float)
    cover = np.maximum.accumulate(np.concatenate([[after_ns], e[:-1]]))
    return int(starts_ns[i + int(np.argmax(s - cover))])


def last_resume(starts_ns: np.ndarray, ends_ns: np.ndarray, after_ns: int,
                runs_ns: list[tuple[int, int]], before_ns: int) -> int | None:
    """The main thread's resume from its wait for the step's last all-reduce (ns;
    :func:`resume_after_wait` on its events ``starts_ns`` / ``ends_ns`` up to ``before_ns``),
    searched from ``after_ns`` (backward's compute and the last enqueue) and the last
    all-reduce's start (``runs_ns``: the step's all-reduces' gloo ``(start, end)`` in
    enqueue order); None without an event there.

    ``finalize_backward`` waits for each bucket in turn and copies it into the gradients: when
    the bucket before the last was still running at backward's end, the main thread first
    waits for it, and that wait (up to a whole transfer) can be the longest gap; the resume
    then read 5.7 ms before the last all-reduce ended (DDP demo 11:59:51 of 2026-12-06,
    replicate r0, rank 1, step 18: two gaps of 5.69 and 5.57 ms around bucket 0's copy), and
    the other rank was given that as its lag, where the harness's own timers had both ranks'
    backward return 0.04 ms apart. So where that bucket's end lies between the window's start
    and the resume found, the resume found may be the end of the wait for it, and the search
    runs again from that end. An end stamped late (a worker may stamp its end after the main
    thread resumed) lies past the resume found and changes nothing.
    """
    start = max([after_ns] + [r[0] for r in runs_ns[-1:]])
    found = resume_after_wait(starts_ns, ends_ns, start, before_ns)
    if found is None or len(runs_ns) < 2 or not start < runs_ns[-2][1] <= found:
        return found
    again = resume_after_wait(starts_ns, ends_ns, runs_ns[-2][1], before_ns)
    return found if again is None else again


def resume_lags(resume_ns: np.ndarray) -> np.ndarray:
    """Per rank and step, how long after the first rank each rank resumed (µs), from the
    resume instants ``resume_ns`` (``(ranks, steps)``, ns on one aligned clock)."""
    r = np.asarray(resume_ns, dtype=float)
    return (r - r.min(axis=0, keepdims=True)) / 1e3


def late_lags(lags_us: np.ndarray) -> list[float]:
    """The late rank's lag in each step (µs; 0 where every rank resumed at once), from
    :func:`resume_lags`' ``(ranks, steps)``: one rank is late at a time, and the simulator
    gives the step's draw to the rank that entered the collective last
    (``HostOp.resume_lag_us``)."""
    return [float(v) for v in np.asarray(lags_us, dtype=float).max(axis=0)]
