"""Span records and the recorder hook.

A :class:`Span` is one flat immutable row of simulated activity:

=========  =====  ======================================================
field      unit   meaning
=========  =====  ======================================================
lane       –      where it ran: ``worker0``, ``host``, ``stream:7``, ``comm`` …
name       –      what ran (task name, ``produce``, ``wait:next_batch`` …)
kind       –      ``busy`` (the lane worked) or ``wait`` (the lane was blocked)
start_us   µs     simulated start instant
dur_us     µs     duration
step       –      training step index (−1 when not tied to a step)
rank       –      rank index
cause      –      for waits: what was waited on (``input``, ``sync``, ``comm`` …)
category   –      for busy spans: component category (``gemm``, ``produce`` …)
=========  =====  ======================================================

Observers are passed-in hooks with a no-op default (:class:`NullRecorder`); the simulator
streams every span to its recorder as it finishes, so a recorder keeps only what its output
needs.
"""
from __future__ import annotations

from collections.abc import Sequence
import math
from itertools import repeat
from typing import NamedTuple


class Span(NamedTuple):
    """One span (fields in the table above); a named tuple: immutable and cheap to make."""

    lane: str
    name: str
    kind: str
    start_us: float
    dur_us: float
    step: int = -1
    rank: int = 0
    cause: str = ""
    category: str = ""

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


class Recorder:
    """Hook called by simulation processes. The base class records nothing."""

    keeps = True
    """False for a recorder whose :meth:`span` does nothing, so a caller may skip making the
    span (:func:`record_cpu_work`)."""

    def span(self, span: Span) -> None:
        """Called once per finished span."""

    def sample(self, series: str, t_us: float, value: float) -> None:
        """Called when a sampled quantity (e.g. a queue depth) changes, at instant ``t_us``."""

    def shifted(self, block: "Block", dt_us: float, dstep: int) -> None:
        """Called with the spans of a step that repeats (``block.rows``): each is to be
        recorded moved by ``dt_us`` µs and ``dstep`` steps (by default, one :meth:`span`
        call each)."""
        for sp in block.moved(dt_us, dstep):
            self.span(sp)


class Block:
    """Rows (named tuples: spans, task runs) of one step, to be emitted again moved in time.

    Args:
        rows: the rows.
        times: the indices of their instant fields (µs; None stays None).
        step: the index of their step field.
    """

    def __init__(self, rows: Sequence[tuple], times: tuple[int, ...], step: int):
        self.rows = list(rows)
        self.cls = type(self.rows[0]) if self.rows else tuple
        self.cols = list(zip(*self.rows))
        self.times, self.step = times, step
        self._maxima: dict = {}
        self._parts: dict = {}
        self.memo: dict = {}
        """What a reader derived from the rows, kept with them (e.g. a lane's columns,
        :mod:`models.host_columns`)."""

    def part(self, name: str, keep) -> "Block":
        """The block of the rows ``keep(row)`` is true of, in order (made once per ``name``)."""
        got = self._parts.get(name)
        if got is None:
            got = self._parts[name] = Block([r for r in self.rows if keep(r)], self.times,
                                            self.step)
        return got

    def maxima(self, keys: tuple[int, ...], value: int) -> dict[tuple, float]:
        """The largest field ``value`` per distinct ``keys`` fields (computed once)."""
        got = self._maxima.get((keys, value))
        if got is None:
            got = self._maxima[(keys, value)] = {}
            for r in self.rows:
                k = tuple(r[i] for i in keys)
                if r[value] > got.get(k, -math.inf):
                    got[k] = r[value]
        return got

    def moved_row(self, j: int, dt_us: float, dstep: int) -> tuple:
        """Row ``j`` as :meth:`moved` gives it."""
        row = list(self.rows[j])
        for i in self.times:
            if row[i] is not None:
                row[i] = row[i] + dt_us
        row[self.step] = row[self.step] + dstep
        return tuple.__new__(self.cls, row)

    def moved(self, dt_us: float, dstep: int) -> list:
        """The rows with every instant moved by ``dt_us`` and the step by ``dstep``."""
        if not self.rows:
            return []
        cols = list(self.cols)
        for i in self.times:
            cols[i] = [None if x is None else x + dt_us for x in cols[i]]
        cols[self.step] = [x + dstep for x in cols[self.step]]
        return list(map(tuple.__new__, repeat(self.cls), zip(*cols)))


