"""Steps of a trace without a step marker (see :mod:`calibration.steps`, tiers 5 and 6).

A trace recorded with ``torch.profiler.profile()`` around a few iterations, without a
``schedule`` and ``prof.step()``, has no ``ProfilerStep#N``, and often no DataLoader or
optimizer marker either (an inference loop, a hand-written training loop). Two fallbacks, in
order:

* **a repeating top-level annotation**: a ``record_function`` (category ``user_annotation``:
  ``## forward ##``, ``DistributedDataParallel.forward``, a user's own) that is not nested in
  another CPU op on the main thread and occurs at least twice. When several names repeat, the
  one whose count is the count most of them share (the iteration count: ``## forward ##``,
  ``## backward ##`` and ``## optimizer ##`` each occur once per iteration) and that comes
  first is taken; a step runs from one occurrence to the next. Communication annotations
  (``nccl:*``, ``gloo:*``) are never steps.
* **the whole capture**: one step from the first to the last host op of the main thread (the
  thread that issues the most GPU launches; in a host-only trace the one with the most CPU-op
  time), closed as a last step is (its GPU work included). A warning says so and how to record
  steps next time (:data:`HOW_TO_RECORD_STEPS`).

The same warnings and the same refusal (:func:`no_step_error`) serve GPU and CPU traces.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.simcore.errors import InputError

__all__ = ["WHOLE_CAPTURE", "HOW_TO_RECORD_STEPS", "repeated_annotation", "main_thread",
           "whole_capture_bounds", "no_step_error"]

WHOLE_CAPTURE = "(whole capture)"
"""The name of the one step a trace without any step marker is taken to be."""
HOW_TO_RECORD_STEPS = (
    "to record steps next time, profile with a schedule and call prof.step() once per "
    "iteration (torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, "
    "active=5), ...) and prof.step() at the end of each iteration), or record with the capture "
    "harness (stepsim.calibration.capture.Capture)")
_NOT_STEPS = ("nccl:", "gloo:", "mpi:", "ucc:", "record_param_comms", "ProfilerStep#")
_CPU_CATS = ("cpu_op", "user_annotation")
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def main_thread(table: EventTable) -> tuple[int, int] | None:
    """(pid, tid) of the thread that issues the most runtime/driver calls, else of the one
    with the most CPU-op time; None when the trace has no host event."""
    api = table.is_cat(*_LAUNCH_CATS) & (table.ph == "X")
    if api.any():
        keys = Counter(zip(table.pid[api].tolist(), table.tid[api].tolist()))
        return max(keys, key=lambda k: (keys[k], -k[0], -k[1]))
    cpu = table.is_cat(*_CPU_CATS) & (table.ph == "X")
    if not cpu.any():
        return None
    busy: dict[tuple[int, int], int] = {}
    for p, t, d in zip(table.pid[cpu].tolist(), table.tid[cpu].tolist(), table.dur_ns[cpu].tolist()):
        busy[(p, t)] = busy.get((p, t), 0) + d
    return max(busy, key=lambda k: (busy[k], -k[0], -k[1]))


def _top_level(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """The rows (of one thread, CPU-side complete events) not nested in another of them."""
    o = rows[np.lexsort((-table.end_ns[rows], table.ts_ns[rows]))]
    keep, reach = [], -1
    for r, a, e in zip(o.tolist(), table.ts_ns[o].tolist(), table.end_ns[o].tolist()):
        if a >= reach:
            keep.append(r)
        reach = max(reach, e)
    return np.array(sorted(keep), dtype=np.int64)


def repeated_annotation(table: EventTable) -> tuple[np.ndarray, str | None]:
    """Rows of the repeating top-level annotation on the main thread (see the module
    docstring), and its name; empty and None when there is none."""
    none = np.zeros(0, dtype=np.int64), None
    main = main_thread(table)
    if main is None:
        return none
    cpu = np.nonzero(table.is_cat(*_CPU_CATS) & (table.ph == "X") & (table.pid == main[0]) &
                     (table.tid == main[1]))[0]
    if not len(cpu):
        return none
    top = _top_level(table, cpu)
    ann = [r for r in top.tolist() if table.cat[r] == "user_annotation"
           and not str(table.names[r]).startswith(_NOT_STEPS) and table.names[r]]
    counts = Counter(str(table.names[r]) for r in ann)
    reps = {n: c for n, c in counts.items() if c >= 2}
    if not reps:
        return none
    usual = Counter(reps.values()).most_common()
    best_count = max(usual, key=lambda kv: (kv[1], kv[0]))[0]
    first = {}
    for r in ann:
        first.setdefault(str(table.names[r]), int(table.ts_ns[r]))
    name = min((n for n, c in reps.items() if c == best_count), key=lambda n: (first[n], n))
    return np.array([r for r in ann if table.names[r] == name], dtype=np.int64), name


def whole_capture_bounds(table: EventTable) -> tuple[int, int, int, int, int] | None:
    """(pid, tid, first host op's start, last host op's end, its first row) of the main
    thread, in ns; None when the trace has no host event."""
    main = main_thread(table)
    if main is None:
        return None
    m = (table.is_cat(*_CPU_CATS, *_LAUNCH_CATS) & (table.ph == "X") &
         (table.pid == main[0]) & (table.tid == main[1]))
    rows = np.nonzero(m)[0]
    if not len(rows):
        return None
    first = rows[np.argmin(table.ts_ns[rows])]
    return (main[0], main[1], int(table.ts_ns[first]), int(table.end_ns[rows].max()), int(first))


def no_step_error(path: Path | str | None, warnings: list[str]) -> InputError:
    """The one refusal of a trace no step can be taken from (GPU and CPU alike)."""
    return InputError(path or "<trace>", "no training step found: " + "; ".join(warnings))
