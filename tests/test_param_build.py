"""models.param_build: objects made without validation are the validated ones, and only values
validation passes unchanged go that way."""
from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from stepsim.models.param_build import _RULES, build
from stepsim.models.params import DeviceTask, HostOp

_OP = dict(kind="launch", name="cudaLaunchKernel", dur_us=4.5, task="t1", category="launch",
           phase="forward", replay_us=[4.0, 5.0])
_TASK = dict(id="t1", stream="7", name="gemm", kind="kernel", category="gemm", phase="backward",
             dur_us=10.0, gap_us=0.5, waits=["t0"], prev_waits=[], bytes=None, copy_kind="",
             pinned=None, replay_us=[9.0, 11.0], replay_gap_us=[0.0, 1.0])

# values of each kind: plain ones, and ones pydantic changes or refuses
_VALUES = [0.0, 3.5, 1e12, 2e12, -1.0, math.nan, math.inf, 3, True, None, "", "x", "forward",
           "kernel", "launch", "gemm", "h2d", [], [1.0], [1.0, -2.0], [3], ["a"], [1.0, math.nan],
           0, 7, -1, False]


def _same(a, b) -> None:
    assert type(a) is type(b)
    assert a.model_dump() == b.model_dump()
    assert a.model_fields_set == b.model_fields_set
    assert a.model_dump_json() == b.model_dump_json()


@pytest.mark.parametrize("cls,row", [(HostOp, _OP), (DeviceTask, _TASK)])
def test_plain_rows_are_the_validated_objects(cls, row):
    made = build(cls, [row, dict(row)])
    for m in made:
        _same(m, cls(**row))


@pytest.mark.parametrize("cls,row", [(HostOp, _OP), (DeviceTask, _TASK)])
def test_each_rule_agrees_with_validation(cls, row):
    """A value a rule passes is one validation keeps as it is; any other value goes through
    validation (the same object, or the same error)."""
    for field, rule in _RULES[cls].items():
        for v in _VALUES:
            r = {**row, field: v}
            if rule(v):
                got = cls(**r)   # must validate, and keep the value as given
                assert getattr(got, field) == v and type(getattr(got, field)) is type(v)
            try:
                want = [cls(**r)]
            except ValidationError as e:
                with pytest.raises(ValidationError) as got_e:
                    build(cls, [row, r])
                # (as text: an error's input may be NaN, which equals nothing)
                assert repr(got_e.value.errors()) == repr(e.errors())
                continue
            _same(build(cls, [row, r])[1], want[0])


def test_a_field_without_a_rule_is_validated():
    r = {**_OP, "threads": 2}
    assert "threads" not in _RULES[HostOp]
    _same(build(HostOp, [r])[0], HostOp(**r))
    with pytest.raises(ValidationError):
        build(HostOp, [{**_OP, "threads": 0}])
