"""The representative step and the captured window, assembled from step fits.

**Representative step.** The measured step times are those of the complete steps (start to
next start, µs; see :mod:`calibration.steps`). The representative step is the median one: the
middle step by time, or, with an even number of steps, the two middle steps, fitted alike and
combined duration by duration (mean of the two) when they have the same structure
(:func:`middle_steps`, :func:`assemble`). Host ops and device tasks come from it, so replaying
the model repeats the median step. A last step (no next start) is used only if no other step
exists: its host part ends with its marker and is followed by a device-wide ``sync`` (the step
ends when its GPU work does). The captured window (:func:`captured_window`) keeps every step's
own values beside the median's (``replay_us``).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from stepsim.calibration.host_ops import END_OF_STEP_SYNC
from stepsim.calibration.step_fit import StepFit, fit_step
from stepsim.calibration.steps import Step
from stepsim.calibration.trace_context import TraceContext
from stepsim.models.params import DeviceTask, HostOp

__all__ = ["middle_steps", "host_slots", "captured_window", "window_steps",
           "without_closing_wait", "assemble", "REPLAY_MAX_STEPS"]

REPLAY_MAX_STEPS = 200
"""Most steps of a trace kept as the captured window (``StepModel.replay``)."""


def middle_steps(kept: list[Step]) -> list[Step]:
    """The step(s) whose time is the median: the middle one, or the two middle ones."""
    order = sorted(kept, key=lambda s: (s.dur_us, s.start_ns))
    n = len(order)
    return [order[n // 2]] if n % 2 else [order[n // 2 - 1], order[n // 2]]


def host_slots(ops: list) -> tuple[list[float], list[str], list]:
    """Split a host sequence into the non-cpu ops and the cpu time before each (plus after the
    last): ``cpu[i]`` precedes ``other[i]``; ``cpu[-1]`` ends the step; ``phase[i]`` is the
    phase of the first cpu op in slot ``i``."""
    cpu, phase, other, acc, ph = [], [], [], 0.0, None
    for op in ops:
        if op.kind == "cpu":
            acc += op.dur_us
            ph = ph or op.phase
        else:
            cpu.append(acc)
            phase.append(ph or "other")
            other.append(op)
            acc, ph = 0.0, None
    cpu.append(acc)
    phase.append(ph or "other")
    return cpu, phase, other


def captured_window(ctx: TraceContext, steps: list[Step], kept: list[Step],
                    fitted: dict[int, StepFit],
                    rep: StepFit, made: dict[int, StepFit] | None = None
                    ) -> tuple[list[Step], list[StepFit | None]]:
    """The captured window: every step from the first complete step with the
    representative's structure to the last complete step (at most ``REPLAY_MAX_STEPS``),
    each with its own fit (without a closing wait) when it is complete and has that
    structure, else None. (A leading step without its own fit, such as a warm-up step, would
    replay the representative's durations and hand the next step a backlog the trace never
    had.) ``fitted``: fits already made (without a closing wait), by step number; ``made``:
    other steps' fits made ahead (without a closing wait), by ``id()`` of the step."""
    window = window_steps(steps, kept)
    complete = {s.number for s in kept}
    sig = rep.signature()
    out: list[StepFit | None] = []
    for s in window:
        f = None
        if s.number in complete:
            f = (fitted.get(s.number) or (made or {}).get(id(s))
                 or without_closing_wait(fit_step(ctx, s)))
            if f.signature() != sig:
                f = None
        out.append(f)
    i0 = next((i for i, f in enumerate(out) if f is not None), 0)
    return window[i0:], out[i0:]


def window_steps(steps: list[Step], kept: list[Step]) -> list[Step]:
    """The steps a captured window may hold: from the first complete step (of ``kept``) to the
    last, at most :data:`REPLAY_MAX_STEPS` (:func:`captured_window` fits the complete ones)."""
    first, last = kept[0].number, kept[-1].number
    return [s for s in steps if first <= s.number <= last][:REPLAY_MAX_STEPS]


def without_closing_wait(f: StepFit) -> StepFit:
    """``f`` without the wait for its GPU work that closes a trace's last step."""
    if f.ops and f.ops[-1].name == END_OF_STEP_SYNC:
        return replace(f, ops=f.ops[:-1])
    return f


def _median(values: list[float]) -> float:
    """``np.median`` of ``values``, without its overhead for the one or two values of a
    representative group (called once per op and task)."""
    if len(values) == 1:
        return float(values[0])
    if len(values) == 2:
        return float((np.float64(values[0]) + np.float64(values[1])) / 2)
    return float(np.median(values))


def assemble(group: list[StepFit], window: list[StepFit | None]):
    """The representative structure (``group[0]``'s) with every duration the median over
    ``group`` and, per op and task, its value in each step of ``window`` (``replay_us``,
    ``replay_gap_us``; a step without a fit takes the median). Returns (host ops, streams,
    per ``next_batch`` op the median ``next()`` time in µs)."""
    base = group[0]
    slots = [host_slots(g.ops) for g in group]
    wslots = [None if f is None else host_slots(f.ops) for f in window]

    def both(values_of):
        """(median over the group, per window step value) of ``values_of(fit, its slots)``."""
        med = _median([values_of(g, sl) for g, sl in zip(group, slots)])
        per = [med if f is None else float(values_of(f, fs)) for f, fs in zip(window, wslots)]
        return med, per

    ops: list[HostOp] = []
    n_next = 0
    for i, op in enumerate(slots[0][2] + [None]):
        c, per = both(lambda g, sl: sl[0][i])
        if c > 0 or max(per) > 0:
            ops.append(HostOp(kind="cpu", name="cpu", dur_us=c, phase=slots[0][1][i],
                              replay_us=per))
        if op is None:
            continue
        if op.kind == "next_batch":
            j = n_next
            n_next += 1
            _, per = both(lambda g, sl: g.next_us[j])
            d, _ = both(lambda g, sl: sl[2][i].dur_us)
        else:
            d, per = both(lambda g, sl: sl[2][i].dur_us)
        ops.append(HostOp(kind=op.kind, name=op.name, dur_us=d, task=op.task,
                          category=op.category, phase=op.phase, replay_us=per))
    streams = {}
    ids = {t.id for ts in base.streams.values() for t in ts}
    for s, ts in base.streams.items():
        out = []
        for t in ts:
            d, per = both(lambda g, sl: g.kernel_us[t.id])
            gap, gper = both(lambda g, sl: g.idle_us[t.id])
            out.append(DeviceTask(**{
                **t._asdict(), "dur_us": d, "gap_us": gap, "replay_us": per,
                "replay_gap_us": gper, "waits": list(t.waits),
                # a wait on the previous step's work that this step's structure lacks is dropped
                "prev_waits": [w for w in t.prev_waits if w in ids]}))
        streams[s] = out
    nx = [_median([g.next_us[i] for g in group]) for i in range(len(base.next_us))]
    return ops, streams, nx
