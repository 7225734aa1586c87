"""`stepsim ledger` with fewer than 3 scored records says the coverage and the bottleneck
agreement as counts ("1 of 1"), not percentages ("100%" of one record reads as a rate)."""
from __future__ import annotations

import pytest

from stepsim.report.validation import print_ledger, share_text
from stepsim.scenarios.validate import summarize_ledger
from tests.test_ledger import _rec


@pytest.mark.parametrize("fraction,n,said", [
    (1.0, 1, "1 of 1"), (0.5, 2, "1 of 2"), (0.0, 2, "0 of 2"),
    (2 / 3, 3, "67% of 3"), (0.8, 5, "80% of 5")])
def test_share_text(fraction, n, said):
    assert share_text(fraction, n) == said


@pytest.mark.parametrize("k,counted", [(1, True), (2, True), (3, False)])
def test_ledger_of_few_records_gives_counts(k, counted, capsys):
    records = [_rec(5.0, True, True).model_copy(update={"p10_us": 95.0, "p50_us": 105.0,
                                                        "p90_us": 115.0}) for _ in range(k)]
    print_ledger(records, summarize_ledger(records))
    text = " ".join(capsys.readouterr().out.split())
    assert (f"interval coverage: {k} of {k} (" in text) == counted
    assert (f"bottleneck agreement: {k} of {k}" in text) == counted
    assert ("100%" in text) == (not counted)
