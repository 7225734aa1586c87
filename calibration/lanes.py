"""The measured lanes of a real trace, as the same span rows the simulator records.

:func:`measured_lanes` reads a Kineto trace and returns, for a few consecutive steps, one
:class:`simcore.record.Span` per activity on the lanes a timeline draws:

* ``rank{r}.host``: the thread that carries the step markers. Its top-level CPU operators are
  busy spans (category ``data`` for ``enumerate(DataLoader)#...__next__``, ``optimizer`` for
  ``Optimizer.step``/``zero_grad``, else ``other``); runtime calls on it are drawn over them:
  launches as busy ``launch`` spans, blocking calls (``cudaStreamSynchronize``, a pageable
  ``cudaMemcpy`` ...) as ``wait`` spans with cause ``sync``.
* ``rank{r}.stream:{s}`` (``{device}:{s}`` when the trace has several devices): every kernel,
  memcpy and memset, categorised as calibration does (:func:`calibration.gpu_kinds.categorize`).

Instants are µs relative to the first drawn step's start, so a measured and a simulated
timeline share one axis. Reading only: the simulator is never run here; drawing belongs to
``report``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.calibration.events import build_table
from stepsim.calibration.gpu_kinds import categorize
from stepsim.calibration.linking import LAUNCH_APIS, SYNC_APIS
from stepsim.calibration.steps import DATALOADER_RE, OPTIMIZER_RE, find_steps
from stepsim.calibration.trace_io import load_trace
from stepsim.simcore.errors import InputError
from stepsim.simcore.record import Span

__all__ = ["MeasuredLanes", "measured_lanes"]

_RANK_RE = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.I)


@dataclass(frozen=True)
class MeasuredLanes:
    """Lanes read from a trace.

    Attributes:
        path: the trace.
        rank: the rank (``distributedInfo.rank``, else the file name's number, else 0).
        spans: the activity of the chosen steps (µs from the first chosen step's start).
        marks_us: the chosen steps' boundaries (µs, same origin): ``len(steps) + 1`` instants.
        steps: the chosen steps' numbers.
        warnings: what was skipped.
    """

    path: Path
    rank: int
    spans: list[Span]
    marks_us: list[float]
    steps: list[int]
    warnings: list[str] = field(default_factory=list)


def _rank(raw) -> int:
    info = raw.metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    m = _RANK_RE.search(raw.path.name)
    return int(m.group(1)) if m else 0


def _host_category(name: str) -> str:
    if DATALOADER_RE.match(name):
        return "data"
    if OPTIMIZER_RE.match(name):
        return "optimizer"
    return "other"


def measured_lanes(path: str | Path, steps: int = 1, first: int | None = None,
                   step_regex: str | None = None) -> MeasuredLanes:
    """Spans of ``steps`` consecutive steps of the trace at ``path``.

    Args:
        steps: how many steps to read (≥ 1; fewer when the trace has fewer complete ones).
        first: the step number to start at; default the middle of the captured window (its
            first and last steps are the least typical).
        step_regex: a step marker regex, as for calibration.

    Raises:
        InputError: the file cannot be read, has no steps, or ``first`` is not one of them.
    """
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    raw = load_trace(path)
    table = build_table(raw)
    found = [s for s in find_steps(table, step_regex=step_regex) if not s.last]
    if not found:
        raise InputError(raw.path, "no complete training step to draw")
    if first is None:
        i0 = max(0, (len(found) - steps) // 2)
    else:
        i0 = next((i for i, s in enumerate(found) if s.number == first), -1)
        if i0 < 0:
            raise InputError(raw.path, f"no step {first} (steps: "
                             f"{', '.join(str(s.number) for s in found)})")
    chosen = found[i0:i0 + steps]
    t0, t1 = chosen[0].start_ns, chosen[-1].end_ns
    pid, tid = chosen[0].pid, chosen[0].tid
    rank = _rank(raw)
    ts, te = table.ts_ns, table.end_ns
    inside = (table.ph == "X") & (te > t0) & (ts < t1)
    spans: list[Span] = []

    def step_of(t: int) -> int:
        for s in chosen:
            if s.start_ns <= t < s.end_ns:
                return s.number
        return chosen[-1].number

    def add(row: int, lane: str, kind: str, name: str, category: str = "", cause: str = ""):
        a, b = max(int(ts[row]), t0), min(int(te[row]), t1)
        if b > a:
            spans.append(Span(lane, name, kind, (a - t0) / 1e3, (b - a) / 1e3, step_of(a), rank,
                              cause=cause, category=category))

    host = f"rank{rank}.host"
    cpu = np.nonzero(inside & table.is_cat("cpu_op", "user_annotation") & (table.pid == pid)
                     & (table.tid == tid) & (table.dur_ns > 0))[0]
    marker_rows = {s.row for s in chosen}
    end_top = -1
    for r in cpu[np.lexsort((-table.dur_ns[cpu], ts[cpu]))].tolist():
        if r in marker_rows or table.names[r].startswith("ProfilerStep#"):
            continue
        if ts[r] >= end_top:   # top level: not inside the previous top-level operator
            add(r, host, "busy", table.names[r], category=_host_category(table.names[r]))
            end_top = int(te[r])
    api = np.nonzero(inside & table.is_cat("cuda_runtime", "cuda_driver") & (table.pid == pid)
                     & (table.tid == tid))[0]
    for r in api.tolist():
        name = table.names[r]
        if name in SYNC_APIS:
            add(r, host, "wait", name, cause="sync")
        elif name in LAUNCH_APIS:
            add(r, host, "busy", name, category="launch")
    gpu = np.nonzero(inside & table.gpu_mask())[0]
    multi = len(set(table.device[gpu].tolist())) > 1
    for r in gpu.tolist():
        s = int(table.stream[r])
        lane = f"rank{rank}.stream:{f'{table.device[r]}:{s}' if multi else s}"
        add(r, lane, "busy", table.names[r], category=categorize(table.names[r], table.cat[r]))
    marks = [(s.start_ns - t0) / 1e3 for s in chosen] + [(t1 - t0) / 1e3]
    return MeasuredLanes(raw.path, rank, spans, marks, [s.number for s in chosen],
                         list(raw.warnings))
