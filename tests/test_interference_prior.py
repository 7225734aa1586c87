"""The co-run interference prior without a probe (calibration.corun.INTERFERENCE_PRIOR,
INTERFERENCE_POINT): point 0.08, the median of what 10 demo sets' 0-worker runs implied
(0.091), drawn over 0-0.3, whose top is the sets' P90 (bench/zero_workers.py); the point is
not the range's middle, so the replay and every what-if's point prediction keep 0.08."""
from __future__ import annotations

import pytest

from stepsim.calibration.corun import INTERFERENCE_POINT, INTERFERENCE_PRIOR, PRIOR_SD
from stepsim.calibration.sidecar_fit import interference_from_sidecar


def test_without_a_probe_the_point_is_the_measured_median_and_the_range_its_spread():
    host, sources, ranges, warn = interference_from_sidecar(None)
    assert host["interference"] == INTERFERENCE_POINT == 0.08
    assert host["interference_range"] == INTERFERENCE_PRIOR == (0.0, 0.3)
    assert host["interference"] < sum(INTERFERENCE_PRIOR) / 2       # not the middle
    assert sources["host.interference"] == "assumed"
    assert any("a prior of 0–0.3" in w for w in warn)


def test_the_probe_gate_stays_where_it_was():
    """A probe's slope is fitted where its standard error is at most 0.16 / sqrt(12) = 0.046,
    the former prior's sd: the wider prior is the spread between hours, and a probe whose slope
    has an error of 0.09 (three fits of one setting read 0.08 / 0.18 / 0.29) measures nothing."""
    assert PRIOR_SD == pytest.approx(0.0462, abs=1e-4)
