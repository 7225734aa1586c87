"""The run against itself: the profiled steps of a capture against its unprofiled steps after
the profiled window (``Capture.steps(..., after=N)``), both in the sidecar.

A validation scores a re-measured run on its unprofiled steps (:mod:`calibration.measure`),
while calibration fits the trace's profiled ones. When the two differ by more than
:data:`DRIFT_WARN` the model is of steps the run did not keep taking: the machine changed
within the run (other load came or went, its speed moved), or the profiler cost that much.
Seen by a new user on a quiet 2-core machine: profiled steps of 292 ms against 170 ms
unprofiled ones ten seconds later, and every prediction of that model 32–73 % too slow, with
no warning until validation.

**The profiler's stop pauses the loop** (216–222 ms on the demo's 2-core runs, from the last
profiled step's end to the first unprofiled step's start, while it builds the trace). The
DataLoader's workers do not pause: they fill the prefetch queue, and the first unprofiled
steps take batches already made, without waiting, until it runs dry. In a producer-bound run
a backlog of ``B`` batches saves about ``B`` produce times over that drain, however long it
lasts. Seen on the demo at ``num_workers=1`` (produce about 205 ms, training step about
125 ms of CPU): unprofiled steps of 125, 122, 130 ms, then 219, 208, 202 ms; the mean of all
six (168 ms) scored the model's 214.5 ms as 27.7 % too slow, the last three 5.0 %.
:func:`settled_after` leaves out the leading unprofiled steps up to the first whose
``next()`` was blocked for at least :data:`QUEUE_DRY_SHARE` of the step (the queue had no
batch ready) where most steps from it on were too (:func:`drain_end`: the dry queue is the
run's steady state; an isolated dry step is its fluctuation); where the sidecar has every
batch's end instant, up to the first step whose queue level is back at its median
(:func:`queue_levels`, :func:`surplus_end`: the surplus is taken). When none was, the loader kept ahead throughout (a queue that is full in steady
state is full after the pause too) and every step is kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.models.warning_record import said

__all__ = ["AfterScored", "after_line",
           "unprofiled_after", "settled_after", "drain_end", "queue_levels", "surplus_end", "AfterSteps", "drain_note", "profiled_drift",
           "window_note",
           "DRIFT_WARN", "MIN_AFTER_STEPS", "QUEUE_DRY_SHARE", "SCORE_AFTER_STEPS"]

DRIFT_WARN = 0.10
"""Relative difference of the mean profiled step from the mean unprofiled step after it above
which calibration warns (the tolerance of its replay check, ``REPLAY_WARN``)."""
MIN_AFTER_STEPS = 2
"""Fewest unprofiled steps after the profiled window that a validation scores instead of the
trace's profiled steps (and that calibration compares them with)."""
SCORE_AFTER_STEPS = 20
"""Unprofiled steps past the drained ones a capture should leave for a validation's score
(the advice: ``after`` at least ``num_workers × prefetch_factor +`` this; assumed, from a
user's run: 12 after-steps at 4 workers gave mean and median errors of opposite sign, −7.9 %
against +7.1 %, two single steps of 71 and 56 ms against a median of 29 ms pulling the mean).
Fewer are scored, with a note."""
QUEUE_DRY_SHARE = 0.10
"""Share of a step its ``next()`` must be blocked (wall minus CPU time minus its run-queue wait,
where the sidecar has it: waiting for a worker's batch) for the prefetch queue to count as
having run dry at that step (the input-bound share of :mod:`calibration.measure`). The
hand-over of a ready batch is CPU work (unpickling: 1.6–2.3 ms wall against as much CPU on the
demo), so it does not count, nor does a wait for a core: beside 2 spinners on 2 cores the main
thread waking after the profiler's pause waited 3–5 ms for one in its first ``next()`` (over
10 % of a 30 ms step) with a full queue, blocked 0.04–0.24 ms beyond it, where a dry queue
blocked 19–55 ms (tests/test_after_drain.py)."""


