"""``calibration.outside_load.cut_to_span``: one public cut of busy intervals to a span, read
by one process's outside load and by a multi-rank job's (``calibration.job_load``)."""
from __future__ import annotations

import numpy as np

from stepsim.calibration import job_load, outside_load
from stepsim.calibration.outside_load import BATCH, cut_to_span


def test_each_interval_is_cut_to_the_span_and_its_cpu_pro_rata():
    # rows: start µs, end µs, runnable share, CPU µs, kind
    a = np.array([[0.0, 100.0, 1.0, 80.0, BATCH],     # half inside: 40 µs of CPU
                  [120.0, 150.0, 0.5, 30.0, BATCH],   # wholly inside
                  [300.0, 400.0, 1.0, 50.0, BATCH],   # wholly after
                  [60.0, 60.0, 1.0, 0.0, BATCH]])     # no wall: dropped
    cut = cut_to_span(a.copy(), 50.0, 200.0)
    assert cut[:, :2].tolist() == [[50.0, 100.0], [120.0, 150.0]]
    assert cut[:, 3].tolist() == [40.0, 30.0]
    assert cut[:, 2].tolist() == [1.0, 0.5]


def test_one_function_serves_both_readers():
    assert job_load.cut_to_span is outside_load.cut_to_span
    assert not hasattr(outside_load, "_in_window")
