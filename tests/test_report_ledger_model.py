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


def _marked(label: str, **kw) -> LedgerRecord:
    return _rec("m").model_copy(update={"label": label, **kw})


def test_rows_the_score_leaves_out_are_marked_as_the_ledger_marks_them(capsys):
    """The calibration setting's replay (in-sample) and a run re-measured under outside load
    and slower than predicted are left out of the score: `report`'s validation table marked
    neither (a reader took the replay's row for a scored prediction); both it and `stepsim
    ledger` now mark them (* and ‡, as the demo's table does) with a legend, and a scored row
    (a loaded run faster than predicted stays in the score) is not marked."""
    from stepsim.report.validation import print_ledger
    from stepsim.scenarios.validate import summarize_ledger

    recs = [_marked("demo num_workers=1", in_sample=True),
            _marked("demo num_workers=3", outside_load_slowdown=0.5),             # −9.1 %
            _marked("demo num_workers=4", outside_load_slowdown=0.5, error_pct=+4.0,
                    median_error_pct=+4.0),
            _marked("demo num_workers=8")]
    html = _validation(SimpleNamespace(ledger=recs, ledger_summary=summarize_ledger(recs),
                                       sweep_png=None))
    assert "<td class='text'>demo num_workers=1 *</td>" in html
    assert "<td class='text'>demo num_workers=3 ‡</td>" in html
    assert "<td class='text'>demo num_workers=4</td>" in html
    assert "<td class='text'>demo num_workers=8</td>" in html
    assert "* in-sample: the calibration setting" in html
    assert "‡ re-measured under outside" in html
    assert "1 in-sample record(s)" in html
    print_ledger(recs, summarize_ledger(recs))
    out = capsys.readouterr().out
    assert "num_workers=1 *" in out and "num_workers=3 ‡" in out   # the label may wrap
    assert "num_workers=4 ‡" not in out and "num_workers=8 *" not in out
    assert "* in-sample: the calibration setting's own runs" in out
    # nothing set apart: no marks, no legend
    html = _validation(SimpleNamespace(ledger=recs[3:], ledger_summary=None, sweep_png=None))
    assert "in-sample:" not in html and "‡" not in html
