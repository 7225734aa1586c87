"""What a baseline line holds that its number does not say (report.baseline_notes): the two
views of the bottleneck where they differ (fresh11 bug 6) and the capture's outside load
(fresh11 bug 9, models.load_bound.capture_load_phrase)."""
from __future__ import annotations

import pytest

from stepsim.models.load_bound import capture_load_phrase
from stepsim.report.baseline_notes import baseline_notes, bottleneck_views
from stepsim.report.planner import print_whatif
from stepsim.scenarios.predict import predict
from tests.test_host_physics import host_model


def test_input_named_by_next_while_host_compute_is_the_largest_share():
    """num_workers=0, the batch made in next() for 15 ms of a 100 ms step: the rules name the
    input pipeline (10 % or more in next()), the critical path is 85 % host compute; the line
    names both, with the shares (closed form: 15 / 100 and 85 / 100)."""
    p = predict(host_model(0, 2, 15.0, 85.0), [], steps=60, seed=0)
    assert p.bottleneck == "input"
    line = bottleneck_views(p)
    assert "input pipeline (DataLoader)" in line and "10 % or more in next()" in line
    assert "(15 % of the critical path)" in line and "host compute" in line and "(85 %)" in line
    assert "stepsim ceiling" in line
    # where the input is also the largest share, the views agree: nothing said
    assert bottleneck_views(predict(host_model(0, 2, 85.0, 15.0), [], steps=60, seed=0)) == ""


def _loaded(notes: dict):
    m = host_model(0, 2, 15.0, 85.0)
    return m.model_copy(update={"meta": m.meta.model_copy(update={"notes": notes})})


@pytest.mark.parametrize("notes,said", [
    ({"capture_preempted": 0.98}, "preempted in 98 % of its context switches"),
    ({"outside_load_held": 0.5}, "about 2.0x slower than the machine alone"),
    ({"outside_load_held": 0.95}, None),      # 1/0.95 − 1 = 5 %: under LOAD_WARN
    ({}, None)])
def test_the_baseline_says_the_capture_load_it_holds(notes, said, capsys):
    m = _loaded(notes)
    phrase = capture_load_phrase(m)
    if said:
        assert said in phrase and "this baseline holds that load" in phrase
    else:
        assert phrase == ""
    base = predict(m, [], steps=60, seed=0)
    assert any(said in x for x in baseline_notes(base)) if said else \
        not any("outside load" in x for x in baseline_notes(base))
    print_whatif(base, base)
    out = " ".join(capsys.readouterr().out.split())
    assert (said in out) if said else "outside load" not in out
