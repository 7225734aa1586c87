"""Building many :class:`HostOp` / :class:`DeviceTask` objects from values the calibration
computed, without pydantic's per-object validation where the values are plainly valid.

A fit assembles about 13,000 ops and tasks for the 54 MB trace; validating each (the
``StrictScalars`` before-check, the field checks, the after-check) took about 0.15 s of a
2.1 s ``calibrate`` (2026-12-06). :func:`build` first checks every value of every object at
once against the rules the types enforce (:data:`_RULES`: exact types, finite, bounds,
literals, non-empty lists, and nothing but the fields listed there); only when all pass are
the objects made with ``model_construct``, which gives the same objects (same field values,
same fields set) as validation would. Otherwise, or for a field the rules do not cover, every
object is validated as before, so a bad value raises exactly the error it raised before.
"""
from __future__ import annotations

from typing import get_args

from stepsim.models.param_base import MAX_DURATION_US, Category, Phase
from stepsim.models.param_types import DeviceTask, HostKind, HostOp, TaskKind

__all__ = ["build"]


def _micros(v) -> bool:
    return type(v) is float and 0.0 <= v <= MAX_DURATION_US   # (NaN fails both)


def _micros_list(v) -> bool:
    """A non-empty list of durations (µs), or None (the ``replay_us`` fields)."""
    return v is None or (type(v) is list and len(v) > 0 and all(map(_micros, v)))


def _str(v) -> bool:
    return type(v) is str


def _opt_str(v) -> bool:
    return v is None or type(v) is str


def _str_list(v) -> bool:
    return type(v) is list and all(type(x) is str for x in v)


def _among(lit):
    allowed = frozenset(get_args(lit))
    return lambda v: type(v) is str and v in allowed


_RULES = {
    HostOp: {"kind": _among(HostKind), "name": _str, "dur_us": _micros, "task": _opt_str,
             "category": _str, "phase": _among(Phase), "replay_us": _micros_list},
    DeviceTask: {"id": _str, "stream": _str, "name": _str, "kind": _among(TaskKind),
                 "category": _among(Category), "phase": _among(Phase), "dur_us": _micros,
                 "gap_us": _micros, "waits": _str_list, "prev_waits": _str_list,
                 "bytes": lambda v: v is None or (type(v) is int and v >= 0),
                 "copy_kind": _among(DeviceTask.model_fields["copy_kind"].annotation),
                 "pinned": lambda v: v is None or type(v) is bool,
                 "replay_us": _micros_list, "replay_gap_us": _micros_list},
}
"""Per class, the fields :func:`build` may set without validation and what each must be for
validation to pass it unchanged (``tests/test_param_build.py`` holds each rule to pydantic's
verdict). Every other field keeps its default, which passes the classes' after-checks (a
``HostOp``'s fractions 0, a ``DeviceTask``'s lists empty)."""


def _plain(cls, rows: list[dict]) -> bool:
    rules = _RULES.get(cls)
    if rules is None:
        return False
    for row in rows:
        for k, v in row.items():
            ok = rules.get(k)
            if ok is None or not ok(v):
                return False
    return True


def build(cls, rows: list[dict]) -> list:
    """``[cls(**row) for row in rows]``: made without validation when every value passes
    :data:`_RULES` (the same objects), else each validated (the same objects or error)."""
    if _plain(cls, rows):
        construct = cls.model_construct
        return [construct(**row) for row in rows]
    return [cls(**row) for row in rows]

