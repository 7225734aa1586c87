"""``models.param_base.copy_with`` leaves a model in the state ``model_copy(update=...)`` does
(its fields, which are set, the dump), and the window bootstrap that uses it gives the model
it gave before (compared against ``model_copy``)."""
import numpy as np

from stepsim.models.param_base import copy_with
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                                   ReplayWindow, StepModel)
from stepsim.scenarios import bootstrap


def _state(m):
    return (type(m), m.__dict__, m.__pydantic_fields_set__, m.__pydantic_extra__,
            m.__pydantic_private__, m.model_dump_json())


def test_copy_with_is_model_copy():
    t = DeviceTask(id="k1", stream="7", dur_us=12.5, gap_us=3.0, breakdown_us={"a": 2.0})
    for up in ({}, {"dur_us": 4.0}, {"dur_us": 4.0, "breakdown_us": {"a": 1.0}},
               {"replay_us": None, "gap_us": 0.5}):
        a, b = copy_with(t, up), t.model_copy(update=up)
        assert _state(a) == _state(b)
        assert a.__pydantic_fields_set__ is not t.__pydantic_fields_set__
        assert a.__dict__ is not t.__dict__
    d = DurationSpec(mean_us=3.0)
    assert _state(copy_with(d, {"cv": 0.2})) == _state(d.model_copy(update={"cv": 0.2}))


def _windowed() -> StepModel:
    """Two host ops and two tasks over a captured window of three steps, values varying."""
    ops = [HostOp(kind="cpu", name="fwd", dur_us=5.0, replay_us=[4.0, 5.0, 7.0]),
           HostOp(kind="launch", name="l", dur_us=1.0, task="t0", replay_us=[1.0, 2.0, 1.5])]
    t = DeviceTask(id="t0", stream="7", name="k", dur_us=10.0, gap_us=2.0,
                   breakdown_us={"x": 10.0}, replay_us=[9.0, 10.0, 13.0],
                   replay_gap_us=[1.0, 2.0, 4.0])
    return StepModel(host=HostParams(ops=ops), device=DeviceParams(streams={"7": [t]}),
                     replay=ReplayWindow(steps=[0, 1, 2], calibrated=[True, True, True],
                                         measured_step_us=[20.0, 21.0, 25.0]))


def test_bootstrap_window_as_with_model_copy(monkeypatch):
    m = _windowed()
    a = bootstrap.bootstrap_measured(m, np.random.default_rng(3), window=False)
    monkeypatch.setattr(bootstrap, "copy_with", lambda x, up: x.model_copy(update=up))
    b = bootstrap.bootstrap_measured(m, np.random.default_rng(3), window=False)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.host.ops[0].dur_us != m.host.ops[0].dur_us or a.device.streams["7"][0].dur_us != \
        m.device.streams["7"][0].dur_us    # the draw moved something
    assert a.host.ops[0].__pydantic_fields_set__ == b.host.ops[0].__pydantic_fields_set__
