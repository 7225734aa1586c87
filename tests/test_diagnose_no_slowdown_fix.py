"""A fix whose predicted speed-up is at most 1 is never offered as one (report/diagnose.py)."""
from stepsim.report.diagnose import _whatif_line
from stepsim.scenarios.diagnose import WhatIf


def test_a_slowdown_is_not_offered_as_a_fix():
    slow = _whatif_line(WhatIf("more_workers:workers=1", step_us=1064.0), base_us=1000.0)
    assert not slow.startswith("stepsim whatif") and "no fix" in slow and "0.94x" in slow
    fast = _whatif_line(WhatIf("more_workers:workers=2", step_us=800.0), base_us=1000.0)
    assert fast.startswith("stepsim whatif MODEL --fix more_workers:workers=2") and "1.25x" in fast
