"""A fix whose predicted speed-up is at most 1 is never offered as one (report/diagnose.py)."""
from stepsim.report.diagnose import _whatif_line
from stepsim.scenarios.diagnose import WhatIf


def test_a_slowdown_is_not_offered_as_a_fix():
    slow = _whatif_line(WhatIf("more_workers:workers=1", step_us=1064.0), base_us=1000.0)
    assert not slow.startswith("stepsim whatif") and "no fix" in slow and "0.94x" in slow
    fast = _whatif_line(WhatIf("more_workers:workers=2", step_us=800.0), base_us=1000.0)
    assert fast.startswith("stepsim whatif MODEL --fix more_workers:workers=2") and "1.25x" in fast


def test_the_json_marks_a_slowdown_as_not_offered():
    """``diagnose --json`` says what the text says: a what-if predicting a speed-up of at most
    1 is not offered, and is not among the document's ``fixes``."""
    from types import SimpleNamespace

    from stepsim.report.diagnose import diagnosis_dict
    from stepsim.scenarios.diagnose import Diagnosis, Finding

    base = SimpleNamespace(mean_step_us=1000.0, p10_step_us=None, p90_step_us=None)
    whatifs = [WhatIf("more_workers:workers=1", step_us=1064.0),
               WhatIf("prefetch_factor:prefetch_factor=4", step_us=1000.0),
               WhatIf("more_workers:workers=2", step_us=800.0),
               WhatIf("cuda_graphs", note="does not apply")]
    d = Diagnosis("m", base, 0.5, "test", [Finding("gaps", "input", [], whatifs, "input")])
    doc = diagnosis_dict(d)
    got = [(w["fix"], w["speedup"], w["offered"]) for w in doc["findings"][0]["whatifs"]]
    assert got == [("more_workers:workers=1", 1000.0 / 1064.0, False),
                   ("prefetch_factor:prefetch_factor=4", 1.0, False),
                   ("more_workers:workers=2", 1.25, True), ("cuda_graphs", None, False)]
    assert doc["fixes"] == ["more_workers:workers=2"]
