"""report --ledger: a ledger may hold other models' validations, so each row of the
validation table names the model it scores."""
from __future__ import annotations

from types import SimpleNamespace

from stepsim.report.html import _validation
from stepsim.scenarios.validate import LedgerRecord


def _rec(model: str) -> LedgerRecord:
    return LedgerRecord(time="2026-12-02T00:00:00Z", label="set loader.num_workers=2",
                        model=model, scenario="set loader.num_workers=2", traces=["t"],
                        steps_measured=5, predicted_mean_us=1e5, predicted_median_us=1e5,
                        p10_us=None, p50_us=None, p90_us=None, measured_mean_us=1.1e5,
                        measured_median_us=1.1e5, error_pct=-9.1, median_error_pct=-9.1,
                        inside=None, predicted_bottleneck="input", measured_bottleneck=None,
                        bottleneck_agrees=None)


def test_each_validation_row_names_its_model():
    html = _validation(SimpleNamespace(ledger=[_rec("q_w0r"), _rec("w0")], ledger_summary=None,
                                       sweep_png=None))
    assert "<th class='text'>model</th>" in html
    assert "<td class='text'>q_w0r</td>" in html and "<td class='text'>w0</td>" in html
