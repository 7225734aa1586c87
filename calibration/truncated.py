"""The steps a GPU trace's measurements use: complete ones, a truncated last step left out.

A step is *incomplete* when launch calls in it have no GPU activity in the trace
(:func:`calibration.linking.complete_steps`). A last step is *truncated* when the capture
ended during it: the profiler's stop closes the last ``ProfilerStep`` wherever the loop was,
so the step did less than every other step does. It is taken to be truncated when it made
fewer launch calls than every other complete step **and** is shorter than every one of them
(a real last step does the same work as the others; both conditions together are what a cut
leaves). With one complete and one truncated step, the median of the two would be neither;
the truncated step is left out and a warning says how many steps were complete.
"""
from __future__ import annotations

from stepsim.calibration.events import EventTable
from stepsim.calibration.linking import Links, complete_steps, step_coverage

__all__ = ["usable_steps"]


def usable_steps(table: EventTable, links: Links, steps) -> tuple[list, list[str]]:
    """(the complete steps, a truncated last step left out; warnings)."""
    every = step_coverage(table, links, steps)   # (a step's coverage is its own: made once)
    kept, warnings = complete_steps(table, links, steps, cov=every)
    if len(kept) < 2 or not kept[-1].last:
        return kept, warnings
    ids = {id(s) for s in kept}
    cov = {c.number: c.launches for s, c in zip(steps, every) if id(s) in ids}
    last, others = kept[-1], kept[:-1]
    n_min = min(cov[s.number] for s in others)
    d_min = min(s.dur_us for s in others)
    if cov[last.number] < n_min and last.dur_us < d_min:
        warnings.append(
            f"the last step ({last.number}) is truncated (the capture ended during it: "
            f"{cov[last.number]} launch call(s) in {last.dur_us / 1e3:.2f} ms, against at least "
            f"{n_min} in at least {d_min / 1e3:.2f} ms in every other step): {len(others)} of "
            f"{len(steps)} step(s) are complete and only those are used")
        kept = others
    return kept, warnings
