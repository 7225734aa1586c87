"""``--draws 1`` is refused (breaker finding, 2026-12-05): one Monte Carlo draw was printed as
an interval, "P10-P90 of one run's mean step: 79.90 ms - 79.90 ms", beside a mean of 76.98 ms
outside it, and validate would score a miss against it."""
from __future__ import annotations

import pytest

from stepsim.limits import checked, count_problem
from tests.conftest import run_cli


def test_one_draw_is_no_interval():
    assert "no P10-P90" in count_problem("draws", 1)
    assert count_problem("draws", 0) is None and count_problem("draws", 2) is None
    with pytest.raises(ValueError):
        checked(draws=1)


def test_the_cli_refuses_one_draw_in_one_line(tmp_path):
    r = run_cli("diagnose", str(tmp_path / "m.json"), "--draws", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3 and "no P10-P90" in r.stderr, r.stderr
