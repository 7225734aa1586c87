"""whatif says what its baseline holds for page faults (report.pred_text.refault_line): the
training step pays host.refault_share of the CPU its capture's most re-faulting step spent
faulting memory in again, so a run that re-faults every step, or none, lies that far off it.
A user's baseline sat between the capture's calm and re-faulting steps with nothing said."""
from __future__ import annotations

import re

from stepsim.models.params import StepModel, save_model
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli


def _model(refault_ms: float, share_range=(0.0, 1.0)) -> StepModel:
    data = cpu_model(0, produce_ms=40, train_ms=20).model_dump()
    data["host"]["ops"][1]["refault_us"] = refault_ms * 1e3
    data["host"]["refault_share_range"] = share_range
    return StepModel.model_validate(data)


def test_the_baseline_says_its_share_of_the_faults(tmp_path):
    """F = 8 ms at the most, share 0.5: the step holds 4 ms; a run that re-faults every step
    pays 4 ms more, one that never does 4 ms less. The mean step shows it: 40 + 20 + 4."""
    save_model(_model(8.0), tmp_path / "m.json")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--set", "loader.batch_size=16",
                       "--draws", "0", "--steps", "20")
    assert rc == 0, err
    flat = re.sub(r"\s+", " ", out)
    assert ("baseline: page faults: the training step holds 0.50 of the 8.0 ms of CPU a step"
            in flat)
    assert "assumed, drawn 0–1 per run in the interval" in flat
    assert "re-faults every step pays 4.0 ms more a step, one that never does 4.0 ms less" in flat
    # the scenario's batch of 16 doubles the faults with the work (scenarios.batch_size)
    assert "scenario: page faults: the training step holds 0.50 of the 16.0 ms" in flat
    assert "64.0" in flat       # baseline mean step, ms


def test_nothing_said_without_faults(tmp_path):
    save_model(_model(0.0), tmp_path / "m.json")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--set", "loader.batch_size=16",
                       "--draws", "0", "--steps", "20")
    assert rc == 0, err
    assert "page faults" not in out
