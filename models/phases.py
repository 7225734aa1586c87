"""Where a multi-rank step goes, per rank and phase, read off a simulation's host threads
(issue 12): what the DDP demo scores against the measured phases (:mod:`demo.ddp_phases`) and
what ``whatif`` prints for the baseline and the what-if (:attr:`models.metrics.Summary.
rank_phases_us`). One reader for both.

Each phase is a mean over the measured steps (µs), cut at the same instants of each step as
the harness cuts the measured one (:class:`demo.ddp_job.RunResult.phases`):

- ``fwd``: step start to forward's end (a straggler's spin included);
- ``barrier``: the time in ``dist.barrier()`` (0 without one);
- ``bwd``: backward's start to the start of the last bucket's enqueue (the harness: the last
  gradient's hook), and ``bwd_cpu``, the host thread's busy spans in it (its CPU);
- ``wait``: from there to the optimizer's start: the last enqueue and the wait for the
  outstanding all-reduces, with the core taken back after it;
- ``opt``: the optimizer;
- ``tail``: the optimizer's end to the next step's start;
- ``post``: ``wait + opt + tail``, the last hook to the next step (where the calibrated model
  draws the line between the wait and the optimizer differs from the harness's, so only their
  sum compares exactly with a measurement);
- ``step``: start to next start (the rank's own; the job pays the slower rank's each step).

A rank's step without a backward or an optimizer span is left out, and a rank with no step
left (a model that has neither) has no entry: no NaN, so summaries of equal simulations stay
equal.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

__all__ = ["PHASES", "rank_phases_us"]

PHASES = ("fwd", "barrier", "bwd", "bwd_cpu", "wait", "opt", "tail", "post", "step")
"""The phases, in the order of a step (``bwd_cpu`` inside ``bwd``; ``post`` and ``step``
sums)."""


def rank_phases_us(result) -> dict[int, dict[str, float]]:
    """Per rank, the mean of each of :data:`PHASES` (µs) over the measured steps of
    ``result`` (a :class:`models.simulate.SimResult` that kept its spans), read off its host
    threads' spans (:class:`simcore.record.Span`: lane ``…host``, ``category`` backward,
    optimizer and launch, a barrier's wait named ``wait for the barrier…``); a rank without
    a measured step that has a backward and an optimizer is left out."""
    by = defaultdict(list)
    for sp in result.every_span():
        if sp.lane.endswith(".host") and sp.step >= result.warmup:
            by[(sp.rank, sp.step)].append(sp)
    n = result.step_us.shape[1]
    out = {}
    for i, rank in enumerate(result.ranks):
        starts = result.step_starts_us[i]
        cols = defaultdict(list)
        for step in range(result.warmup, result.warmup + n):
            spans = sorted(by.get((rank, step), []), key=lambda s: s.start_us)
            bw = [s for s in spans if s.category == "backward"]
            opt = [s for s in spans if s.category == "optimizer"]
            if not bw or not opt or step + 1 >= len(starts):
                continue
            bar = [s for s in spans if s.name.startswith("wait for the barrier")]
            t2 = bw[0].start_us
            t1 = bar[0].start_us if bar else t2
            launch = [s for s in spans if s.category == "launch" and s.start_us >= t2]
            tg = launch[-1].start_us if launch else max(s.start_us + s.dur_us for s in bw)
            t3, t4 = opt[0].start_us, max(s.start_us + s.dur_us for s in opt)
            busy = sum(s.dur_us for s in spans if s.kind == "busy" and t2 <= s.start_us < tg)
            for name, v in (("fwd", t1 - starts[step]), ("barrier", t2 - t1),
                            ("bwd", tg - t2), ("bwd_cpu", busy), ("wait", t3 - tg),
                            ("opt", t4 - t3), ("tail", starts[step + 1] - t4),
                            ("post", starts[step + 1] - tg),
                            ("step", starts[step + 1] - starts[step])):
                cols[name].append(v)
        if cols:
            out[rank] = {c: float(np.mean(cols[c])) for c in PHASES}
    return out
