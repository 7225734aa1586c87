"""Step segmentation of a normalised event table.

**Step time, defined once.** A step runs from its start marker's start on the host thread to
the next step's start (``start_ns`` → ``end_ns``). The last step has no next start: it ends at
the later of its marker's CPU end and the end of the last GPU activity launched from inside it
(runtime/driver calls of the same process in the step window, linked by ``correlation``),
stray work left out; work after the last step belongs to no step and is reported
(:mod:`calibration.stray`). A
window replay of the calibrated model measures step time the same way
(``models.simulate.simulate(..., replay=True)``).

Markers, in order of preference:

1. a user-given regular expression (``step_regex``; matched with ``re.search`` against CPU-side
   complete events) — a warning names it;
2. ``ProfilerStep#N`` on the CPU side (category ``cpu_op`` or ``user_annotation``, never the
   ``gpu_user_annotation`` copy that newer Kineto writes on the GPU stream); ``N`` is the step
   number and need not start at 0;
3. a repeating DataLoader marker ``enumerate(DataLoader)#…__next__`` (one per iteration), with a
   warning;
4. a repeating optimizer marker ``Optimizer.step#…`` / ``Optimizer.zero_grad#…``, with a
   warning;
5. a repeating top-level annotation of the main thread (``## forward ##``,
   ``DistributedDataParallel.forward``, a ``record_function`` that occurs N times; see
   :mod:`calibration.step_fallback`), with a warning;
6. none of these: the whole capture is one step (``method`` ``"whole_capture"``, named
   :data:`~calibration.step_fallback.WHOLE_CAPTURE`), from the main thread's first host op to
   its last, closed as a last step; a warning says so and how to record steps next time. The
   result is empty (with a warning) only when the trace has no host op at all.

A repeating marker must occur at least twice, else it is not used. Steps from markers 1, 3, 4
and 5 are numbered 0, 1, … in time order, and so are ``ProfilerStep`` steps whose numbers do
not increase in time order (a warning says so: every later stage takes step numbers to follow
time). ``ProfilerStep`` *spans*
its step (the profiler's record function runs from one ``step()`` to the next); another marker
does when its median duration is at least half the median spacing of the markers; a short
marker (``__next__``) only opens a step, so its last occurrence opens none. Each optimizer
marker makes one step, shifted to start where the capture's first step does (see
:func:`_optimizer_bounds`).

Broken markers are dropped with a warning that names their events: an exact duplicate (same
name, start and end) is ignored; a marker that shares its start time with another one, and a
spanning marker of zero length, are dropped (both would give a step of no length). Dropping a step does not stretch its neighbours. Every step returned has
``dur_ns > 0``; if none is left the result is empty, with a warning.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from stepsim.calibration.events import EventTable, name_mask
from stepsim.calibration.stray import after_last_step, last_step_end
from stepsim.calibration.step_fallback import (HOW_TO_RECORD_STEPS, WHOLE_CAPTURE,
                                               repeated_annotation, whole_capture_bounds)

__all__ = ["Step", "StepList", "find_steps", "PROFILER_STEP_RE", "DATALOADER_RE", "OPTIMIZER_RE"]

PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d{1,18})$")
"""``N`` fits in 64 bits: a longer "number" is not a step marker."""
_BAD_PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(?!\d{1,18}$)")
"""A ``ProfilerStep#`` marker whose number is not one (``#abc``, ``#-1``, ``#1.5``): it cannot
be right (the profiler writes ``ProfilerStep#N``), so it is dropped and counted."""
DATALOADER_RE = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
OPTIMIZER_RE = re.compile(r"^Optimizer\.(step|zero_grad)#")
_CPU_CATS = ("cpu_op", "user_annotation")


@dataclass(frozen=True)
class Step:
    """One training step on the host thread. Instants are ns relative to the table's start.

    Attributes:
        number: ``N`` of ``ProfilerStep#N``, else the ordinal of the marker.
        start_ns: the marker's start.
        end_ns: the next step's start; for the last step see the module docstring.
        cpu_end_ns: the marker event's own end.
        pid, tid: the host thread that carries the marker.
        name: the marker's event name.
        last: True for the last step (its end is not a next start).
        row: the marker's row in the table.
    """

    number: int
    start_ns: int
    end_ns: int
    cpu_end_ns: int
    pid: int
    tid: int
    name: str
    last: bool = False
    row: int = -1

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def dur_us(self) -> float:
        return self.dur_ns / 1000.0


class StepList(list):
    """A list of :class:`Step` in time order, with ``warnings`` (list of str) and ``method``
    (``"profiler_step"``, ``"regex"``, ``"dataloader"``, ``"optimizer"``, ``"annotation"``,
    ``"whole_capture"`` or ``"none"``)."""

    def __init__(self, steps=(), warnings=None, method="none"):
        super().__init__(steps)
        self.warnings: list[str] = list(warnings or [])
        self.method = method


def _last_end(table: EventTable, warnings: list[str], number, pid: int, start_ns: int,
              cpu_end_ns: int) -> int:
    """A last step's end (:func:`calibration.stray.last_step_end`), stray work named in
    ``warnings``."""
    end, n_stray, full = last_step_end(table, pid, start_ns, cpu_end_ns)
    if n_stray:
        warnings.append(f"{n_stray} GPU activit{'y' if n_stray == 1 else 'ies'} launched in the "
                        f"last step ({number}) started only after the device idled past the "
                        f"step's other work (longer than during its host part): stray, not "
                        f"folded into the step ({(end - start_ns) / 1e6:.2f} ms; "
                        f"{(full - start_ns) / 1e6:.2f} ms with them)")
    return end


def _whole_capture(table: EventTable, warnings: list[str]) -> StepList:
    """Tier 6 of the module docstring: the whole capture as one step."""
    what = "no step marker (no ProfilerStep#N, no repeating DataLoader, optimizer or top-level " \
           "annotation)"
    b = whole_capture_bounds(table)
    if b is not None and not ((table.is_cat(*_CPU_CATS) & (table.ph == "X")).any()
                              or table.gpu_mask().any()):
        warnings.append(f"{what}, and the capture holds no CPU op and no GPU activity (only "
                        "runtime calls): no work to take as a step (record the training "
                        "iterations with ProfilerActivity.CPU and CUDA)")
        return StepList([], warnings, "none")
    if b is None:
        warnings.append(f"{what}, and no host op to take the capture as one step (record the CPU "
                        "side too: ProfilerActivity.CPU)")
        return StepList([], warnings, "none")
    pid, tid, a, cpu_end, row = b
    end = _last_end(table, warnings, "the whole capture", pid, a, cpu_end)
    if end <= a:
        warnings.append(f"{what}, and the capture's host ops take no time: no step of positive "
                        "length")
        return StepList([], warnings, "none")
    warnings.append(f"{what}: the step was taken to be the whole capture ({(end - a) / 1e6:.2f} ms, "
                    f"pid {pid} tid {tid} from its first host op to its last, with the GPU work "
                    f"it launched); {HOW_TO_RECORD_STEPS}")
    step = Step(number=0, start_ns=a, end_ns=end, cpu_end_ns=cpu_end, pid=pid, tid=tid,
                name=WHOLE_CAPTURE, last=True, row=row)
    return StepList([step], warnings + after_last_step(table, step), "whole_capture")


def _markers(table: EventTable, rx: re.Pattern, cpu_side: np.ndarray) -> np.ndarray:
    return np.nonzero(name_mask(table.names, rx) & cpu_side)[0]


def _warn_rows(warnings: list[str], table: EventTable, rows: np.ndarray, what: str) -> None:
    """Append ``what`` (with ``{}`` for the count) and the first file event indices of
    ``rows``, if any."""
    idx = table.index[rows].tolist()
    if idx:
        more = ", …" if len(idx) > 5 else ""
        warnings.append(f"{what.format(len(idx))} (events {', '.join(map(str, idx[:5]))}{more})")


def _optimizer_bounds(table: EventTable, rows: np.ndarray, starts: np.ndarray,
                      ends: np.ndarray, spans: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """(starts, ends, spans) of the steps of optimizer markers (ns). A capture without
    ``ProfilerStep`` begins with its first step: the thread's first CPU-side event starts step
    0, and every marker lies as far into its step as the first does, so step ``k`` starts that
    far before marker ``k``; the last ends with the thread's last CPU-side or runtime event. One step per
    marker. When the thread's first event lies more than a marker spacing before the first
    marker (set-up before the loop), the markers alone bound the steps (``spans`` as given)."""
    th = table.is_cat(*_CPU_CATS, "cuda_runtime", "cuda_driver") & (table.ph == "X") & \
        (table.pid == table.pid[rows[0]]) & (table.tid == table.tid[rows[0]])
    head = int(starts[0]) - int(table.ts_ns[th].min())
    if len(rows) < 2 or head > np.diff(starts).min():
        return starts, ends, spans
    starts = starts - head
    return starts, np.r_[starts[1:], max(int(table.end_ns[th].max()), int(ends[-1]))], True


OVERLAP_NS = 1000
"""How far (ns) a ``ProfilerStep`` may start before the one before it on its thread ends:
clock rounding (the shared traces' steps never overlap: their closest pair is 17 µs apart,
measured 2026-12-05 over 23 step threads); a larger overlap cannot be right."""


def _drop_overlaps(table: EventTable, rows: np.ndarray, numbers: list[int] | None,
                   warnings: list[str]) -> tuple[np.ndarray, list[int] | None]:
    """``rows`` (time order) without each ``ProfilerStep`` marker that starts more than
    :data:`OVERLAP_NS` before the last kept one ends (the later one dropped, counted in a
    warning); the first is always kept. A marker that shares its start time with another or
    is of zero length is left to :func:`find_steps`' own rules for broken markers (it drops
    them all, where this rule would keep the first of a tie) and bounds nothing here."""
    ts, te = table.ts_ns[rows], table.end_ns[rows]
    starts, ends = ts.tolist(), te.tolist()
    broken = (np.isin(ts, ts[:-1][np.diff(ts) == 0]) | (ts == te)).tolist()
    keep = np.ones(len(rows), dtype=bool)
    end = None
    for k in range(len(rows)):
        if broken[k]:
            continue
        if end is not None and starts[k] < end - OVERLAP_NS:
            keep[k] = False
        else:
            end = ends[k]
    if keep.all():
        return rows, numbers
    _warn_rows(warnings, table, rows[~keep], "dropped {} ProfilerStep marker(s) that start more "
               f"than {OVERLAP_NS / 1000:g} µs before the step before them ends (overlapping "
               "steps on one thread cannot be right)")
    return rows[keep], None if numbers is None else [n for n, k in zip(numbers, keep) if k]


def _numbers_text(numbers: list[int]) -> str:
    """The first few step numbers, in time order, as text."""
    more = ", …" if len(numbers) > 6 else ""
    return ", ".join(map(str, numbers[:6])) + more


def compile_step_regex(text: str, name: str = "--step-regex") -> re.Pattern:
    """``text`` compiled. Raises ValueError naming ``name`` where it is no regular expression:
    :mod:`re` raises OverflowError for a repeat past 2**32 - 1 (``x{99999999999}``) and
    RecursionError for about 1,000 nested groups, both a traceback before."""
    try:
        return re.compile(text)
    except (re.error, OverflowError, RecursionError) as e:
        why = str(e) if not isinstance(e, RecursionError) else "groups nested too deep"
        raise ValueError(f"{name} {text!r:.200} is not a valid regular expression: {why}") from None


def find_steps(table: EventTable, step_regex: str | None = None) -> StepList:
    """Segment ``table`` into steps (see the module docstring for the rules).

    Args:
        table: the normalised events of one trace.
        step_regex: optional regular expression naming the step marker event.

    Returns:
        a :class:`StepList` (possibly empty, then with a warning saying why).

    Raises:
        ValueError: ``step_regex`` is not a valid regular expression.
    """
    cpu_side = table.is_cat(*_CPU_CATS) & (table.ph == "X")
    warnings: list[str] = []
    rows = np.zeros(0, dtype=np.int64)
    method = "none"
    numbers = None
    if step_regex:
        rx = compile_step_regex(step_regex, "step_regex")
        rows = _markers(table, rx, cpu_side)
        method = "regex"
        if len(rows) == 0:
            warnings.append(f"step regex {step_regex!r} matched no CPU-side event")
        else:
            warnings.append(f"steps taken from the user's regex {step_regex!r} ({len(rows)} markers)")
    if len(rows) == 0:
        rows = _markers(table, PROFILER_STEP_RE, cpu_side)
        bad = _markers(table, _BAD_PROFILER_STEP_RE, cpu_side)
        if len(bad):
            _warn_rows(warnings, table, bad, "dropped {} ProfilerStep marker(s) whose step "
                       f"number is not a whole number (first: {table.names[bad[0]]!r:.60})")
        if len(rows):
            method = "profiler_step"
            numbers = [int(PROFILER_STEP_RE.match(table.names[r]).group(1)) for r in rows]
    if len(rows) == 0:
        for rx, label, what in ((DATALOADER_RE, "dataloader", "DataLoader __next__"),
                                (OPTIMIZER_RE, "optimizer", "optimizer")):
            r = _markers(table, rx, cpu_side)
            if len(r) and rx is OPTIMIZER_RE:
                # one kind of optimizer marker only (step, or zero_grad if no step)
                kinds = [OPTIMIZER_RE.match(table.names[i]).group(1) for i in r]
                keep = "step" if "step" in kinds else "zero_grad"
                r = r[np.array([k == keep for k in kinds])]
            if len(r) >= 2:
                rows, method = r, label
                how = ("a step runs from one marker to the next" if label == "dataloader" else
                       "one step per marker, each starting as far before its marker as the "
                       "capture's start lies before the first")
                warnings.append(f"no ProfilerStep#N marker: steps taken from the repeating "
                                f"{what} marker {table.names[r[0]]!r} ({len(r)} occurrences); "
                                f"{how}")
                break
    if len(rows) == 0:
        r, name = repeated_annotation(table)
        if len(r):
            rows, method = r, "annotation"
            warnings.append(f"no ProfilerStep#N, DataLoader or optimizer marker: steps taken from "
                            f"the repeating top-level annotation {name!r} ({len(r)} "
                            f"occurrences; a step runs from one to the next; a step regex "
                            f"chooses another); {HOW_TO_RECORD_STEPS}")
    if len(rows) == 0:
        return _whole_capture(table, warnings)
    # keep the thread that carries most markers
    keys = list(zip(table.pid[rows].tolist(), table.tid[rows].tolist()))
    if len(set(keys)) > 1:
        best = max(set(keys), key=keys.count)
        dropped = sum(1 for k in keys if k != best)
        warnings.append(f"step markers on several threads; using pid {best[0]} tid {best[1]}, "
                        f"ignoring {dropped} marker(s) elsewhere")
        sel = np.array([k == best for k in keys])
        rows = rows[sel]
        if numbers is not None:
            numbers = [n for n, s in zip(numbers, sel) if s]
    order = np.argsort(table.ts_ns[rows], kind="stable")
    rows = rows[order]
    if numbers is not None:
        numbers = [numbers[i] for i in order]
    seen: set = set()
    dup = np.zeros(len(rows), dtype=bool)
    for i, marker in enumerate(zip(table.ts_ns[rows].tolist(), table.end_ns[rows].tolist(),
                                   table.names[rows])):
        dup[i] = marker in seen
        seen.add(marker)
    if dup.any():
        _warn_rows(warnings, table, rows[dup], "ignored {} duplicate step marker(s) (same "
                                               "name, start and end as another)")
        rows = rows[~dup]
        if numbers is not None:
            numbers = [n for n, d in zip(numbers, dup) if not d]
    if numbers is not None and any(b <= a for a, b in zip(numbers, numbers[1:])):
        warnings.append(f"ProfilerStep numbers are not increasing in time order "
                        f"({_numbers_text(numbers)}); steps numbered 0, 1, … by time instead")
        numbers = None
    gaps = [n for a, b in zip(numbers or [], (numbers or [])[1:]) for n in range(a + 1, b)]
    if gaps:
        warnings.append(f"{len(gaps)} ProfilerStep marker(s) missing inside the capture (step "
                        f"{_numbers_text(gaps)}): the step before each gap runs to the next "
                        "marker, so it holds the missing step(s) too")
    if method == "profiler_step" and len(rows) > 1:
        rows, numbers = _drop_overlaps(table, rows, numbers, warnings)
    if numbers is None:
        numbers = list(range(len(rows)))
    starts = table.ts_ns[rows]
    ends = table.end_ns[rows]
    # ProfilerStep always covers its step; other markers do when they are long
    spans = method == "profiler_step" or len(rows) < 2 or bool(
        np.median(ends[:-1] - starts[:-1]) >= 0.5 * np.median(np.diff(starts)))
    if method == "optimizer":
        starts, ends, spans = _optimizer_bounds(table, rows, starts, ends, spans)
    n_steps = len(rows) if spans else len(rows) - 1
    out = []
    for k, r in enumerate(rows[:n_steps]):
        last = k == len(rows) - 1
        if not last:
            end = int(starts[k + 1])
        else:
            end = _last_end(table, warnings, int(numbers[k]), int(table.pid[r]), int(starts[k]),
                            int(ends[k]))
        out.append(Step(number=int(numbers[k]), start_ns=int(starts[k]), end_ns=end,
                        cpu_end_ns=int(ends[k]), pid=int(table.pid[r]), tid=int(table.tid[r]),
                        name=str(table.names[r]), last=last, row=int(r)))
    # broken markers give steps of no length; dropping one leaves its neighbours' bounds alone
    same = np.diff(starts) == 0
    tie = np.r_[False, same] | np.r_[same, False]
    bad_by = {"shares its start time with another marker": tie[:n_steps],
              "is of zero length": (ends[:n_steps] == starts[:n_steps]) & spans}
    drop = np.zeros(n_steps, dtype=bool)
    for what, bad in bad_by.items():
        _warn_rows(warnings, table, rows[:n_steps][bad & ~drop],
                   "dropped {} step(s) whose marker " + what)
        drop |= bad
    out = [s for s, d in zip(out, drop) if not d]
    if not out:
        warnings.append("no step of positive length remains")
        return StepList([], warnings, "none")
    warnings += after_last_step(table, out[-1])
    if table.step_range is not None:     # calibrate --steps A:B (calibration.stream)
        a, b = table.step_range
        out = [s for s in out if (a is None or s.number >= a) and (b is None or s.number < b)]
        if not out:
            warnings.append(f"no step numbered {'' if a is None else a}:{'' if b is None else b}"
                            " (--steps)")
            return StepList([], warnings, "none")
    return StepList(out, warnings, method)
