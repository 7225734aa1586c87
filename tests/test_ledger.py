"""Validation records and the JSON-lines ledger."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.scenarios.predict import predict
from stepsim.scenarios.validate import (LedgerRecord, append_ledger, bottlenecks_agree, read_ledger,
                                summarize_ledger, validate)
from stepsim.simcore.errors import InputError, ModelError
from tests.test_planner import SIM, cpu_model


@pytest.fixture(scope="module")
def pred():
    return predict(cpu_model(1, sources={"loader.produce": "assumed"}), intervals=8, **SIM)


def test_validate_numbers(pred):
    measured = [9_000.0, 11_000.0, 10_000.0, 30_000.0]
    r = validate(pred, measured, "input", label="nw1", traces=["a.json"], model_name="cpu",
                 time="2024-01-01T00:00:00+00:00")
    assert r.measured_mean_us == 15_000 and r.measured_median_us == 10_500
    assert r.error_pct == pytest.approx(100 * (pred.mean_step_us - 15_000) / 15_000)
    assert r.median_error_pct == pytest.approx(
        100 * (pred.median_step_us - 10_500) / 10_500)
    assert r.inside is (pred.p10_step_us <= 15_000 <= pred.p90_step_us)
    assert r.bottleneck_agrees is True and r.steps_measured == 4


def test_validate_inside_and_without_interval(pred):
    assert validate(pred, [pred.mean_step_us], None, "x").inside is True
    point = predict(cpu_model(1), **SIM)
    r = validate(point, [10_000.0], None, "x")
    assert r.inside is None and r.bottleneck_agrees is None and r.p10_us is None


def test_validate_rejects_bad_measurements(pred):
    for bad in ([], [0.0], [float("nan")]):
        with pytest.raises(ModelError):
            validate(pred, bad, None, "x")


@pytest.mark.parametrize("predicted, measured, agree", [
    ("input", "input", True), ("cpu_cores", "input", True), ("host_compute", "input", False),
    ("compute:gemm", "device", True), ("launch", "device", True), ("input", "device", False),
    ("host_compute", "host_compute", True), ("compute:gemm", "compute:conv", True),
    ("comm", "h2d", True), ("comm", "launch", False),
    ("cpu_cores", "cpu_cores", True), ("host_compute", "cpu_cores", False),
    ("input", "cpu_cores", False), ("launch", "cpu_cores", False), ("cpu_cores", "launch", False),
    ("cpu_cores", "compute", True), ("cpu_cores", "host_compute", True),
])
def test_bottleneck_agreement(predicted, measured, agree):
    assert bottlenecks_agree(predicted, measured) is agree


def _rec(err: float, inside: bool | None, agrees: bool | None = None) -> LedgerRecord:
    return LedgerRecord(
        time="t", label="l", model="m", scenario="s", traces=[], steps_measured=1,
        predicted_mean_us=100 + err, predicted_median_us=100, p10_us=None, p50_us=None,
        p90_us=None, measured_mean_us=100, measured_median_us=100, error_pct=err,
        median_error_pct=0, inside=inside, predicted_bottleneck="input",
        measured_bottleneck=None, bottleneck_agrees=agrees)


@settings(max_examples=25, deadline=None)
@given(errs=st.lists(st.floats(-80, 80), min_size=1, max_size=6),
       insides=st.lists(st.sampled_from([True, False, None]), min_size=6, max_size=6))
def test_ledger_round_trips(tmp_path_factory, errs, insides):
    path = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    recs = [_rec(e, i) for e, i in zip(errs, insides)]
    for r in recs:
        append_ledger(path, r)
    assert read_ledger(path) == recs
    s = summarize_ledger(recs)
    assert s.n == len(recs)
    assert s.max_abs_error_pct == pytest.approx(max(abs(e) for e in errs))
    iv = [i for i in insides[:len(errs)] if i is not None]
    assert s.n_intervals == len(iv)
    assert s.coverage == (sum(iv) / len(iv) if iv else None)


def test_ledger_round_trip_of_a_real_record(tmp_path, pred):
    path = tmp_path / "l.jsonl"
    r = validate(pred, [10_000.0, 10_500.0], "input", "nw1")
    append_ledger(path, r)
    append_ledger(path, r)
    assert read_ledger(path) == [r, r]
    s = summarize_ledger(read_ledger(path))
    assert s.bottleneck_agreement == 1.0 and s.n_bottlenecks == 2
    assert s.median_abs_error_pct == pytest.approx(abs(r.error_pct))


def test_summarize_empty():
    s = summarize_ledger([])
    assert s.n == 0 and s.median_abs_error_pct is None and s.coverage is None


def test_bad_ledger_names_the_line(tmp_path, pred):
    path = tmp_path / "l.jsonl"
    append_ledger(path, validate(pred, [10_000.0], None, "ok"))
    with path.open("a") as f:
        f.write('{"label": "broken"}\n')
    with pytest.raises(InputError, match="line 2"):
        read_ledger(path)
    with pytest.raises(InputError, match="line 2"):
        append_ledger(path, validate(pred, [10_000.0], None, "more"))
    path.write_text("not json\n")
    with pytest.raises(InputError, match="line 1.*|not JSON"):
        read_ledger(path)


def test_missing_ledger_is_empty_and_a_folder_is_an_error(tmp_path):
    assert read_ledger(tmp_path / "none.jsonl") == []
    with pytest.raises(InputError, match="directory"):
        read_ledger(tmp_path)


def test_in_sample_records_are_kept_apart_and_width_is_scored(pred):
    """The calibration setting's own record (a replay) never enters the score; the median
    P10–P90 width is reported in % of the prediction."""
    out = validate(pred, [pred.mean_step_us * 1.02], "input", "nw2")
    replay = validate(pred, [pred.mean_step_us * 0.5], "input", "nw1", in_sample=True)
    s = summarize_ledger([out, replay])
    assert s.n == 1 and s.n_in_sample == 1
    assert s.max_abs_error_pct == pytest.approx(abs(out.error_pct))
    width = 100 * (pred.p90_step_us - pred.p10_step_us) / pred.mean_step_us
    assert s.median_width_pct == pytest.approx(width) and out.width_pct == pytest.approx(width)
    assert summarize_ledger([replay]).n == 0


def test_ledger_sweep_of_one_value_says_two_are_needed(tmp_path):
    """A ledger whose one record sets the swept path gets a message saying a measured sweep
    needs two distinct values, not that no record sets it."""
    from stepsim.simcore.errors import StepsimError
    from stepsim.views import ledger_points

    ledger = tmp_path / "l.jsonl"
    append_ledger(ledger, _rec(1.0, None).model_copy(update={"scenario": "set loader.num_workers=2"}))
    with pytest.raises(StepsimError, match=r"loader.num_workers alone to 1 value \(2\): a "
                                           "measured sweep needs two distinct values"):
        ledger_points(ledger, "loader.num_workers")
    with pytest.raises(StepsimError, match="no records that set loader.pin_memory alone"):
        ledger_points(ledger, "loader.pin_memory")