def unprofiled_after(side) -> list:
    """The sidecar's steps after its profiled window, timed with the profiler stopped
    (``Capture.steps(..., after=N)``); [] without a sidecar or such steps. Not the steps
    before the window (:func:`calibration.sidecar_fit.probe_base_steps` takes those): a
    validation scores the run as it goes on after the capture, profiler stopped."""
    if side is None or not side.steps:
        return []
    last = max((i for i, s in enumerate(side.steps) if s.profiled), default=None)
    if last is None:
        return []
    return [s for s in side.steps[last + 1:] if s.profiler_on is False]


@dataclass(frozen=True)
class AfterSteps:
    """The unprofiled steps after the profiled window that represent the run (see the module
    docstring).

    Attributes:
        steps: the steps kept (sidecar step rows).
        drained: leading unprofiled steps left out: they took batches the workers made while
            the profiler's stop paused the loop.
        pause_us: that pause (µs, the last profiled step's end to the first unprofiled step's
            start; 0 when the sidecar lacks the instants).
    """

    steps: list
    drained: int = 0
    pause_us: float = 0.0


def _blocked(step) -> bool:
    waited = step.next_run_wait_us or 0.0      # for a core: not for a batch
    return step.next_wall_us - step.next_cpu_us - waited >= QUEUE_DRY_SHARE * step.wall_us


def settled_after(side) -> AfterSteps:
    """The unprofiled steps after the profiled window without the drain of the prefetch queue
    the profiler's stop let fill (the module docstring); every such step at
    ``num_workers=0`` (nothing is made ahead)."""
    after = unprofiled_after(side)
    if not after:
        return AfterSteps([])
    last = [s for s in side.steps if s.profiled][-1]
    pause = (after[0].t_start_us - last.t_start_us - last.wall_us
             if after[0].t_start_us is not None and last.t_start_us is not None else 0.0)
    if side.loader.num_workers == 0:
        return AfterSteps(after, 0, max(pause, 0.0))
    levels = queue_levels(side, after)
    dry = drain_end(after) if levels is None else surplus_end(levels)
    return AfterSteps(after[dry:], dry, max(pause, 0.0))


def queue_levels(side, after: list) -> list[int] | None:
    """Batches made and not yet taken at the start of each step in ``after`` (the sidecar's
    worker batches finished by the step's start, ``t_end_us``, less the steps before it: one
    batch each); None where the sidecar lacks an instant, or a count comes out negative (the
    records are not one batch per step from the loop's start)."""
    ends = [r.t_end_us for r in side.produce if r.worker >= 0]
    if not ends or any(t is None for t in ends) or any(s.t_start_us is None for s in after):
        return None
    ends = np.sort(ends)
    first = next(i for i, s in enumerate(side.steps) if s is after[0])
    levels = [int(np.searchsorted(ends, s.t_start_us, side="right")) - (first + k)
              for k, s in enumerate(after)]
    return None if min(levels) < 0 else levels


def surplus_end(levels: list[int]) -> int:
    """Index of the first step whose queue level (:func:`queue_levels`) is back at or under
    its steady level, the median of the levels: the steps before it took the surplus the
    workers made while the profiler's stop paused the loop. Measured on four demos' 2-core
    runs: at 1 worker levels 1, 1, then 0 (2 steps left out, as the dry-queue rule left
    out); at 2 workers 3–4 falling to a median of 2 (2–3 left out, where the first dry step,
    14–23 steps in, had cut 14–23); at 3–8 workers the queue near full throughout."""
    steady = float(np.median(levels))
    return next((i for i, q in enumerate(levels) if q <= steady), 0)


def drain_end(after: list) -> int:
    """Index of the first step at which the prefetch queue ran dry **and stayed the run's
    steady state**: a strict majority of the steps from it on, at least
    :data:`MIN_AFTER_STEPS` of them, waited for a batch (:func:`_blocked`); 0 when there is
    none (every step kept). A dry step followed mostly by
    steps that found a batch ready is the steady state's own fluctuation (a slow batch, a
    core taken by other load), not the end of the pause's surplus: on four demos' 2-core runs
    at 2–8 workers (``cpu_cores``-bound, the queue ready on most steps) a dry step 3–30 steps
    in cut 10 of 32 runs, 7 of them to 1–10 of their 24–36 steps."""
    flags = [_blocked(s) for s in after]
    for i, dry in enumerate(flags):
        if dry and len(flags) - i >= MIN_AFTER_STEPS and 2 * sum(flags[i:]) > len(flags) - i:
            return i
    return 0


