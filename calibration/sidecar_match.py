"""Whether a capture sidecar can be of the run a trace recorded, checked before either is
fitted: a sidecar from another run (another host, process, device or window of steps) would
silently give the model that run's loader settings and produce times.

Each check runs only when both files hold the evidence, and the first that fails refuses the
pair with one line naming the sidecar:

* **host**: the trace's ``host_name`` (recent Kineto) and the sidecar's;
* **device**: a sidecar of a CPU run (``device: cpu``) beside a trace with GPU activity;
* **process**: the pid of the sidecar's main-thread batches (``worker: -1``) among the trace's;
* **loader**: the sidecar's ``num_workers`` against the DataLoader iterator the trace names
  (``_SingleProcessDataLoaderIter`` at 0 workers, ``_MultiProcessingDataLoaderIter`` above);
* **steps** (harness captures, whose step counter is the profiler's): the sidecar's profiled
  steps are the trace's ``ProfilerStep#N`` (with ``calibrate --steps A:B``, those of A to
  B − 1: every sub-range of a capture with its sidecar was refused as another run's).

The span of the profiled steps is not compared: the harness stamps a step where the loop
hands out its batch and the profiler where ``prof.step()`` runs, and the two spans of one
run differed by 3.2 % (94.1 against 97.2 ms) in a README capture, as much as two runs of one
loop may differ.
"""
from __future__ import annotations

import re
from pathlib import Path

from stepsim.calibration.events import EventTable
from stepsim.calibration.sidecar import Sidecar
from stepsim.simcore.errors import InputError

__all__ = ["check_sidecar_matches"]

_ITERS = {"_SingleProcessDataLoaderIter": False, "_MultiProcessingDataLoaderIter": True}
"""DataLoader iterator class in the trace's ``enumerate(DataLoader)#...`` → has workers."""
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _trace_steps_us(table: EventTable) -> dict[int, float]:
    """``ProfilerStep#N`` → its start (µs) in the trace."""
    out: dict[int, float] = {}
    for i in (table.ph == "X").nonzero()[0].tolist():
        m = _STEP.match(str(table.names[i]))
        if m:
            out.setdefault(int(m.group(1)), table.ts_ns[i] / 1e3)
    return out


def _loader_has_workers(table: EventTable) -> bool | None:
    """Whether the trace's DataLoader ran worker processes, by the iterator it names; None
    when it names neither or both."""
    seen = {has for name in set(table.names.tolist()) if str(name).startswith("enumerate(")
            for cls, has in _ITERS.items() if cls in str(name)}
    return seen.pop() if len(seen) == 1 else None


def _mismatch(table: EventTable, side: Sidecar) -> str | None:
    """Why ``side`` cannot be of ``table``'s run, or None when nothing says so."""
    host = table.metadata.get("host_name") if isinstance(table.metadata, dict) else None
    if host and side.host_name and str(host) != side.host_name:
        return f"it was recorded on host {side.host_name!r}, the trace on {str(host)!r}"
    if side.device == "cpu" and table.gpu_mask().any():
        return "it records a CPU run (device cpu) but the trace has GPU activity"
    main = {r.pid for r in side.produce if r.worker == -1}
    pids = set(table.pid[table.pid >= 0].tolist())
    if main and pids and not main & pids:
        return (f"its main process is pid {', '.join(map(str, sorted(main)))}, which the trace "
                f"does not hold (pids {', '.join(map(str, sorted(pids)[:4]))})")
    workers = _loader_has_workers(table)
    if workers is not None and workers != (side.loader.num_workers > 0):
        kind = "worker processes" if workers else "the main process"
        return (f"its loader has num_workers={side.loader.num_workers}, the trace's DataLoader "
                f"ran in {kind}: another run")
    if side.capture != "harness":
        return None
    gone = side.gone_steps      # dropped steps (their walls ran into the next): not compared
    numbers = (n for n in range(len(side.steps) + len(gone)) if n not in gone)
    ours = {n: s.t_start_us for n, s in zip(numbers, side.steps)
            if s.profiled and s.t_start_us is not None}
    theirs = {n: t for n, t in _trace_steps_us(table).items() if n not in gone}
    if table.step_range is not None:   # --steps A:B: those steps (the trace keeps neighbours)
        lo, hi = table.step_range
        ours, theirs = ({n: t for n, t in d.items() if (lo is None or n >= lo)
                         and (hi is None or n < hi)} for d in (ours, theirs))
    if not ours or not theirs:
        return None
    if set(ours) != set(theirs):
        return (f"it profiled steps {min(ours)}-{max(ours)} ({len(ours)}), the trace holds "
                f"ProfilerStep#{min(theirs)}-#{max(theirs)} ({len(theirs)})")
    return None


def check_sidecar_matches(table: EventTable, side: Sidecar, side_path: str | Path) -> None:
    """Refuse a sidecar that cannot be of the trace's run (see the module docstring).

    Raises:
        InputError: naming ``side_path`` and the first mismatch found.
    """
    why = _mismatch(table, side)
    if why is not None:
        trace = table.path.name if table.path is not None else "the trace"
        raise InputError(Path(side_path), f"this sidecar is not of the run in {trace}: {why}")
