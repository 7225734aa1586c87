"""Bad input on session 12's readings (break22, 2026-12-07): the baseline check's record of the
captures a model was calibrated on (``meta.notes.calibration_captures``,
calibration/capture_ids.py), on real runs (tests/data/probe0_runs)."""
from __future__ import annotations

import json
from pathlib import Path

from stepsim.calibration.capture_ids import CAPTURES_NOTE, calibration_note, capture_ids
from tests.conftest import run_cli


def _without_id(src: Path, dst: Path) -> Path:
    """``src``'s capture folder copied to ``dst`` with its sidecar's ``iter_start_us`` removed
    (a sidecar written before the field)."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    data = json.loads((dst / "sidecar.json").read_text())
    del data["iter_start_us"]
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def test_a_capture_without_an_id_is_not_scored_as_a_fresh_run(probe0_runs, tmp_path):
    """A capture whose sidecar names no id, calibrated with a replicate that does: the note
    held the replicate alone, so validate of the capture itself (a replay) was scored as a
    baseline check against "fresh runs the model was not calibrated on" (-4.2 %, break22).
    Now no note is written: every run of the setting is in-sample, as for a model from before
    the note."""
    cap = _without_id(probe0_runs / "nw1-r0", tmp_path / "r0")
    model, ledger = tmp_path / "m.json", tmp_path / "l.jsonl"
    r = run_cli("calibrate", str(cap), "--replicate", str(probe0_runs / "nw1-r1"), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert CAPTURES_NOTE not in json.loads(model.read_text())["meta"]["notes"]
    r = run_cli("validate", str(model), str(cap), "--draws", "0", "--steps", "20", "--quiet",
                "--ledger", str(ledger))
    assert r.returncode == 0, r.stderr
    rec = json.loads(ledger.read_text())
    assert (rec["in_sample"], rec["baseline_check"]) == (True, False)


def test_the_note_reads_the_sidecar_calibrate_was_given(probe0_runs, tmp_path):
    """``calibrate TRACE --sidecar S``, S not beside the trace: the note named the replicates
    alone (the capture's id read from beside the trace, where there is none)."""
    cap = probe0_runs / "nw1-r0"
    alone = tmp_path / "t"
    alone.mkdir()
    (alone / "trace.json.gz").write_bytes((cap / "trace.json.gz").read_bytes())
    rep = probe0_runs / "nw1-r1"
    note = calibration_note(alone / "trace.json.gz", cap / "sidecar.json", [rep])
    assert note is not None and set(note.split(",")) == capture_ids([cap, rep])
    assert calibration_note(alone / "trace.json.gz", None, [rep]) is None
    assert calibration_note(cap, None, [rep]) == note