class NullRecorder(Recorder):
    """Records nothing (the default)."""

    keeps = False

    def shifted(self, block: "Block", dt_us: float, dstep: int) -> None:
        pass


class ListRecorder(Recorder):
    """Keeps every span and every sample in lists, in emission order."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.samples: dict[str, list[tuple[float, float]]] = {}

    def span(self, span: Span) -> None:
        self.spans.append(span)

    def shifted(self, block: "Block", dt_us: float, dstep: int) -> None:
        self.spans.extend(block.moved(dt_us, dstep))

    def sample(self, series: str, t_us: float, value: float) -> None:
        self.samples.setdefault(series, []).append((t_us, value))

    def clear(self) -> None:
        """Forget everything recorded (a simulation that starts again)."""
        self.spans.clear()
        self.samples.clear()


def _off_device(span: Span) -> bool:
    return ".stream:" not in span[0]


class HostSideRecorder(ListRecorder):
    """A :class:`ListRecorder` of the host side only: every span but the device streams'
    (lanes ``rank<r>.stream:<id>``), in emission order, and every sample.

    A repeated step's spans are not made: ``blocks`` holds, in order, where they go in
    ``spans`` (before the span at that index), their block (the rows to move) and the shift
    (µs, steps); :func:`every_span` makes them all, a reader that needs only columns makes
    those from the block's once (:mod:`models.host_columns`)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[tuple[int, Block, float, int]] = []

    def span(self, span: Span) -> None:
        if ".stream:" not in span[0]:   # _off_device, inlined: one call per span saved
            self.spans.append(span)

    def shifted(self, block: "Block", dt_us: float, dstep: int) -> None:
        self.blocks.append((len(self.spans), block.part("off_device", _off_device), dt_us,
                            dstep))

    def clear(self) -> None:
        super().clear()
        self.blocks.clear()


def every_span(spans: list, blocks: list, lanes: set | None = None) -> list:
    """``spans`` with the rows of ``blocks`` (:attr:`HostSideRecorder.blocks`) moved in where
    they go, in emission order; only those on ``lanes`` when given."""
    if not blocks:
        return list(spans) if lanes is None else [sp for sp in spans if sp[0] in lanes]
    out: list = []
    pos = 0
    for at, block, dt_us, dstep in blocks:
        if lanes is not None:
            block = block.part(("lanes", frozenset(lanes)), lambda r: r[0] in lanes)
            out.extend(sp for sp in spans[pos:at] if sp[0] in lanes)
        else:
            out.extend(spans[pos:at])
        out.extend(block.moved(dt_us, dstep))
        pos = at
    out.extend(spans[pos:] if lanes is None else (sp for sp in spans[pos:] if sp[0] in lanes))
    return out


def record_cpu_work(rec: Recorder, lane: str, name: str, category: str, start_us: float,
                    work_us: float, end_us: float, step: int, rank: int) -> None:
    """Record ``work_us`` µs of CPU work that ran from ``start_us`` to ``end_us`` on the shared
    pool: a busy span for the work, then a ``cpu_cores`` wait for the rest (the time the thread
    was runnable without a core; its quanta are spread over the interval, shown at the end)."""
    if not rec.keeps:
        return
    span_us = end_us - start_us
    if span_us < work_us:   # min(work_us, span_us), without the call: a host op's hot path
        work_us = span_us
    if work_us > 0:
        rec.span(Span(lane, name, "busy", start_us, work_us, step, rank, "", category))
    if span_us - work_us > 1e-6:
        rec.span(Span(lane, name, "wait", start_us + work_us, span_us - work_us, step, rank,
                      "cpu_cores", ""))
