"""The summary's pass over a simulation's spans (:mod:`models.metrics`): each span clipped to
its rank's measured window, the host thread's time split by what it did, the DataLoader
threads' core time, and (for a full summary) every lane's busy intervals, the device's busy
time by category and the collectives' arrival skew (µs, window totals).

A brief summary (a sweep point's) passes over the host lane's spans (:func:`host_split`)
and the DataLoader threads' lanes only; a full one also over the other lanes' spans (their
busy intervals, the device). Each total adds its clipped durations in emission order, as
the two passes did before they were one function, so a summary is the same bit for bit.
"""
from __future__ import annotations

from collections import defaultdict
from operator import itemgetter

from stepsim.models.host_columns import host_split_columns, lane_spans_of

__all__ = ["host_split", "span_pass"]

_LANE = itemgetter(0)


def host_split(host: list, rank: int, window: tuple[float, float],
               busy: list | None = None) -> dict[str, float]:
    """The host thread's time (µs) in ``window`` by ``busy:<category>`` and ``wait:<cause>``,
    over ``host`` (the host lane's spans in emission order; those of another rank left out):
    each span's clipped duration added to its key in emission order, keys in the order first
    charged. ``busy``: receives the busy spans' clipped ``(start, end)`` (µs), in order.
    Spans that come with their columns (:mod:`models.host_columns`) are read by those (the
    same floats)."""
    if hasattr(host, "cols"):
        return host_split_columns(host.cols, rank, window, busy)
    a, b = window
    split: dict[str, float] = {}
    busy_key: dict[str, str] = {}
    wait_key: dict[str, str] = {}
    for sp in host:
        start = sp[3]
        e = start + sp[4]
        s, e = (a if a > start else start), (b if b < e else e)   # max(start, a), min(end, b)
        if e <= s or sp[6] != rank:
            continue
        if sp[2] == "busy":
            if busy is not None:
                busy.append((s, e))
            k = busy_key.get(sp[8])
            if k is None:
                k = busy_key[sp[8]] = f"busy:{sp[8]}"
        else:
            k = wait_key.get(sp[7])
            if k is None:
                k = wait_key[sp[7]] = f"wait:{sp[7]}"
        if k in split:
            split[k] += e - s
        else:
            split[k] = e - s
    return split


def _loader(result, rank: int, window: tuple[float, float]) -> tuple[float, float, float]:
    """The rank's DataLoader threads in ``window``: worker and pin-memory core time (a
    worker's busy time × its threads), the workers' busy and core-starved time (µs)."""
    spans = result.spans
    a, b = window
    host_lane = f"rank{rank}.host"
    loader_core_us = worker_busy = worker_starved = 0.0
    names = set(map(_LANE, spans)).union(*(_lanes(blk) for _, blk, _, _ in result.span_blocks))
    lanes = {lane for lane in names if lane != host_lane
             and ".stream:" not in lane and (".worker" in lane or lane.endswith(".pin_memory"))}
    if not lanes:
        return loader_core_us, worker_busy, worker_starved
    tpw = result.model.loader.threads_per_worker if result.model is not None else 1
    for lane, _, kind, start, dur, _, sp_rank, cause, _ in result.every_span(lanes):
        if sp_rank != rank:
            continue
        e = start + dur
        s, e = (a if a > start else start), (b if b < e else e)   # max(start, a), min(end, b)
        if e <= s:
            continue
        worker = ".worker" in lane
        if kind == "busy":
            loader_core_us += (e - s) * (tpw if worker else 1)
            worker_busy += (e - s) if worker else 0.0
        elif worker and cause == "cpu_cores":
            worker_starved += e - s
    return loader_core_us, worker_busy, worker_starved


def _lanes(block) -> set:
    """The lanes of a block's rows (found once per block)."""
    got = block.memo.get("lanes")
    if got is None:
        got = block.memo["lanes"] = set(map(_LANE, block.rows))
    return got


def span_pass(result, rank: int, windows: dict[int, tuple[float, float]], lanes: bool):
    """The pass over ``result``'s spans, each clipped to its rank's window (``windows``:
    rank → window, µs): ``(host_split, loader_core_us, worker_busy, worker_starved, host,
    busy, lane_rank, dev_cat, skew)``: the host thread's split (:func:`host_split`), the
    DataLoader threads' core time, busy and core-starved time, the host lane's spans
    (emission order, for :class:`models.blame.Blame`) and, with ``lanes``, per lane (every
    rank's) the busy intervals and the lane's rank, the rank's device busy time by category
    and its collectives' arrival skew (without ``lanes``: empty, 0)."""
    host_lane = f"rank{rank}.host"
    host = lane_spans_of(result, host_lane)   # with columns (from blocks where held so)
    busy: dict[str, list] = defaultdict(list)
    lane_rank: dict[str, int] = {}
    split = host_split(host, rank, windows[rank], busy[host_lane] if lanes else None)
    if busy.get(host_lane):
        lane_rank[host_lane] = rank
    else:
        busy.pop(host_lane, None)
    loader = _loader(result, rank, windows[rank])
    dev_cat: dict[str, float] = defaultdict(float)
    skew = 0.0
    if lanes:
        stream: dict[str, bool] = {}
        for lane, _, kind, start, dur, _, sp_rank, cause, category in result.every_span():
            if lane == host_lane:   # host_split's
                continue
            busy_span = kind == "busy"
            if sp_rank != rank and not busy_span:
                continue
            a, b = windows[sp_rank]
            e = start + dur
            s, e = (a if a > start else start), (b if b < e else e)
            if e <= s:
                continue
            if busy_span:
                busy[lane].append((s, e))
                lane_rank[lane] = sp_rank
            if sp_rank != rank:
                continue
            on = stream.get(lane)
            if on is None:
                on = stream[lane] = ".stream:" in lane
            if not on:
                continue
            if busy_span:
                dev_cat[category] += e - s
            elif cause == "arrival_skew":
                skew += e - s
    return split, *loader, host, busy, lane_rank, dev_cat, skew
