"""What one step's fit yields per host op and per device task, before the representative
step is assembled into the model's :class:`models.params.HostOp` and
:class:`models.params.DeviceTask` (:func:`calibration.representative.assemble`): plain named
tuples with the same field names, since every step of the captured window is fitted and
only the representative's values become model objects (a step of the largest shared trace
has about 7,500 host ops and 1,500 tasks). Times in µs."""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Op", "Task"]


class Op(NamedTuple):
    """One host op (fields as :class:`models.params.HostOp`'s)."""

    kind: str
    name: str
    dur_us: float
    task: str | None
    category: str
    phase: str


class Task(NamedTuple):
    """One device task (fields as :class:`models.params.DeviceTask`'s)."""

    id: str
    stream: str
    name: str
    kind: str
    category: str
    phase: str
    dur_us: float
    gap_us: float
    waits: list
    prev_waits: list
    bytes: int | None = None
    copy_kind: str = ""
    pinned: bool | None = None
