"""Work that belongs to no step: stray GPU activity at a last step's tail, and what runs after
the last step.

**The last step's tail.** A last step has no next start: it ends when the GPU work launched
inside it ends (:mod:`calibration.steps`). Work launched inside it that starts only after the
device (all its GPU activity, earlier steps' backlog included) sat idle, after the step's host
part ended, for longer than it ever did while that host part ran (and at least
``STRAY_GAP_MIN_US``) waited on something outside the step (another
process, a later event): when it is also short beside that idle (busy under
``STRAY_BUSY_SHARE`` of it: a lone kernel, not a part of the step's work that waited for an
event, which fills the device as the rest does) it is *stray*, reported, and not folded into
the step's time.

**After the last step.** GPU activity that starts after the last step's end (a trailing,
unmarked iteration, a stray kernel of another thread) belongs to no step: it is counted in a
warning, never folded in. In a host-only trace the same is said of the CPU ops of the step's
thread after it.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.events import EventTable

__all__ = ["STRAY_GAP_MIN_US", "STRAY_BUSY_SHARE", "last_step_end", "after_last_step"]

STRAY_GAP_MIN_US = 1000.0
"""The least device idle (µs) after a last step's other GPU work that makes later work stray:
far above a launch's latency (a few µs to tens of µs), so work queued back to back is never
cut; any idle the step showed while its host part ran raises the bound to that idle."""

STRAY_BUSY_SHARE = 0.1
"""Work after such an idle is stray only when its busy time is under this share of the idle
before it (a stray kernel is a few ms after tens of ms of nothing; the second half of a step
that waited for an event, as in HTA's ``negative_queue_length_values_check`` trace, where
44 ms of work follow a 65 ms idle, is not)."""


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    idx = np.nonzero(new)[0]
    return s[idx], np.maximum.reduceat(e, idx)


def _busy(s: np.ndarray, e: np.ndarray) -> int:
    us, ue = _union(s, e)
    return int((ue - us).sum())


def last_step_end(table: EventTable, pid: int, start_ns: int, cpu_end_ns: int
                  ) -> tuple[int, int, int]:
    """(end ns, stray activities, end ns had they been folded in) of a last step of process
    ``pid`` whose marker runs [start_ns, cpu_end_ns]: the later of the marker's end and the
    end of the GPU work launched inside it, stray work left out (module docstring)."""
    api = table.is_cat("cuda_runtime", "cuda_driver") & (table.pid == pid) & \
        (table.ts_ns >= start_ns) & (table.ts_ns <= cpu_end_ns) & (table.correlation >= 0)
    if not api.any():
        return cpu_end_ns, 0, cpu_end_ns
    gpu = table.gpu_mask() & np.isin(table.correlation, table.correlation[api])
    if not gpu.any():
        return cpu_end_ns, 0, cpu_end_ns
    s, e = table.ts_ns[gpu], table.end_ns[gpu]
    full = max(cpu_end_ns, int(e.max()))
    # the device is idle when no GPU activity at all runs (earlier steps' backlog included)
    dev = table.gpu_mask() & (table.end_ns > start_ns)
    us, ue = _union(table.ts_ns[dev], table.end_ns[dev])
    during = (ue[:-1] >= start_ns) & (ue[:-1] < cpu_end_ns)
    idle = (us[1:] - ue[:-1])[during]
    allowed = max(STRAY_GAP_MIN_US * 1000, int(idle.max()) if len(idle) else 0)
    reach, cut = cpu_end_ns, None
    for a, b in zip(us.tolist(), ue.tolist()):
        if b <= cpu_end_ns:
            continue
        if a > reach + allowed:
            cut = a
            break
        reach = max(reach, b)
    late = s >= cut if cut is not None else np.zeros(len(s), dtype=bool)
    if not late.any() or _busy(s[late], e[late]) >= STRAY_BUSY_SHARE * (cut - reach):
        return full, 0, full
    kept = e[s < cut]
    return max(cpu_end_ns, int(kept.max()) if len(kept) else cpu_end_ns), int(late.sum()), full


def after_last_step(table: EventTable, last) -> list[str]:
    """Warnings for the work after the last step ``last`` (a :class:`calibration.steps.Step`)
    that belongs to no step (module docstring)."""
    gpu = table.gpu_mask()
    out = []
    if gpu.any():
        m = gpu & (table.ts_ns >= last.end_ns)
        what = "GPU activities"
    else:
        m = table.is_cat("cpu_op", "user_annotation") & (table.ph == "X") & \
            (table.pid == last.pid) & (table.tid == last.tid) & (table.ts_ns >= last.end_ns)
        what = "CPU ops of the step's thread"
    if m.any():
        s, e = table.ts_ns[m], table.end_ns[m]
        us, ue = _union(s, e)
        busy = float((ue - us).sum()) / 1e6
        out.append(f"{int(m.sum())} {what} ({busy:.2f} ms busy, until "
                   f"{(int(e.max()) - last.end_ns) / 1e6:.2f} ms after the last step's end) run "
                   "after the last step and belong to no step: reported, not folded into it")
    return out
