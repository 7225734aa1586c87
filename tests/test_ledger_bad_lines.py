"""A ledger line that is not a record (cut short, hand-edited, another file's line) is left
out and counted in one warning by the verbs that read a ledger (``ledger``, ``report``,
``sweep --ledger``) and by ``validate --ledger``, which appends after it and keeps it as it
is; a ledger none of whose lines is a record is still refused. Before: one bad line refused
the whole ledger, and ``validate`` failed after its whole prediction."""
from __future__ import annotations

import json

import pytest

from stepsim.cli import main
from stepsim.scenarios.validate import append_ledger, ledger_line, read_ledger
from stepsim.simcore.errors import InputError
from tests.test_ledger import _rec


def _mixed(path):
    path.write_bytes(b"garbage\n" + ledger_line(_rec(5.0, True)) + b'{"label": "x"}\n'
                     + ledger_line(_rec(-3.0, False)))
    return path


def test_bad_lines_are_skipped_and_counted(tmp_path):
    p = _mixed(tmp_path / "l.jsonl")
    said: list[str] = []
    recs = read_ledger(p, said)
    assert [r.error_pct for r in recs] == [5.0, -3.0]
    assert len(said) == 1 and said[0].startswith(
        "l.jsonl: skipped 2 of 4 line(s) that are not ledger records (first: line 1;")
    with pytest.raises(InputError, match="line 1"):   # the strict reading is unchanged
        read_ledger(p)


def test_append_keeps_the_bad_lines_as_they_are(tmp_path):
    p = _mixed(tmp_path / "l.jsonl")
    before = p.read_bytes()
    said: list[str] = []
    append_ledger(p, _rec(1.0, None), said)
    assert p.read_bytes() == before + ledger_line(_rec(1.0, None)) and len(said) == 1


def test_no_record_at_all_is_refused(tmp_path):
    p = tmp_path / "l.jsonl"
    p.write_text('garbage\n{"a": 1}\n')
    with pytest.raises(InputError, match="line 1"):
        read_ledger(p, [])


def test_the_ledger_verb_warns_and_scores_what_is_left(tmp_path, capsys):
    p = _mixed(tmp_path / "l.jsonl")
    assert main(["ledger", str(p), "--json"]) == 0
    out = capsys.readouterr()
    assert "warning: l.jsonl: skipped 2 of 4 line(s)" in out.err
    assert json.loads(out.out)["summary"]["n"] == 2


def test_nan_strings_and_impossible_loads_are_not_records(tmp_path):
    """``"nan"``/``"inf"`` in a float field and a negative outside load cannot be right: the
    lines are skipped and counted, not scored (before: ``median |error| nan%``)."""
    good = json.loads(ledger_line(_rec(5.0, True)))
    lines = [good, {**good, "error_pct": "nan"}, {**good, "outside_load_slowdown": "inf"},
             {**good, "outside_load_slowdown": -0.5}]
    p = tmp_path / "l.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in lines))
    said: list[str] = []
    assert [r.error_pct for r in read_ledger(p, said)] == [5.0]
    assert len(said) == 1 and "skipped 3 of 4" in said[0]


def test_impossible_produce_cpu_is_dropped_and_counted(cpu_run_nw1, tmp_path, capsys):
    """Produce records whose CPU time is 300x their wall time cannot be right (more than the
    host's cores give): dropped and counted, the produce time inferred (first a traceback, then
    'threads_per_worker past its bound', the whole capture refused)."""
    import shutil

    run = tmp_path / "bad"
    shutil.copytree(cpu_run_nw1, run)
    data = json.loads((run / "sidecar.json").read_text())
    for r in data["produce"]:
        r["proc_cpu_us"] = r["wall_us"] * 300
    (run / "sidecar.json").write_text(json.dumps(data))
    assert main(["calibrate", str(run), "-o", str(tmp_path / "m.json")]) == 0
    err = capsys.readouterr().err
    n = len(data["produce"])
    assert f"dropped {n} of {n} 'produce' record(s) that cannot be right" in err, err
    assert "process CPU" in err and (tmp_path / "m.json").exists()
