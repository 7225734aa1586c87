"""Selectors: which parts of a StepModel a ``scale`` or ``remove`` acts on.

A selector is a conjunction of filters; each filter takes one value or a list of alternatives.
The parts it can pick, and how each filter reads them:

============  =================================  ==========================================
part          lane                               category / kind / name / phase
============  =================================  ==========================================
device task   its stream (``7``, ``stream:7``),  its category (for a coarsened task: the
              or ``device`` for every stream     parts of ``breakdown_us`` that match), its
                                                 kind, its name or id, its phase
host op       ``host``                           ``launch`` / ``sync`` for those ops, the
                                                 op's category for ``cpu`` ops; its kind
                                                 (``cpu``, ``launch``, ``sync``), its name;
                                                 its phase, else its task's phase
loader cost   ``loader``                         ``produce`` (worker time per batch),
                                                 ``pin`` (pin-memory copy), ``unpickle``
                                                 (main-thread receive); no kind or phase
rank skew     (``rank`` filter)                  the rank's ``delay_us``, its
                                                 ``phase_extra_us`` and ``phase_wall_us`` (for
                                                 ``phase``, if given)
============  =================================  ==========================================

``direction`` picks device copies by direction (``h2d``, ``d2h``, ``d2d``; see
:func:`copy_direction`) and only device tasks. ``name`` is a shell-style pattern
(``aten::*``). Without ``lane`` every device task, host op and loader cost is a candidate.
``rank`` picks rank skew only: durations of tasks are shared by all ranks in the StepModel,
so it cannot be combined with ``lane``, ``category``, ``kind``, ``name`` or ``direction``.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from stepsim.models.params import DeviceTask, HostOp, Phase, StepModel
from stepsim.simcore.errors import ModelError

LOADER_PARTS = ("produce", "pin", "unpickle")
HOST_KINDS = ("cpu", "launch", "sync")


class Selector(BaseModel):
    """Filters, each a value or a list of alternatives (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: tuple[str, ...] | None = None
    phase: tuple[Phase, ...] | None = None
    name: tuple[str, ...] | None = None
    lane: tuple[str, ...] | None = None
    kind: tuple[str, ...] | None = None
    rank: tuple[int, ...] | None = None
    direction: tuple[Literal["h2d", "d2h", "d2d"], ...] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _listify(cls, v):
        if v is None or isinstance(v, (list, tuple)):
            return v
        return (v,)

    def describe(self) -> str:
        """``category=gemm|conv,phase=forward`` (the CLI's selector syntax)."""
        parts = [f"{k}={'|'.join(map(str, v))}" for k, v in self.model_dump().items() if v]
        return ",".join(parts) or "everything"


@dataclass
class Selection:
    """What a selector picked in one model.

    Attributes:
        device: task id → the categories of its breakdown that were picked (None: the whole
            task).
        host: indices into ``host.ops``.
        loader: picked loader costs (subset of ``produce``, ``pin``, ``unpickle``).
        ranks: indices into ``ranks`` whose skew was picked.
    """

    device: dict[str, frozenset[str] | None] = field(default_factory=dict)
    host: list[int] = field(default_factory=list)
    loader: set[str] = field(default_factory=set)
    ranks: list[int] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.device or self.host or self.loader or self.ranks)


def host_category(op: HostOp) -> str:
    """The category a host op is known by in spans: ``launch``/``sync`` for those kinds."""
    return op.kind if op.kind in ("launch", "sync") else op.category


def copy_direction(t: DeviceTask) -> str | None:
    """``h2d``/``d2h``/``d2d`` for a copy task (from ``copy_kind``, else from Kineto's names:
    ``Memcpy HtoD``, ``DtoH``, ``DtoD``; a copy of unknown direction counts as ``h2d``, as the
    simulator's metrics do), None for any other task."""
    if t.kind != "memcpy" and t.category != "memcpy":
        return None
    if t.copy_kind:
        return t.copy_kind
    name = t.name.replace(" ", "").lower()
    for tag, d in (("dtoh", "d2h"), ("devicetohost", "d2h"), ("dtod", "d2d"),
                   ("devicetodevice", "d2d")):
        if tag in name:
            return d
    return "h2d"


def _names(pats: tuple[str, ...] | None, *names: str) -> bool:
    return pats is None or any(fnmatch.fnmatchcase(n, p) for p in pats for n in names if n)


def _task_lane_ok(lanes, stream: str) -> bool:
    return lanes is None or "device" in lanes or stream in lanes or f"stream:{stream}" in lanes


def _device_match(sel: Selector, t: DeviceTask) -> frozenset[str] | None | bool:
    """False: not picked; None: the whole task; a set: those categories of its breakdown."""
    if not _task_lane_ok(sel.lane, t.stream):
        return False
    if sel.phase is not None and t.phase not in sel.phase:
        return False
    if sel.kind is not None and t.kind not in sel.kind:
        return False
    if sel.direction is not None and copy_direction(t) not in sel.direction:
        return False
    if not _names(sel.name, t.name, t.id):
        return False
    if sel.category is None:
        return None
    cats = set(t.category_us())
    hit = cats & set(sel.category)
    if not hit:
        return False
    return None if hit == cats else frozenset(hit)


def select(model: StepModel, sel: Selector) -> Selection:
    """Resolve ``sel`` against ``model``.

    Raises:
        ModelError: a lane that names no stream and is not ``device``/``host``/``loader``, a
            rank the model does not have, or ``rank`` combined with a per-task filter.
    """
    out = Selection()
    if sel.rank is not None:
        if any(v is not None for v in (sel.lane, sel.category, sel.kind, sel.name, sel.direction)):
            raise ModelError(f"selector {sel.describe()}: 'rank' picks a rank's skew and cannot be "
                             "combined with lane/category/kind/name/direction (task durations "
                             "are shared by all ranks)")
        index = {r.rank: i for i, r in enumerate(model.ranks)}
        for r in sel.rank:
            if r not in index:
                raise ModelError(f"selector {sel.describe()}: no rank {r} (ranks: "
                                 f"{', '.join(map(str, index))})")
            out.ranks.append(index[r])
        return out
    streams = set(model.device.streams)
    for lane in sel.lane or ():
        name = lane.removeprefix("stream:")
        if lane not in ("device", "host", "loader") and name not in streams:
            raise ModelError(f"selector {sel.describe()}: unknown lane {lane!r} (lanes: device, "
                             f"host, loader, {', '.join(sorted(streams)) or 'no streams'})")
    for ts in model.device.streams.values():
        for t in ts:
            m = _device_match(sel, t)
            if m is not False:
                out.device[t.id] = m
    host_lane = sel.lane is None or "host" in sel.lane
    if host_lane and sel.direction is None:
        tasks = model.task_map()
        for i, op in enumerate(model.host.ops):
            phase = op.phase if op.phase != "other" or op.task is None else tasks[op.task].phase
            if op.kind in HOST_KINDS and (sel.kind is None or op.kind in sel.kind) \
                    and (sel.category is None or host_category(op) in sel.category) \
                    and (sel.phase is None or phase in sel.phase) and _names(sel.name, op.name):
                out.host.append(i)
    if (sel.lane is None or "loader" in sel.lane) and sel.phase is None and sel.kind is None \
            and sel.direction is None:
        out.loader = {p for p in LOADER_PARTS
                      if (sel.category is None or p in sel.category) and _names(sel.name, p)}
    return out
