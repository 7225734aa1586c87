"""validate's note on the scored (unprofiled) steps beside the profiled ones words the
difference for its sign (fresh user, 2026-12-05): "profiled steps took 42.2 ms, -23.9 % of
that (the profiler's own cost, which only adds, ...)" blamed the profiler for steps that ran
faster under it; the profiler only adds, so slower unprofiled steps are the run changing."""
from stepsim.calibration.run_drift import scored_note


def test_faster_profiled_steps_do_not_blame_the_profiler():
    note = scored_note(20, 55_460.0, 42_200.0)
    assert "profiled steps took 42.2 ms, -23.9 % of that" in note
    assert "only adds, plus" not in note
    assert "the unprofiled steps ran slower: outside load" in note


def test_slower_profiled_steps_name_the_profilers_cost():
    note = scored_note(20, 40_000.0, 44_000.0)
    assert "+10.0 % of that (the profiler's own cost, which only adds, plus the run's drift" in note
