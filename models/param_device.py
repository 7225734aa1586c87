"""The StepModel's device section: the tasks on each device lane (:class:`DeviceTask`) and the
lanes (:class:`DeviceParams`); re-exported by :mod:`models.param_types`.

Every time is in **µs**, every size in **bytes** (see :mod:`models.params`).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from stepsim.models.param_base import (LAUNCH_QUEUE_DEPTH, MAX_LAUNCH_QUEUE_DEPTH, Category,
                                       Micros, Phase, StrictModel, non_empty)

__all__ = ["TaskKind", "DeviceTask", "DeviceParams"]


TaskKind = Literal["kernel", "memcpy", "memset", "collective"]


class DeviceTask(StrictModel):
    """One task on a device lane (a CUDA stream, a copy engine, the communication stream).

    Tasks on one stream run in list order. A task is ready when its stream is free, its launch
    (the host op naming it, if any) has been issued, and every task in ``waits`` has finished;
    it starts ``gap_us`` (× ``DeviceParams.gap_scale``) later.
    For ``collective`` tasks ``dur_us`` is the transfer time (taken from the last rank to
    arrive); the simulated collective also waits for every rank to arrive.
    """

    id: str
    stream: str
    name: str = ""
    kind: TaskKind = "kernel"
    category: Category = "other"
    phase: Phase = "other"
    dur_us: Micros
    breakdown_us: dict[str, Micros] = Field(default_factory=dict)
    """After coarsening: µs per category of the merged tasks (sums to ``dur_us``)."""
    waits: list[str] = Field(default_factory=list)
    prev_waits: list[str] = Field(default_factory=list)
    """Tasks whose run in the *previous* step this task also waits for: a cross-step event
    wait (``cudaStreamWaitEvent`` on an event the previous step recorded), as when a pipelined
    input copy waits for the last step's optimizer. Ignored in the first simulated step."""
    bytes: int | None = Field(default=None, ge=0)
    copy_kind: Literal["", "h2d", "d2h", "d2d"] = ""
    pinned: bool | None = None
    launches: int = Field(default=1, ge=1)
    """Fine launches this task stands for after coarsening: its host launch takes that many
    slots of the launch queue until it finishes."""
    gap_us: Micros = 0.0
    """Idle time (µs) between the task becoming ready and starting that nothing in the model
    explains (device-side launch latency, a dependency the trace does not show). The stream
    waits it out before the task's busy ``dur_us``; it is not busy time. After coarsening, the
    gaps inside a merged chain, summed."""
    replay_us: list[Micros] | None = None
    """Busy time (µs) in each step of the captured window (:class:`ReplayWindow`), in order."""
    replay_gap_us: list[Micros] | None = None
    """Unexplained idle (µs, as ``gap_us``) in each step of the captured window."""

    @model_validator(mode="after")
    def _check_replay(self):
        non_empty(self, "replay_us", "replay_gap_us")
        return self

    def category_us(self) -> dict[str, float]:
        """µs per category: ``breakdown_us`` when coarsened, else ``{category: dur_us}``."""
        return dict(self.breakdown_us) if self.breakdown_us else {self.category: self.dur_us}


class DeviceParams(StrictModel):
    """Per stream, the ordered tasks. Stream names are free-form (Kineto stream ids as
    strings, or ``h2d``, ``comm`` in hand-written models)."""

    streams: dict[str, list[DeviceTask]] = Field(default_factory=dict)
    launch_queue_depth: int = Field(default=LAUNCH_QUEUE_DEPTH, ge=1, le=MAX_LAUNCH_QUEUE_DEPTH)
    """Launched, unfinished device tasks the runtime holds before a launch blocks the host
    (``LAUNCH_QUEUE_DEPTH`` unless a trace showed more pending; see
    ``models.device.LaunchQueue``)."""
    gap_scale: float = Field(default=1.0, ge=0, le=1e6)
    """Factor on every task's ``gap_us`` when simulated (1: as calibrated). One number for
    all of the device's unexplained idle, so a what-if or a prediction interval can vary it."""

    def tasks(self) -> dict[str, DeviceTask]:
        return {t.id: t for ts in self.streams.values() for t in ts}
