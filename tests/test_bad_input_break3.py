"""Bad or outsized input found by the third breaker (2026-12-05): each refused in one line
(exit 2, no traceback), dropped and counted, or bounded in time."""
from __future__ import annotations

from stepsim.scenarios.validate import ledger_line
from tests.test_ledger import _rec
from tests.test_quirks import cli


def test_a_long_ledger_shows_its_latest_rows_and_scores_them_all(tmp_path):
    """A 200,000-line ledger printed every record as a table row (about 2 ms each: 200 s);
    the table now holds the latest 100, a line says how many are not shown, and the score
    counts every record."""
    recs = [_rec(float(i % 7), True).model_copy(update={"label": f"run{i}"})
            for i in range(250)]
    p = tmp_path / "l.jsonl"
    p.write_bytes(b"".join(ledger_line(r) for r in recs))
    rc, err, out = cli("ledger", p)
    assert rc == 0, err
    assert "150 earlier record(s) not shown" in out and "counts all 250" in out
    assert "run149 " not in out and "run150 " in out and "run249 " in out
    assert "250 out-of-sample predictions" in out
