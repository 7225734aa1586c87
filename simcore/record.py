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

Observers are passed-in hooks with a no-op default (:class:`NullRecorder`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
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

    def span(self, span: Span) -> None:
        """Called once per finished span."""

    def sample(self, series: str, t_us: float, value: float) -> None:
        """Called when a sampled quantity (e.g. a queue depth) changes, at instant ``t_us``."""


class NullRecorder(Recorder):
    """Records nothing (the default)."""


class ListRecorder(Recorder):
    """Keeps every span and every sample in lists, in emission order."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.samples: dict[str, list[tuple[float, float]]] = {}

    def span(self, span: Span) -> None:
        self.spans.append(span)

    def sample(self, series: str, t_us: float, value: float) -> None:
        self.samples.setdefault(series, []).append((t_us, value))
