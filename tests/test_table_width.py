"""Tables on a pipe honour COLUMNS and never cut a cell's text (report/tables.py console)."""
from stepsim.report.planner import print_validation
from tests.test_ledger import _rec


def _lines(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    rec = _rec(1.0, False).model_copy(update={
        "scenario": "set loader.num_workers=2", "label": "set loader.num_workers=2",
        "predicted_bottleneck": "host_compute", "measured_bottleneck": "cpu_cores",
        "bottleneck_agrees": False})
    print_validation([rec])
    return capsys.readouterr().out


def test_columns_honoured_and_no_cell_cut(capsys, monkeypatch):
    assert "…" not in _lines(capsys, monkeypatch, 60)   # folded when narrow, never cut
    for columns in (90, 200):
        out = _lines(capsys, monkeypatch, columns)
        words = out.split()
        for word in ("host_compute", "cpu_cores", "inside", "differ"):
            assert word in words, (columns, out)
    wide = _lines(capsys, monkeypatch, 200)
    assert max(len(l) for l in wide.splitlines()) > 110


def test_the_whatif_scope_note_is_printed_once(capsys, monkeypatch):
    """Every validated setting's line said "(whatif's and diagnose's are of one run's mean
    step)" (a fresh user, 2026-12-05): it is said once under the lines now."""
    monkeypatch.setenv("COLUMNS", "120")
    recs = [_rec(1.0, False).model_copy(update={"label": f"nw{k}", "width_sources_pct": {},
                                                "p10_us": 9e4, "p90_us": 1.1e5, "runs": 4})
            for k in range(3)]
    assert all(r.p10_us is not None for r in recs)
    print_validation(recs, scope=True)
    out = capsys.readouterr().out
    assert out.count("P10-P90 of") == 3 and out.count("one run's mean step)") == 1


def test_no_whatif_scope_note_after_one_run_intervals(capsys, monkeypatch):
    """After validate's own interval of one run's mean step, "(whatif's and diagnose's
    intervals are of one run's mean step)" read as a correction of it (newuser3, 2026-12-06):
    it is said only beside a pooled interval."""
    monkeypatch.setenv("COLUMNS", "120")
    rec = _rec(1.0, False).model_copy(update={"label": "one", "width_sources_pct": {},
                                              "p10_us": 9e4, "p90_us": 1.1e5, "runs": 1})
    print_validation([rec], scope=True)
    out = capsys.readouterr().out
    assert "P10-P90 of one run's mean step" in out and "whatif's and diagnose's" not in out
