"""One trace's fit before the ranks are combined (:func:`fit_rank` → :class:`RankFit`):
steps, links, the representative step and its captured window, notes and the rank.

Stages: :func:`calibration.steps.find_steps` → :func:`calibration.linking.link` →
:func:`calibration.truncated.usable_steps` → the median step(s) fitted
(:mod:`calibration.step_fit`, :mod:`calibration.representative`) → the window's backlog and
launch queue (:mod:`calibration.backlog`) → notes (:mod:`calibration.gpu_notes`) → the rank
(:func:`calibration.trace_io.rank_of`).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.calibration.backlog import backlog_rows, backlog_us, peak_pending
from stepsim.calibration.events import EventTable, dropped_note
from stepsim.calibration.gpu_notes import fit_notes
from stepsim.calibration.graphs import graph_refusal
from stepsim.calibration.host_ops import END_OF_STEP_SYNC
from stepsim.calibration.linking import SHARED_IDS, link
from stepsim.calibration.representative import (assemble, captured_window, middle_steps,
                                                window_steps, without_closing_wait)
from stepsim.calibration.step_fallback import no_step_error
from stepsim.calibration.step_fits import fit_steps
from stepsim.calibration.steps import Step, find_steps
from stepsim.calibration.trace_context import TraceContext
from stepsim.calibration.trace_io import rank_of
from stepsim.calibration.truncated import usable_steps
from stepsim.models.params import DeviceTask, HostOp, LoaderParams, ReplayWindow
from stepsim.models.warning_record import retexted
from stepsim.simcore.errors import InputError

__all__ = ["RankFit", "fit_rank"]


@dataclass
class RankFit:
    """What one trace yields before the ranks are combined (internal, but documented).

    Attributes:
        path: the trace file. rank: its rank. world_size: from ``distributedInfo`` (1 if none).
        ops: the host ops of the representative step. streams: stream → tasks.
        measured_us: measured step times (µs) of the complete steps; steps_used: their numbers.
        rep: the representative step.
        collectives: per collective task in stream order, (task id, match key, start_ns,
            end_ns) in the trace's absolute clock (ns since the epoch).
        notes, sources, warnings: for ``Meta``.
        loader: the LoaderParams.
        replay: the captured window (per-step values are on ``ops`` and ``streams``).
        peak_pending: the most launches the trace shows pending at a launch.
    """

    path: Path
    rank: int
    world_size: int
    ops: list[HostOp]
    streams: dict[str, list[DeviceTask]]
    measured_us: list[float]
    steps_used: list[int]
    rep: Step
    collectives: list[tuple[str, str, int, int]]
    notes: dict
    sources: dict
    warnings: list[str]
    loader: LoaderParams
    complete_steps: int = 0
    base_ns: int = 0
    step_us_by_number: dict = field(default_factory=dict)
    rank_from: str = "none"
    replay: ReplayWindow | None = None
    peak_pending: int = 0

    # A fit comes back from its worker (calibration.rank_pool) pickled; the host ops and device
    # tasks (about 200 kB, 2.8 ms to unpickle, of a DLRM rank) travel as one packed blob, opened
    # on first use: the model takes them from one rank (calibration.rank_combine), so the other
    # ranks' are never opened (a 256-rank folder: about 0.7 s of the parent's CPU)
    _PACKED = ("ops", "streams")

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if "_packed" not in state:
            state["_packed"] = pickle.dumps(tuple(state[k] for k in self._PACKED),
                                            protocol=pickle.HIGHEST_PROTOCOL)
        for k in self._PACKED:
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str):
        packed = self.__dict__.get("_packed")   # only for a missing attribute
        if name not in self._PACKED or packed is None:
            raise AttributeError(name)
        self.__dict__.update(zip(self._PACKED, pickle.loads(packed)))
        del self.__dict__["_packed"]
        return self.__dict__[name]

    @property
    def median_us(self) -> float:
        """The median of ``measured_us`` (µs)."""
        return float(np.median(self.measured_us))


def fit_rank(table: EventTable, step_regex: str | None = None,
             warnings: list[str] | None = None) -> RankFit:
    """Fit the host ops and device tasks of one trace's representative step.

    The representative step is the median step. With an even number of complete steps the
    median lies between the two middle steps, which no single step reproduces: then both are
    fitted and, if they have the same structure (the same launches, syncs and next() calls in
    the same order, the same tasks per stream), every duration is their mean.

    Raises:
        InputError: no step marker, or no complete step (every step lost GPU activity).
    """
    path = table.path or Path("<trace>")
    warnings = list(warnings or [])
    steps = find_steps(table, step_regex=step_regex)
    warnings += [f"{path.name}: {w}" for w in steps.warnings]
    if not steps:
        raise no_step_error(path, steps.warnings)
    links = link(table)
    warnings += [f"{path.name}: {w}" for w in links.warnings
                 if "'External id'" in w or SHARED_IDS in w]
    if len(links.gpu_rows) and not (links.launch_row >= 0).any():
        raise InputError(path, f"none of the {len(links.gpu_rows)} GPU activities links to a "
                         "launch call (no correlation id, flow or External id matches one; a "
                         "pre-Kineto autograd-profiler trace records no launch calls): the GPU "
                         "work cannot be placed in the steps; record with torch.profiler"
                         + dropped_note(table))
    kept, cw = usable_steps(table, links, steps)
    warnings += [f"{path.name}: {w}" for w in cw]
    if not kept:
        raise InputError(path, f"no complete step: all {len(steps)} step(s) lack GPU activity "
                         "for some launches (" + (graph_refusal(table, links.by_launch) or
                                                  "a sampled or truncated trace?") + ")"
                         + dropped_note(table))
    measured = [s.dur_us for s in kept]
    med = float(np.median(measured))
    cands = [s for s in kept if not s.last] or kept
    middle = middle_steps(kept)
    rep = min([s for s in middle if not s.last] or cands,
              key=lambda s: (abs(s.dur_us - med), s.start_ns))
    ctx = TraceContext(table, links)
    warnings += [f"{path.name}: {w}" for w in _unlaunched_warnings(ctx)]
    ctx.steps = list(steps)
    others = [s for s in middle if s is not rep and not s.last]
    # the window's other complete steps fitted with them (in two processes where they are large)
    numbers = {rep.number} | {s.number for s in others}
    complete = {s.number for s in kept}
    ahead = [s for s in window_steps(steps, kept) if s.number in complete
             and s.number not in numbers]
    fit, *fits = fit_steps(ctx, [rep, *others], ahead)
    group = [fit] + [f for f in fits[:len(others)] if f.signature() == fit.signature()]
    # a last step closes with a wait for its GPU work: compared and assembled without it
    closes = bool(fit.ops) and fit.ops[-1].name == END_OF_STEP_SYNC
    group = [without_closing_wait(g) for g in group]
    made = {id(s): without_closing_wait(f) for s, f in zip(ahead, fits[len(others):])}
    window, wfits = captured_window(ctx, steps, kept, {g.step.number: g for g in group}, group[0],
                                    made)
    ops, streams, next_us = assemble(group, wfits)
    if closes:
        ops.append(HostOp(kind="sync", name=END_OF_STEP_SYNC, replay_us=[0.0] * len(window)))
    backlog = backlog_rows(ctx, window[0].start_ns, window[0].end_ns)
    replay = ReplayWindow(steps=[s.number for s in window],
                          calibrated=[f is not None for f in wfits],
                          measured_step_us=[s.dur_us for s in window],
                          stream_busy_us=backlog_us(ctx, window[0], streams, backlog),
                          last_gpu_inclusive=window[-1].last)
    n_own = sum(replay.calibrated)
    if n_own < len(window):
        warnings.append(f"{path.name}: {len(window) - n_own} of the {len(window)} steps of the "
                        "captured window replay the representative step's durations (their GPU "
                        "work was incomplete or their structure differs)")
    warnings += [retexted(w, f"{path.name}: {w}", f"{path.name}: ") for w in fit.warnings]
    waits = [x for f in wfits if f is not None for x in f.next_us]
    notes, sources, loader, w2 = fit_notes(ctx, kept, fit, group, waits or next_us)
    warnings += [retexted(w, f"{path.name}: {w}", f"{path.name}: ") for w in w2]
    peak = peak_pending(ctx, window[0], window[-1], backlog)
    notes["launch_queue_peak_pending"] = peak
    notes["step_method"] = steps.method
    if ctx.unlaunched_comm or ctx.comm_before_first_launch:
        notes["comm_kernels_unlaunched"] = len(ctx.unlaunched_comm)
        notes["comm_kernels_before_first_launch"] = ctx.comm_before_first_launch
    rank, world, rank_from = (rank_of(table._raw, warnings) if table._raw is not None
                              else (None, 1, "none"))
    return RankFit(path=path, rank=-1 if rank is None else rank, world_size=world, ops=ops,
                   streams=streams, measured_us=measured, steps_used=[s.number for s in kept],
                   rep=rep, collectives=fit.colls, notes=notes, sources=sources,
                   warnings=warnings, loader=loader, complete_steps=len(kept),
                   base_ns=table.base_ns, step_us_by_number={s.number: s.dur_us for s in kept},
                   rank_from=rank_from, replay=replay, peak_pending=peak)


def _unlaunched_warnings(ctx: TraceContext) -> list[str]:
    """What the fit did with the communication kernels no recorded call launched
    (:func:`calibration.trace_context.unlaunched_comm`)."""
    out = []
    if ctx.unlaunched_comm:
        out.append(f"{len(ctx.unlaunched_comm)} communication kernel(s) have no launching call "
                   "in the trace (a thread the profiler did not record?): modelled as device "
                   "tasks of the step they ran in, without a host launch, each after the "
                   "activity on another stream that ended last before it")
    if ctx.comm_before_first_launch:
        out.append(f"{ctx.comm_before_first_launch} communication kernel(s) were launched before "
                   "the trace's first recorded launch call (no launching call, a lower "
                   "correlation id, ahead of their stream's first recorded launch): work queued "
                   "before the recorded launches, not a step's own work")
    return out
