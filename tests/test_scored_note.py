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


def test_a_difference_within_the_steps_scatter_is_not_called_outside_load():
    """−0.1 % between the profiled and unprofiled means, the steps scattering ±2 ms: within
    two standard errors of the difference, said as no change (it read as outside load)."""
    from stepsim.calibration.run_drift import drift_noise

    scored = [40_000.0 + (2_000.0 if i % 2 else -2_000.0) for i in range(20)]
    traced = [39_960.0 + (2_000.0 if i % 2 else -2_000.0) for i in range(8)]
    noise = drift_noise(scored, traced)
    # closed form: s² = 2000² × n/(n−1) for ±2000 alternating, 2 √(s²_a/20 + s²_p/8) / 40 ms
    want = 2 * (2_000.0 ** 2 * 20 / 19 / 20 + 2_000.0 ** 2 * 8 / 7 / 8) ** 0.5 / 40_000.0
    assert abs(noise - want) < 1e-12
    note = scored_note(20, 40_000.0, 39_960.0, noise)
    assert "-0.1 % of that (within the steps' own scatter" in note
    assert "outside load" not in note
    # past the scatter, the sign's wording stands
    assert "outside load" in scored_note(20, 40_000.0, 39_960.0 * 0.9, noise)
    assert drift_noise([40_000.0], [39_000.0]) == 0.0      # one step each: no spread to read
