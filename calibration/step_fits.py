"""The step fits one trace's fit makes (:func:`fit_steps`): the representative step's group and
the captured window's other complete steps, in two processes at once where the window's share
is large enough to pay for a fork.

Each step's fit (:func:`calibration.step_fit.fit_step`) reads the trace's lookups
(:class:`calibration.trace_context.TraceContext`) and no other step's fit, so the window's last
steps can be fitted in a forked process (:func:`calibration.rank_pool.beside`: it inherits the
table, nothing is pickled to it; the fits come back pickled) while this one fits the first ones;
the fits are equal either way, in the same order (see :data:`MIN_FORKED_ACTS` for when the
fork pays).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.rank_pool import beside, raised
from stepsim.calibration.step_fit import StepFit, fit_step
from stepsim.calibration.steps import Step
from stepsim.calibration.trace_context import TraceContext

__all__ = ["fit_steps", "MIN_FORKED_ACTS", "MAX_FORKED_FITS"]

MAX_FORKED_FITS = 16
"""Most fits made in the forked process: its fits come back as one pickle, held whole in this
process while it is read (about 0.2 kB per GPU activity: the 54 MB trace's two forked fits
1.6 MB). Uncapped, the synthetic 500 MB trace's window (200 steps, 100 of them forked) put
its peak at 1,464 MB, 2.93x the file, against 1,394 MB in one process (2026-12-07 17:51)."""

MIN_FORKED_ACTS = 5_000
"""The fewest GPU activities the forked process's steps must hold for it to be used. A fit
costs about 9 µs of CPU per activity of its step (the 54 MB trace: 35-45 ms for 4,458), and
the fork of the trace's process and the fits sent back cost about 30 ms there (five fits: 180-194
ms in one process, 136-143 ms with two of them forked; three runs each, alone, 2026-12-07
17:30): below this the steps are fitted here, one after the other."""


def _fit_all(item: tuple) -> list[StepFit]:
    """(in the forked process) the fits of ``item`` = (context, steps), in order."""
    ctx, steps = item
    return [fit_step(ctx, s) for s in steps]


def _acts_in(ctx: TraceContext, steps: list[Step]) -> int:
    """How many of the trace's GPU activities start inside ``steps`` (their spans, ns)."""
    starts = np.sort(ctx.ts[ctx.links.gpu_rows])
    return int(sum(np.searchsorted(starts, s.end_ns) - np.searchsorted(starts, s.start_ns)
                   for s in steps))


def fit_steps(ctx: TraceContext, first: list[Step], rest: list[Step]) -> list[StepFit]:
    """``[fit_step(ctx, s) for s in first + rest]``: ``first`` here; of ``rest``, the last
    half of all the fits (at most :data:`MAX_FORKED_FITS`) in a forked process while this one
    fits the others, where those hold at least :data:`MIN_FORKED_ACTS` GPU activities (else
    every fit here). An error is the one the fits in order raise first."""
    n_there = min(len(rest), (len(first) + len(rest)) // 2, MAX_FORKED_FITS)
    there = rest[len(rest) - n_there:]
    here = first + rest[:len(rest) - n_there]
    if not there or _acts_in(ctx, there) < MIN_FORKED_ACTS:
        return [fit_step(ctx, s) for s in first + rest]
    theirs, mine = beside(_fit_all, (ctx, there), lambda: [fit_step(ctx, s) for s in here])
    return mine + raised(theirs)
