"""ThreadRows.covering (calibration.gpu_kinds): the latest-starting row of a thread that covers
an instant, the first in the rows' order on a tie; held to the brute-force rule on random
nested, overlapping and tied intervals, with few and many rows before the answer."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.calibration.gpu_kinds import _SCAN, ThreadRows


def _brute(ts, end, rows, t):
    m = (ts[rows] <= t) & (end[rows] >= t)
    if not m.any():
        return None
    return int(rows[m][np.argmax(ts[rows][m])])


@pytest.mark.parametrize("seed", range(6))
def test_covering_is_the_brute_force_rule(seed):
    rng = np.random.default_rng(seed)
    n = 400
    ts = rng.integers(0, 2000, n)
    ts[rng.integers(0, n, 60)] = 700          # ties on a start
    dur = np.where(rng.random(n) < 0.1, rng.integers(500, 1500, n), rng.integers(0, 30, n))
    end = ts + dur
    pid = np.zeros(n, np.int64)
    tid = rng.integers(0, 2, n)
    table = SimpleNamespace(pid=pid, tid=tid, ts_ns=ts, end_ns=end)
    rows = np.sort(rng.choice(n, 300, replace=False))
    tr = ThreadRows(table, rows)
    for t in list(range(-5, 2100, 7)) + [700, 699, 701]:
        for th in (0, 1, 2):
            want = _brute(ts, end, rows[tid[rows] == th], t)
            assert tr.covering(0, th, t) == want, (t, th)


def test_a_long_row_far_back_is_found():
    # the covering row starts more than _SCAN rows before the instant's latest row
    n = _SCAN * 3
    ts = np.arange(n, dtype=np.int64) * 10
    end = ts + 2
    end[1] = 10_000
    table = SimpleNamespace(pid=np.zeros(n, np.int64), tid=np.zeros(n, np.int64), ts_ns=ts,
                            end_ns=end)
    tr = ThreadRows(table, np.arange(n))
    assert tr.covering(0, 0, ts[-1] + 5) == 1
    assert tr.covering(0, 0, ts[-1] + 1) == n - 1
    assert tr.covering(0, 0, 20_000) is None
