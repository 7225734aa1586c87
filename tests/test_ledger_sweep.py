"""A ledger as a measured sweep: the records that set the swept path alone, whatever else a
project's ledger holds (other what-ifs, baselines of other models), and the model's own
baseline records at its value of the path."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.report.document import ledger_sweep_points
from stepsim.scenarios.validate import LedgerRecord, append_ledger
from stepsim.simcore.errors import StepsimError
from stepsim.views import ledger_points
from tests.test_planner import cpu_model


def _rec(scenario: str, measured_us: float, model: str = "cpu") -> LedgerRecord:
    return LedgerRecord(
        time="t", label=scenario, model=model, scenario=scenario, traces=[], steps_measured=1,
        predicted_mean_us=measured_us, predicted_median_us=measured_us, p10_us=None,
        p50_us=None, p90_us=None,
        measured_mean_us=measured_us, measured_median_us=measured_us, error_pct=0.0,
        median_error_pct=0.0, inside=None, predicted_bottleneck="input",
        measured_bottleneck=None, bottleneck_agrees=None)


MIXED = [_rec("set loader.num_workers=0", 40.0), _rec("set loader.pin_memory=true", 9.0),
         _rec("set loader.num_workers=2", 30.0), _rec("baseline", 50.0),
         _rec("baseline", 70.0, model="other"), _rec("set loader.batch_size=64", 150.0),
         _rec("set loader.num_workers=2", 32.0),
         _rec("set loader.num_workers=4; scale host.cpu=0.5", 1.0)]


def test_other_what_ifs_are_left_out():
    assert ledger_sweep_points(MIXED, "loader.num_workers") == (
        "loader.num_workers", {0: [40.0], 2: [30.0, 32.0]})
    # no path given: the one set alone at the most values
    assert ledger_sweep_points(MIXED)[0] == "loader.num_workers"
    assert ledger_sweep_points(MIXED, "loader.pin_memory") is None  # one value only


def test_the_models_own_baseline_records_at_its_value():
    got = ledger_sweep_points(MIXED, "loader.num_workers", ("cpu", 1))[1]
    assert got == {0: [40.0], 2: [30.0, 32.0], 1: [50.0]}  # not the other model's baseline


def test_sweep_takes_a_mixed_ledger(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    for r in MIXED:
        append_ledger(ledger, r)
    model = tmp_path / "m.json"
    model.write_text(cpu_model(1).model_dump_json())
    r = api.sweep(str(model), "loader.num_workers=0,2", steps=6, warmup=2, jobs=1,
                  ledger=str(ledger))
    assert r.measured == {0: [40.0], 2: [30.0, 32.0], 1: [50.0]}
    with pytest.raises(StepsimError, match="no records that set host.threads alone"):
        ledger_points(ledger, "host.threads")
