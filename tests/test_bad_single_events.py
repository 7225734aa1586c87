"""One bad event (no ts, ts 1e300, not an object) is dropped and counted in a warning; the
trace is refused only when no event is left (house rule)."""
from __future__ import annotations

import json

import pytest

from stepsim.calibration.events import build_table
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import load_trace
from stepsim.simcore.errors import InputError


def _trace(tmp_path, bad):
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
           "ts": 1000.0 * n, "dur": 900.0} for n in range(1, 6)]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": ev[:2] + bad + ev[2:]}))
    return tmp_path / "t.json"


@pytest.mark.parametrize("bad", [[42], [{"ph": "X", "name": "k", "dur": 1}],
                                 [{"ph": "X", "name": "k", "ts": 1e300, "dur": 1}]])
def test_a_bad_event_is_dropped_and_counted(tmp_path, bad):
    raw = load_trace(_trace(tmp_path, bad))
    assert any("1 event(s) whose ts cannot be right were dropped" in w for w in raw.warnings)
    assert len(find_steps(build_table(raw))) == 5


def test_a_trace_of_only_bad_events_is_refused(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": [42, 43]}))
    with pytest.raises(InputError, match="expected an object"):
        load_trace(tmp_path / "t.json")
