"""A ledger line whose numbers cannot be right (a negative or 30-days-plus step time, no
measured step, P10 above P90, an error that is not what its own predicted and measured times
give) is dropped and counted like a line that is not a record; before, each was scored (a
hand-edited ``error_pct`` of -1 % for a prediction 150 % off counted as a 1 % miss)."""
from __future__ import annotations

import json

import pytest

from stepsim.cli import main
from stepsim.scenarios.validate import ledger_line, read_ledger
from tests.test_ledger import _rec

BAD = [
    {"steps_measured": 0},
    {"runs": 0},
    {"measured_mean_us": -1.0},
    {"measured_median_us": 0.0},
    {"predicted_mean_us": -1.0},
    {"predicted_median_us": 1e300},
    {"p10_us": 90.0, "p50_us": 100.0, "p90_us": 80.0},
    {"error_pct": -1.0},
    {"median_error_pct": 42.0},
    {"startup_us": -5.0},
    {"startup_runs": -1},
]


@pytest.mark.parametrize("edit", BAD, ids=lambda e: ",".join(e))
def test_a_record_that_cannot_be_right_is_dropped_and_counted(tmp_path, edit):
    good = ledger_line(_rec(5.0, True))
    bad = json.loads(ledger_line(_rec(3.0, True)))
    bad.update(edit)
    p = tmp_path / "l.jsonl"
    p.write_bytes(good + json.dumps(bad).encode() + b"\n")
    said: list[str] = []
    assert [r.error_pct for r in read_ledger(p, said)] == [5.0]
    assert len(said) == 1 and "skipped 1 of 2 line(s)" in said[0]
    assert f"not a ledger record: {next(iter(edit))}" in said[0] or "P10" not in said[0]


def test_consistent_quantiles_and_errors_still_read(tmp_path):
    rec = json.loads(ledger_line(_rec(-20.0, False)))
    rec.update(p10_us=70.0, p50_us=80.0, p90_us=80.0)
    p = tmp_path / "l.jsonl"
    p.write_bytes(json.dumps(rec).encode() + b"\n")
    assert read_ledger(p)[0].p90_us == 80.0


def test_the_ledger_verb_scores_only_the_sound_records(tmp_path, capsys):
    p = tmp_path / "l.jsonl"
    edited = json.loads(ledger_line(_rec(150.0, False)))
    edited["error_pct"] = -1.0
    p.write_bytes(ledger_line(_rec(4.0, True)) + json.dumps(edited).encode() + b"\n")
    assert main(["ledger", str(p)]) == 0
    cap = capsys.readouterr()
    assert "skipped 1 of 2 line(s)" in cap.err and "error_pct -1 is not what" in cap.err
    assert "median |error| 4.0%" in cap.out