def drain_note(settled: AfterSteps) -> str:
    """What :func:`settled_after` left out, in a sentence ('' when nothing)."""
    if not settled.drained:
        return ""
    return (f"{settled.drained} unprofiled step(s) right after the profiled window left out: "
            f"they took batches the workers made while the profiler's stop paused the loop "
            f"({settled.pause_us / 1e3:.0f} ms), without waiting, until the prefetch queue ran "
            "dry")


@dataclass(frozen=True)
class AfterScored:
    """What a run's validation scored of its unprofiled steps after the window: ``n`` steps
    of mean ``scored_us``, after ``drained`` left out; the trace's profiled steps' mean
    ``traced_us`` (µs); ``notes``: the run's notes that said so (:func:`drain_note`,
    :func:`scored_note`)."""

    n: int
    drained: int
    scored_us: float
    traced_us: float
    notes: tuple[str, ...] = ()


def after_line(ranks: list[tuple[str, AfterScored]]) -> str:
    """A job's ranks' :class:`AfterScored` in one line (each rank's own notes go to the
    record's detail: ``validate --json``)."""
    ns = sorted({a.n for _, a in ranks})
    drained = [f"{name} {a.drained}" for name, a in ranks if a.drained]
    diffs = [100 * (a.traced_us / a.scored_us - 1) for _, a in ranks]
    return (f"measured: the {'-'.join(str(n) for n in (ns[0], ns[-1])[:len(ns)])} unprofiled "
            f"steps after the profiled window on each of {len(ranks)} ranks (sidecar)"
            + (f", less the steps right after it that drew batches made while the profiler's "
               f"stop paused the loop ({', '.join(drained)})" if drained else "")
            + f"; the trace's profiled steps took {min(diffs):+.1f} to {max(diffs):+.1f} % "
            "of the unprofiled ones (each rank's detail: --json)")


def window_note(n: int, after: int) -> str:
    """What a validation scores when the capture has fewer than :data:`MIN_AFTER_STEPS`
    unprofiled steps after its window (``after`` of them, none drained): the trace's ``n``
    profiled steps, the profiler's own cost in them. Unsaid before: a fresh user's Lightning
    re-measurements (2026-12-05, no ``after`` in the callback then) were scored on their 8
    profiled steps without a word, while calibrate had said runs are scored unprofiled."""
    return (f"scored the trace's {n} profiled steps (the profiler's own cost is in them): the "
            f"capture has {after} unprofiled step(s) after its window, fewer than "
            f"{MIN_AFTER_STEPS} (capture with Capture.steps(..., after=N) or the callbacks' "
            f"after=N, N at least num_workers × prefetch_factor + {SCORE_AFTER_STEPS})")


def scored_note(n: int, scored_us: float, traced_us: float, noise: float = 0.0) -> str:
    """What a validation scores: ``n`` unprofiled steps of mean ``scored_us`` (µs), beside the
    trace's profiled steps' mean ``traced_us``, the difference worded for its sign: the
    profiler's own cost only adds, so profiled steps faster than the unprofiled ones say the
    run changed after the window (outside load, the host's speed), not the profiler. A
    difference within ``noise`` (a fraction: :func:`drift_noise` of the two groups of steps)
    is the steps' own scatter, and said so: a −0.1 % difference was worded as outside load
    (2026-12-06)."""
    d = 100 * (traced_us / scored_us - 1)
    why = (f"within the steps' own scatter, ±{100 * noise:.1f} % (two standard errors of the "
           "difference of the means): no change to tell" if abs(d) <= 100 * noise else
           "the profiler's own cost, which only adds, plus the run's drift either way"
           if d >= 0 else "the unprofiled steps ran slower: outside load or the host's speed "
           "changed after the window, not the profiler, whose cost only adds")
    return (f"measured: the {n} unprofiled steps after the profiled window (sidecar), mean "
            f"{scored_us / 1e3:.1f} ms; the trace's profiled steps took {traced_us / 1e3:.1f} "
            f"ms, {d:+.1f} % of that ({why})")


