"""pin_memory on a model without a device says it cannot change anything."""
from __future__ import annotations

from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.op_text import parse_set
from tests.test_planner import cpu_model as _cpu_model


def test_pin_memory_without_a_device_is_said():
    cpu_model = _cpu_model()
    said = caveats(cpu_model, [parse_set("loader.pin_memory=true")])
    assert any("loader.pin_memory changes nothing here: this model has no device" in w
               for w in said)


def test_pin_memory_without_a_device_simulates_as_torch_runs_it():
    """torch pins only where an accelerator is available (``_BaseDataLoaderIter``: a CPU run
    gets no pin thread), so the model's pin lane agrees with the warning above: a fresh user's
    ``--set loader.pin_memory=true`` on a CPU model said it changes nothing, yet added a pin
    thread and a pinned copy (118.9 -> 119.1 ms, 2026-12-05)."""
    from stepsim.models.simulate import simulate
    from stepsim.scenarios.host_threads import beside_threads
    from stepsim.scenarios.noop import unread_params

    off = _cpu_model(workers=2, cores=2)
    on = off.model_copy(update={"loader": off.loader.model_copy(
        update={"pin_memory": True, "unpickle_us": 800.0, "batch_bytes": 8 << 20})})
    off = off.model_copy(update={"loader": on.loader.model_copy(update={"pin_memory": False})})
    a, b = simulate(off, steps=20, warmup=5, seed=1), simulate(on, steps=20, warmup=5, seed=1)
    assert b.step_us.tolist() == a.step_us.tolist()
    assert not [s for s in b.spans if "pin_memory" in s.lane]
    assert not on.pins_memory() and beside_threads(on) == beside_threads(off) == 2
    assert "no device" in unread_params(on)["loader.pin_gbps"]
