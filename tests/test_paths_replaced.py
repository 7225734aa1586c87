"""scenarios.paths.replaced (the copy-on-write setter of the interval draws) against
set_value: the same model for every kind of path, the same refusals, the input unchanged."""
from __future__ import annotations

import pytest

from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                                   LoaderParams, RankParams, StepModel)
from stepsim.scenarios.paths import replaced, set_value
from stepsim.simcore.errors import ModelError


def _model() -> StepModel:
    return StepModel(
        loader=LoaderParams(num_workers=2, produce=DurationSpec(mean_us=900.0, samples_us=[800.0, 1000.0])),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="launch", task="k", dur_us=5.0)]),
        device=DeviceParams(streams={"7": [DeviceTask(id="k", stream="7", dur_us=400.0,
                                                      breakdown_us={"a": 400.0})]}),
        ranks=[RankParams(rank=0, delay_us=10.0)])


@pytest.mark.parametrize("path, value", [
    ("loader.host_cores", 6), ("loader.pin_gbps", 3.5), ("device.gap_scale", 1.2),
    ("loader.produce", DurationSpec(mean_us=450.0, samples_us=[400.0, 500.0])),
    ("device.tasks.k", DeviceTask(id="k", stream="7", dur_us=200.0, breakdown_us={"a": 200.0})),
    ("ranks.0.delay_us", 3.0), ("host.ops.1.dur_us", 7.0), ("host.interference", 0.2),
    ("loader.produce.mean_us", 300.0), ("loader.num_workers", 3)])
def test_replaced_gives_what_set_value_gives(path, value):
    m = _model()
    before = m.model_dump()
    assert replaced(m, path, value).model_dump() == set_value(m, path, value).model_dump()
    assert m.model_dump() == before


@pytest.mark.parametrize("path, value", [
    ("loader.host_cores", 10 ** 9), ("loader.pin_gbps", -1.0), ("loader.host_cores", "4"),
    ("device.tasks.k", DeviceTask(id="k", stream="7", dur_us=1.0).model_copy(
        update={"dur_us": -5.0})),
    ("ranks.0.rank", 1), ("host.ops.1.task", "nope")])
def test_replaced_refuses_what_set_value_refuses(path, value):
    m = _model()
    m = m.model_copy(update={"ranks": [*m.ranks, RankParams(rank=1)]})
    with pytest.raises(ModelError, match="gives an invalid model") as a:
        set_value(m, path, value)
    with pytest.raises(ModelError, match="gives an invalid model") as b:
        replaced(m, path, value)
    assert str(b.value) == str(a.value)
