"""What validate says of one record says one thing, of the run's own framework (fresh11,
2026-12-07, an HF Trainer run): the outside-load warning said its record "is kept out of the
ledger's score" while the footer said a ledger keeps it (faster than predicted, which load
cannot explain), and a first step's time outside ``next()`` was put down to "Lightning's
fetcher"."""
from __future__ import annotations

import numpy as np
import pytest

from stepsim.calibration.outside_load import OutsideLoad, load_note
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.startup_step import startup_step
from stepsim.report.validation import startup_text
from stepsim.scenarios.predict import predict
from stepsim.scenarios.validate import validate
from tests.test_planner import SIM, cpu_model


def test_the_load_warning_states_the_rule_not_a_verdict():
    said = load_note(OutsideLoad(0.37, 1.0, 2.7, 2.5, 50, 50, 2), team=2)
    assert "kept out of the ledger's score" not in said
    assert ("an error slower than predicted is the load's as much as the prediction's, and a "
            "ledger scores such a record apart; one faster than predicted the load cannot "
            "explain, and stays in the score") in said


def _side(capture: str | None) -> Sidecar:
    row = {"t_start_us": 0.0, "wall_us": 4.0e6, "cpu_us": 1e5, "next_wall_us": 7e5,
           "next_cpu_us": 1e3}
    steps = [row] + [dict(row, t_start_us=5e6 + 2e6 * k, wall_us=1.5e6, next_wall_us=6e3)
                     for k in range(4)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "steps": steps, "capture": capture,
                                   "loader": {"num_workers": 1, "batch_size": 16}})


@pytest.fixture(scope="module")
def pred():
    return predict(cpu_model(1, sources={"loader.produce": "assumed"}), intervals=0, **SIM)


@pytest.mark.parametrize("capture, named", [("transformers", False), ("lightning", True),
                                            (None, False)])
def test_the_first_step_names_the_runs_own_framework(pred, capture, named):
    up = startup_step(_side(capture), np.ones(4), np.ones(4), False)
    assert up.capture == capture
    r = validate(pred, [10_000.0], None, "x", startup=[(up.step_us, up.next_us, up.later_next_us)],
                 startup_capture=up.capture)
    said = startup_text(r.startup_us, r.startup_next_us, r.startup_later_next_us,
                        r.startup_runs, r.startup_capture)
    assert "lie outside next(), the first step's own work or a start-up paid before it" in said
    assert ("Lightning's fetcher" in said) is named