def drift_noise(scored_us, traced_us) -> float:
    """Two standard errors of the difference of the two groups' mean steps (µs each), as a
    fraction of the scored mean: ``2 √(s²_a/n_a + s²_p/n_p) / mean_a``, from the steps' own
    spread (sample variances; 0 for a group of one step, which has none to read)."""
    a, p = np.asarray(scored_us, dtype=float), np.asarray(traced_us, dtype=float)
    if not a.size or not p.size or a.mean() <= 0:
        return 0.0
    var = sum(x.var(ddof=1) / x.size for x in (a, p) if x.size > 1)
    return float(2 * np.sqrt(var) / a.mean())


def _drift_steps(side) -> tuple[list, list]:
    """Every profiled step (the model is of them all) and the settled unprofiled ones after
    them (:func:`settled_after`) that :func:`calibration.calm.calm_among` keeps: at
    ``num_workers=0`` not those whose intra-op team waited for a core another process held,
    the run's pace without that load. A user's capture (2-thread CNN, 2026-12-06 03:32,
    h-fresh11) had 20 calm unprofiled steps at 59 ms and 20 at 120-1900 ms under outside
    load, so its 58 ms profiled window read as 0.17× its run and every validation of its
    model said the window's drift was in each prediction, no interval covering it; against
    its calm steps it drifts 0 %. Another (03:56) had 3 of its 8 profiled steps at
    325-962 ms under load, a window of 271 ms against 66 ms after it: said, since every
    prediction from it was 3.7-4.2× the re-measured runs."""
    from stepsim.calibration.calm import calm_among

    if side is None:
        return [], []
    prof = [s for s in side.steps if s.profiled]
    return prof, calm_among(side, settled_after(side).steps)


def drift_ratio(side) -> float | None:
    """The capture's profiled steps' mean wall time over its settled unprofiled steps' after
    the window (:func:`_drift_steps`) when it differs from 1 by more than
    :data:`DRIFT_WARN`; None otherwise, or without both."""
    prof, after = _drift_steps(side)
    if len(after) < MIN_AFTER_STEPS or not prof:
        return None
    p = float(np.mean([s.wall_us for s in prof]))
    a = float(np.mean([s.wall_us for s in after]))
    if a <= 0 or abs(p / a - 1) <= DRIFT_WARN:
        return None
    return p / a


def profiled_drift(side, path: str = "") -> str | None:
    """A warning when the capture's profiled steps' mean wall time differs from its settled
    unprofiled steps' after the window (:func:`settled_after`) by more than
    :data:`DRIFT_WARN` (None otherwise, or without both)."""
    if drift_ratio(side) is None:
        return None
    prof, after = _drift_steps(side)
    p = float(np.mean([s.wall_us for s in prof]))
    a = float(np.mean([s.wall_us for s in after]))
    head = f"{path + ': ' if path else ''}"
    return said(f"{head}the {len(prof)} profiled steps took "
            f"{p / 1e3:.1f} ms on average, the {len(after)} unprofiled steps right after them "
            f"{a / 1e3:.1f} ms (the profiled ones {100 * (p / a - 1):+.0f} % against them): the machine changed within the run "
            "(other load, its speed) or the profiler cost that much; the model is of the "
            "profiled steps, and a validation of this run scores the unprofiled ones; "
            "re-capture on a quiet machine", "profiled_drift",
            summary=f"{head}profiled steps {p / 1e3:.1f} ms, the unprofiled right after them "
                    f"{a / 1e3:.1f} ms ({100 * (p / a - 1):+.0f} %): the model is of the profiled "
                    "ones")
