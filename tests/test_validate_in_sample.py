"""``validate`` of the calibration setting itself is in-sample: scored apart in the ledger."""
from __future__ import annotations

from stepsim import api
from stepsim.scenarios.validate import read_ledger, summarize_ledger


def test_the_calibration_setting_is_in_sample(cpu_run_nw1, cpu_run_nw0, tmp_path):
    model = api.calibrate(cpu_run_nw1).model
    ledger = tmp_path / "ledger.jsonl"
    # no operation, and one that leaves the model as it is: the calibration setting
    same = api.validate(model, cpu_run_nw1, draws=0, ledger=ledger)
    also = api.validate(model, cpu_run_nw1, set={"loader.num_workers": 1}, draws=0,
                        ledger=ledger)
    other = api.validate(model, cpu_run_nw0, set={"loader.num_workers": 0}, draws=0,
                         ledger=ledger)
    assert same.record.in_sample and also.record.in_sample
    assert not other.record.in_sample
    summary = summarize_ledger(read_ledger(ledger))
    assert (summary.n, summary.n_in_sample) == (1, 2)
