"""A warning whose finding no interval covers ranks first among the unsized ones, by its
record (``WarningRecord.uncovered``), not by its text: fresh8's calibrate (2026-12-07, a 2-rank
gloo job on 2 cores, 2 intra-op threads a rank) printed 11 unsized warnings with the
oversubscribed ranks' threads ninth, after "profiler overhead not measurable"."""
from __future__ import annotations

from stepsim.models.rank_threads import rank_threads_warning
from stepsim.models.warning_record import WarningRecord, said
from stepsim.warning_order import lines, ranked

STEPS_US = [181e3, 190e3, 198e3, 200e3, 210e3, 349e3, 486e3]
"""fresh8's capture: median 198 ms, slowest 486 ms."""
UNSIZED = [f"unsized finding number {i}: read from the capture, changes what it changes"
           for i in range(8)]


def test_the_oversubscribed_ranks_warning_is_first_of_the_unsized():
    w = rank_threads_warning(["vm", "vm"], 2, 2, 1, STEPS_US)
    assert w is not None and "no interval covers it" in w
    sized = said("a sized finding: the window ran slow", "window_speed", effect_us=-5e3)
    noted = said("a prior that widens only what-ifs", "prior:x", noted=True)
    out = ranked([noted, *UNSIZED, w, "the last unsized one", sized])
    assert [r.text for r in out] == [sized, w, *UNSIZED, "the last unsized one", noted]
    assert lines(out)[0].startswith("warning: [step -5.0 ms]")


def test_uncovered_comes_from_the_record_not_the_text():
    """The same words without the record keep their place; a record with other words that is
    uncovered goes first; each group keeps its own order."""
    words = "x: no interval covers it, and it moves the step by a lot, said in plain text"
    late = said("a finding the model does not simulate, said otherwise", "k", uncovered=True)
    out = [r.text for r in ranked([*UNSIZED[:2], words, late, UNSIZED[2]])]
    assert out == [late, *UNSIZED[:2], words, UNSIZED[2]]
    assert WarningRecord.model_validate({"text": "t"}).uncovered is False   # old model files
