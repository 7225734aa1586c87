"""CUDA/HIP graphs in a trace: captures (launches recorded into a graph, not run) and replays
(``cudaGraphLaunch``/``hipGraphLaunch``: one host call, many kernels).

Facts used (CUDA runtime and HIP documentation): between ``cudaStreamBeginCapture`` and
``cudaStreamEndCapture`` on a stream, work issued to it (kernel launches, async copies and
memsets) is recorded into a graph and does not execute, so the profiler sees those host calls
with no GPU activity; the graph runs later, once per ``cudaGraphLaunch``, whose kernels the
profiler records under that call's correlation id when it traces graph kernels at all.

What a trace with graphs can show: each replay's host launch cost (one call) and, when the
profiler recorded them, the kernels each replay ran. What it cannot: the host cost of the
individual launches the graph replaced (a capture records them once, not per step), and the
kernels of a replay the profiler did not record (then the replay's device time is unknown).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.events import EventTable

__all__ = ["BEGIN_CAPTURE", "END_CAPTURE", "CAPTURE_NOTE", "in_capture", "graph_refusal"]

BEGIN_CAPTURE = frozenset({"cudaStreamBeginCapture", "cudaStreamBeginCapture_v2",
                           "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture",
                           "cuStreamBeginCapture_v2", "hipStreamBeginCapture"})
END_CAPTURE = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
GRAPH_LAUNCH = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})
CAPTURE_NOTE = ("work issued during a graph capture is recorded into the graph and does not run "
                "then, so it has no GPU activity and does not make a step incomplete; the trace "
                "shows the capture's host cost once, not the graph's replays")


def _api_rows(table: EventTable) -> np.ndarray:
    return np.nonzero(table.is_cat("cuda_runtime", "cuda_driver") & (table.ph == "X"))[0]


def _capture_spans(table: EventTable) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per (pid, tid), the [begin, end] intervals (ns) of its graph captures; a capture not
    ended in the trace runs to its end."""
    rows = _api_rows(table)
    marks = [r for r in rows.tolist() if table.names[r] in BEGIN_CAPTURE or
             table.names[r] in END_CAPTURE]
    marks.sort(key=lambda r: table.ts_ns[r])
    open_at: dict[tuple[int, int], int] = {}
    spans: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in marks:
        k = (int(table.pid[r]), int(table.tid[r]))
        if table.names[r] in BEGIN_CAPTURE:
            open_at.setdefault(k, int(table.ts_ns[r]))
        elif k in open_at:
            spans.setdefault(k, []).append((open_at.pop(k), int(table.end_ns[r])))
    end = int(table.end_ns.max()) if len(table) else 0
    for k, a in open_at.items():
        spans.setdefault(k, []).append((a, end))
    return spans


def in_capture(table: EventTable, rows: np.ndarray) -> np.ndarray:
    """Whether each host call of ``rows`` was made by a thread while it captured a graph."""
    out = np.zeros(len(rows), dtype=bool)
    spans = _capture_spans(table)
    if not spans:
        return out
    for i, r in enumerate(rows.tolist()):
        t = int(table.ts_ns[r])
        for a, b in spans.get((int(table.pid[r]), int(table.tid[r])), ()):
            if a <= t <= b:
                out[i] = True
                break
    return out


def graph_refusal(table: EventTable, by_launch: dict) -> str | None:
    """Why a trace whose every step lacks GPU activity is a graph trace, or None when its
    graph launches (if any) all have kernels and it has no capture."""
    rows = _api_rows(table)
    launches = [r for r in rows.tolist() if table.names[r] in GRAPH_LAUNCH]
    bare = [r for r in launches if r not in by_launch]
    captures = sum(len(v) for v in _capture_spans(table).values())
    if bare:
        api = table.names[bare[0]]
        return (f"the trace replays CUDA/HIP graphs and {len(bare)} of its {len(launches)} "
                f"{api} call(s) have no kernels in it: the profiler recorded each replay's "
                "host launch but not the kernels it ran, so the graphs' device time is unknown "
                "(a trace with graphs shows each replay's launch cost and, when recorded, its "
                "kernels; re-capture with the profiler tracing graph kernels, e.g. the graphs "
                "captured after profiling starts, or without CUDA graphs)")
    if captures:
        return (f"the trace is a CUDA/HIP graph capture ({captures} capture(s)): "
                f"{CAPTURE_NOTE}; profile steps that replay the graph (after capture and "
                "warm-up) to calibrate them")
    return None
