"""A re-measured run under outside load (issue 10): its ledger record carries the slowdown
(``outside_load_slowdown``), and ``stepsim ledger`` keeps it out of the headline error,
coverage and agreement, counting it on its own line; ledgers written before the field read as
before (every record scored)."""
from __future__ import annotations

import json

import pytest

from stepsim.fit import calibrate
from stepsim.models.load_bound import LOAD_WARN
from stepsim.models.params import save_model
from stepsim.scenarios.predict import Prediction
from stepsim.scenarios.validate import (append_ledger, ledger_line, read_ledger,
                                        summarize_ledger, validate)
from tests.conftest import run_cli
from tests.test_outside_load import _cpu_times

QUICK = ("--steps", "10", "--warmup", "3", "--draws", "4", "--jobs", "1")


def _pred(mean_us: float) -> Prediction:
    return Prediction("set loader.num_workers=2", mean_us, mean_us, "input",
                      "input pipeline (DataLoader)", None, 10, 3, 0)


def _records(tmp_path):
    """A ledger written by the code: a quiet run 0 % off, a loaded one (2.5x) measured 60 % slower than predicted, one
    without a sidecar (load not measured) 10 % off, one just under the bound 20 % off."""
    path = tmp_path / "l.jsonl"
    for label, measured_us, load in (("quiet", 100.0, 0.01), ("loaded", 250.0, 1.5),
                                     ("no sidecar", 111.1, None),
                                     ("at bound", 125.0, LOAD_WARN - 1e-6)):
        append_ledger(path, validate(_pred(100.0), [measured_us] * 4, "input", label,
                                     outside_load_slowdown=load))
    return path


def test_summary_leaves_loaded_records_out_of_the_score(tmp_path):
    records = read_ledger(_records(tmp_path))
    assert [r.outside_load for r in records] == [False, True, False, False]
    s = summarize_ledger(records)
    assert (s.n, s.n_outside_load, s.n_in_sample) == (3, 1, 0)
    assert s.max_abs_error_pct == pytest.approx(20.0)          # 60 % of the loaded one: apart
    assert s.median_abs_error_pct == pytest.approx(10.0, abs=0.01)
    assert s.max_outside_load_slowdown == pytest.approx(1.5)
    assert s.outside_load_median_abs_error_pct == pytest.approx(60.0)
    assert s.n_bottlenecks == 3


def test_a_ledger_written_before_the_field_still_reads(tmp_path):
    """Old lines (no ``outside_load_slowdown``) read as unmeasured and are all scored."""
    new = _records(tmp_path)
    old = tmp_path / "old.jsonl"
    lines = [json.loads(x) for x in new.read_text().splitlines()]
    assert all("outside_load_slowdown" in d for d in lines)
    old.write_text("".join(json.dumps({k: v for k, v in d.items()
                                       if k != "outside_load_slowdown"}) + "\n" for d in lines))
    records = read_ledger(old)
    assert all(r.outside_load_slowdown is None and not r.outside_load for r in records)
    s = summarize_ledger(records)
    assert (s.n, s.n_outside_load, s.max_outside_load_slowdown) == (4, 0, None)
    assert s.max_abs_error_pct == pytest.approx(60.0)
    r = run_cli("ledger", str(old))
    assert r.returncode == 0, r.stderr
    assert "outside load" not in r.stdout and "4 out-of-sample predictions" in r.stdout
    assert ledger_line(records[0]).count(b"outside_load_slowdown") == 1   # rewritten: with it


def test_validate_records_the_load_and_ledger_says_it_apart(cpu_run_nw0, cpu_run_nw1,
                                                             tmp_path):
    """Real captures: the quiet copy and a copy whose CPU times say 40 % held (2.5x slower),
    validated by the CLI into one ledger (out of sample: the model is of num_workers=0);
    ``stepsim ledger`` scores the quiet one only."""
    quiet = _cpu_times(cpu_run_nw1, tmp_path / "quiet", 1.0)
    loaded = _cpu_times(cpu_run_nw1, tmp_path / "loaded", 0.4)
    model = tmp_path / "m.json"
    # the model's host four times as fast as the run's, so both runs measure slower than
    # predicted whatever this machine's speed did between the captures (a loaded machine has
    # moved it by 2x between two fixtures): the case the load can explain
    base = calibrate(cpu_run_nw0)
    save_model(base.model_copy(update={"host": base.host.model_copy(
        update={"cpu_scale": 0.25 * base.host.cpu_scale})}), model)
    ledger = tmp_path / "ledger.jsonl"
    for label, run in (("quiet", quiet), ("loaded", loaded)):
        r = run_cli("validate", str(model), str(run / "trace.json.gz"), *QUICK, "--ledger",
                    str(ledger), "--label", label, "--set", "loader.num_workers=1")
        assert r.returncode == 0, r.stderr
    assert "scores it apart" in r.stdout and "2.5x slower" in r.stdout
    recs = {r.label: r for r in read_ledger(ledger)}
    assert recs["quiet"].outside_load_slowdown == pytest.approx(0.0, abs=0.02)
    assert recs["loaded"].outside_load_slowdown == pytest.approx(1.5, abs=0.05)
    assert recs["loaded"].error_pct < 0      # measured slower than predicted: set apart
    doc = json.loads(run_cli("ledger", str(ledger), "--json").stdout)
    s = doc["summary"]
    assert (s["n"], s["n_outside_load"]) == (1, 1)
    assert s["max_abs_error_pct"] == pytest.approx(abs(recs["quiet"].error_pct))
    assert s["n_intervals"] == 1
    text = run_cli("ledger", str(ledger)).stdout
    assert "1 record re-measured under outside load (up to 2.5x slower" in text
    assert "1 out-of-sample prediction " in text
