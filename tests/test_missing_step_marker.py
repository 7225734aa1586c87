"""A ProfilerStep#N missing between its neighbours (two steps merged into one) is said in a
warning."""
from __future__ import annotations

import json

from stepsim.calibration.events import build_table
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import load_trace


def _steps(tmp_path, numbers):
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
           "ts": 1000.0 * n, "dur": 900.0} for n in numbers]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev}))
    return find_steps(build_table(load_trace(tmp_path / "t.json")))


def test_a_missing_profiler_step_is_warned(tmp_path):
    got = _steps(tmp_path, [1, 2, 3, 5, 6])
    assert [s.number for s in got] == [1, 2, 3, 5, 6]
    assert any("1 ProfilerStep marker(s) missing" in w and "(step 4)" in w for w in got.warnings)
    assert not any("missing" in w for w in _steps(tmp_path, [1, 2, 3, 4]).warnings)
