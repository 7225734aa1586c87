"""pin_memory on a model without a device says it cannot change anything."""
from __future__ import annotations

from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.transforms import parse_set
from tests.test_planner import cpu_model as _cpu_model


def test_pin_memory_without_a_device_is_said():
    cpu_model = _cpu_model()
    said = caveats(cpu_model, [parse_set("loader.pin_memory=true")])
    assert any("loader.pin_memory changes nothing here: this model has no device" in w
               for w in said)
