"""``stepsim ledger`` says the records' left-out first steps in one line, not validate's
paragraph again for each (issue 10, fresh13 2026-12-07: its ledger of 4 records repeated 3
start-up paragraphs after the table)."""
from pathlib import Path

from tests.test_quirks import cli

LEDGER = Path(__file__).parent / "data" / "fresh13_ledger.jsonl"


def test_ledger_says_the_startups_once():
    rc, _, out = cli("ledger", str(LEDGER))
    assert rc == 0
    assert "3 records' first step (a multi-process DataLoader's start-up) left out" in out
    assert "its next() waited for no start-up" not in out
    assert "median |error| 10.6%" in out
