"""The simulated timeline as a Chrome trace (JSON Object Format), which Perfetto and
chrome://tracing open beside a real Kineto trace.

One process per rank (``pid`` = rank), one thread row per lane in a fixed order (host,
DataLoader workers, pin-memory thread, then device streams); every span becomes a complete
event (``ph: "X"``, ``ts``/``dur`` in µs, Kineto's unit), waits carry their cause in ``cat``
and ``args``; queue depths become counter tracks (``ph: "C"``).
"""
from __future__ import annotations

from pathlib import Path

import orjson

from stepsim.models.simulate import SimResult
from stepsim.simcore.atomic import write_atomic

__all__ = ["chrome_trace", "write_chrome_trace"]


def _lane_order(lane: str) -> tuple:
    rank, _, rest = lane.partition(".")
    kind = 0 if rest == "host" else 1 if rest.startswith("worker") else 2 if rest == "pin_memory" else 3
    num = rest[6:] if rest.startswith("worker") else ""
    return (rank, kind, int(num) if num.isdigit() else 0, rest)


def chrome_trace(result: SimResult) -> dict:
    """The trace as a dict (``traceEvents`` plus ``displayTimeUnit``)."""
    lanes = sorted({sp.lane for sp in result.spans}, key=_lane_order)
    tid = {lane: i + 1 for i, lane in enumerate(lanes)}
    events: list[dict] = []
    for r in result.ranks:
        events.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                       "args": {"name": f"rank {r} (simulated)"}})
    for lane in lanes:
        rank = int(lane.split(".", 1)[0][4:]) if lane.startswith("rank") else 0
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid[lane],
                       "args": {"name": lane.split(".", 1)[-1]}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid[lane],
                       "args": {"sort_index": tid[lane]}})
    for sp in result.spans:
        wait = sp.kind == "wait"
        events.append({
            "ph": "X", "pid": sp.rank, "tid": tid[sp.lane], "ts": sp.start_us, "dur": sp.dur_us,
            "name": f"wait: {sp.cause}" if wait else sp.name,
            "cat": sp.cause if wait else (sp.category or "busy"),
            "args": {"step": sp.step, "kind": sp.kind, "what": sp.name,
                     **({"cause": sp.cause} if wait else {"category": sp.category})},
        })
    for series, pts in result.samples.items():
        rank_s, _, name = series.partition(".")
        pid = int(rank_s[4:]) if rank_s[4:].isdigit() else 0
        for t, v in pts:
            events.append({"ph": "C", "pid": pid, "ts": t, "name": name, "args": {"batches": v}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"producer": "stepsim (simulated)", "warmup_steps": result.warmup}}


def write_chrome_trace(result: SimResult, path: str | Path) -> None:
    """Write :func:`chrome_trace` of ``result`` to ``path`` as JSON, atomically."""
    write_atomic(Path(path), orjson.dumps(chrome_trace(result)))
