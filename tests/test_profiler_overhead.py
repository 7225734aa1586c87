"""The profiler-overhead factor in closed form, from sidecars written by hand."""
from __future__ import annotations

import math

import pytest

from stepsim.calibration.profiler_overhead import MEDIAN_SE, overhead_factor, rank_factors
from stepsim.calibration.sidecar import Sidecar
from tests.conftest import steps_in_turn


def _side(unprof_ms, prof_ms, warmup_ms=(), first_ms=500.0, on=True) -> Sidecar:
    """A sidecar whose steps are: a start-up step, the unprofiled ones, the profiler's
    warm-up ones (profiler on, not recorded), the profiled ones (main-thread CPU in ms; 1 ms of
    each in next(), which does not count)."""
    def row(ms, profiled, profiler_on):
        r = {"wall_us": ms * 1e3 + 5e3, "cpu_us": (ms + 1) * 1e3, "next_wall_us": 1e3,
             "next_cpu_us": 1e3, "profiled": profiled}
        if on:
            r["profiler_on"] = profiler_on
        return r
    steps = ([row(first_ms, False, False)] + [row(v, False, False) for v in unprof_ms]
             + [row(v, False, True) for v in warmup_ms] + [row(v, True, True) for v in prof_ms])
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                   "steps": steps})


def test_constant_steps_give_the_exact_ratio_and_no_spread():
    f = overhead_factor(_side([20.0] * 3, [25.0] * 4, warmup_ms=[90.0]))
    assert f.factor == pytest.approx(0.8) and f.half_log == 0.0
    assert (f.n_unprofiled, f.n_profiled) == (3, 4)
    assert (f.unprofiled_cpu_us, f.profiled_cpu_us) == (20e3, 25e3)
    assert (f.unprofiled_wall_us, f.profiled_wall_us) == (24e3, 29e3)   # 4 ms off-core each


def test_spread_gives_the_stated_interval():
    """Unprofiled CPU a·{1, e^d, e^−d}: median a, log sample variance d²; constant profiled
    steps: the log-factor's standard error is 1.2533·d/√3, the 80 % interval ±t(0.9, 2)·se,
    the uniform range's half-width that over 0.8."""
    from scipy.stats import t

    a, d = 20.0, 0.1
    f = overhead_factor(_side([a, a * math.exp(d), a * math.exp(-d)], [25.0] * 3))
    assert f.factor == pytest.approx(0.8)
    se = MEDIAN_SE * d / math.sqrt(3)
    assert f.half_log == pytest.approx(t.ppf(0.9, 2) * se / 0.8)
    assert "P10–P90" in f.describe() and "3 unprofiled" in f.describe()


def test_start_up_and_warm_up_steps_do_not_count():
    """The run's first step (start-up) and the profiler's warm-up steps change nothing."""
    base = overhead_factor(_side([20.0] * 3, [25.0] * 3))
    assert overhead_factor(_side([20.0] * 3, [25.0] * 3, warmup_ms=[300.0], first_ms=1.0)) == base


def test_a_sidecar_that_cannot_measure_it_gives_none():
    assert overhead_factor(_side([20.0] * 3, [25.0] * 3, on=False)) is None   # older sidecar
    assert overhead_factor(_side([20.0], [25.0] * 3)) is None                 # one unprofiled
    assert overhead_factor(_side([20.0] * 3, [25.0])) is None                 # one profiled
    assert overhead_factor(None) is None


def test_rank_factors_name_the_measured_and_warn_about_the_rest():
    warnings: list[str] = []
    fac, notes, half = rank_factors([0, 1], {0: _side([20.0] * 3, [25.0] * 3)}, warnings)
    assert fac == {0: pytest.approx(0.8), 1: 1.0} and half == 0.0
    assert notes["profiler_factor"] == "0:0.8000"
    assert notes["profiler_factor_source"].startswith("measured")
    assert any(w.startswith("rank(s) 1:") for w in warnings)
    assert any(w.startswith("profiler overhead (measured)") and "rank 0: 0.800" in w
               for w in warnings)
    assert rank_factors([0], {}, []) == ({0: 1.0}, {}, 0.0)


def _with_produce(side: Sidecar, window_ms: float, rest_ms: float) -> Sidecar:
    """``side`` with steps 100 ms apart from t = 0 and, on the main thread (num_workers=0), 4
    batches of ``window_ms`` of CPU ending inside the profiled steps and 4 of ``rest_ms``
    before them: the window's speed against the whole run is window ÷ median(all)."""
    data = side.model_dump()
    for i, s in enumerate(data["steps"]):
        s["t_start_us"] = i * 1e5
    prof = [i for i, s in enumerate(data["steps"]) if s["profiled"]]
    lo = prof[0] * 1e5
    batch = lambda t, ms: {"worker": -1, "pid": 1, "seq": 0, "wall_us": ms * 1e3,
                           "cpu_us": ms * 1e3, "t_end_us": t}
    data["produce"] = ([batch(lo + 1e3 + k, window_ms) for k in range(4)]
                       + [batch(2e4 + k, rest_ms) for k in range(4)]
                       + [batch(3e4 + k, rest_ms) for k in range(1)])
    return Sidecar.model_validate(data)


def test_step_factor_takes_the_windows_drift_back_out():
    """Profiled steps 25 ms against 20 ms unprofiled (f = 0.8); 4 batches in the window at
    12 ms and 5 outside it at 10 ms (mean over the run 98/9 ms: s = 12 · 9/98): p = f·s, so
    the step (× p, then × 1/s with every duration) ends at 0.8 = its unprofiled CPU time."""
    from stepsim.calibration.host_noise import window_speed
    from stepsim.calibration.profiler_overhead import step_factor

    side = _with_produce(_side([20.0] * 5, [25.0] * 4), 12.0, 10.0)
    want = 12.0 * 9 / (4 * 12.0 + 5 * 10.0)
    assert window_speed(side) == pytest.approx(want)
    p, f, s = step_factor(side)
    assert (f.factor, s) == (pytest.approx(0.8), pytest.approx(want))
    assert p == pytest.approx(0.8 * want)
    # without produce the window's speed is not measured: p = f
    assert step_factor(_side([20.0] * 5, [25.0] * 4))[0] == pytest.approx(0.8)
    # torch's intra-op threads: the main thread's ratio is not the step's
    team = _side([20.0] * 5, [25.0] * 4).model_copy(update={"torch_num_threads": 2})
    assert step_factor(team) is None
    assert step_factor(_side([20.0] * 5, [25.0] * 4, on=False)) is None


@pytest.mark.parametrize("spiked", [False, True])
def test_a_cpu_captures_step_is_its_unprofiled_cpu_and_the_replay_its_profiled(
        cpu_run_nw1, tmp_path, spiked):
    """A real capture: the model's training step is the profiled window's × p (the old
    model kept the profiled one, p = 1), and the replay of the capture gets it back; also
    with 200 ms of system CPU added to one profiled step (edited), so the path of a window
    with a spike is taken whatever the capture drew."""
    from stepsim.fit import calibrate
    from stepsim.calibration.profiler_overhead import step_factor
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.models.host_speed import at_capture_speed

    from stepsim.calibration.page_faults import refault_fit

    run = cpu_run_nw1
    if spiked:
        from tests.test_sys_spikes import _spike_capture
        prof = [i for i, s in enumerate(load_sidecar(run / "sidecar.json").steps) if s.profiled]
        run = _spike_capture(run, tmp_path / "spiked", [prof[2]], 200_000.0)
    side = load_sidecar(run / "sidecar.json")
    factor = step_factor(side)
    if factor is None:   # e.g. a live capture's own system-CPU spikes in most profiled steps
        pytest.skip("this capture's sidecar cannot measure the profiler's factor (CI, "
                    "2026-12-06: its own spikes hit 5 steps; test_sys_spikes skips then too)")
    p = factor[0]
    rf = refault_fit(side)     # where the run re-faulted its step's memory: its fault-free part
    p *= rf.fault_free_us / rf.unprofiled_us if rf is not None else 1.0
    m = calibrate(run / "trace.json.gz", sidecar=run / "sidecar.json")
    step = m.host.ops[1]
    # a profiled step with a system-CPU spike (calibration.sys_spikes) is left out of the
    # step, and the replay gives the window its spikes back: the factor holds their share
    # (CI on 2026-12-05 drew one: 0.751 against 0.938 without it)
    calm = m.meta.notes.get("calm_window_ratio")
    assert (calm is not None) == any("calibration.sys_spikes" in w and "too few" not in w
                                     for w in m.meta.warnings)
    p *= calm or 1.0
    assert m.meta.notes["step_profiler_factor"] == pytest.approx(p)
    assert calm is not None or not spiked
    assert step.dur_us == pytest.approx(m.meta.notes["compute_mean_us"])
    replay = at_capture_speed(m).host.ops[1]
    assert replay.dur_us == pytest.approx(step.dur_us / p)
    assert replay.samples_us == pytest.approx([v / p for v in step.samples_us])


def test_a_team_step_says_the_profiler_cost_it_keeps():
    """On torch's intra-op threads the step factor is not measured (None) and the model keeps
    the profiled step: calibrate says so with the wall ratio (unprofiled 20 + 4 ms off-core
    against profiled 25 + 4: ×0.828); within 2 % it says nothing, one thread never (its step
    is scaled). Before, a user's 2-thread CNN kept its ×0.948 unsaid."""
    from stepsim.calibration.profiler_overhead import team_overhead_note

    team = _side([20.0] * 5, [25.0] * 4).model_copy(update={"torch_num_threads": 2})
    note = team_overhead_note(team)
    assert note is not None and "not removed" in note and "×0.828" in note
    assert "24.0 ms median over 5 unprofiled steps, 29.0 ms over 4 profiled" in note
    assert "the profiler's cost plus the host's drift" in note and "cannot make" not in note
    slow = _side([25.0] * 5, [20.0] * 4).model_copy(update={"torch_num_threads": 2})
    note = team_overhead_note(slow)   # unprofiled slower: not the profiler's cost
    assert "×1.208" in note and "cannot make" in note and "profiler's cost plus" not in note
    assert "after=N" in note
    near = _side([20.0] * 5, [20.2] * 4).model_copy(update={"torch_num_threads": 2})
    assert team_overhead_note(near) is None
    assert team_overhead_note(_side([20.0] * 5, [25.0] * 4)) is None   # one thread: scaled
    assert team_overhead_note(None) is None


def test_calibrate_says_a_team_steps_profiler_cost(cpu_run_nw1, tmp_path):
    """The note reaches calibrate's warnings for a capture on 2 intra-op threads whose
    profiled steps ran 1.5× the unprofiled ones' wall outside next()."""
    import json
    import shutil

    from stepsim import api

    run = tmp_path / "run"
    shutil.copytree(cpu_run_nw1, run)
    data = json.loads((run / "sidecar.json").read_text())
    data["torch_num_threads"] = 2
    for s in data["steps"]:
        if s["profiled"]:
            s["wall_us"] = s["next_wall_us"] + 1.5 * (s["wall_us"] - s["next_wall_us"])
    steps_in_turn(data["steps"])       # the longer walls move the later steps' starts
    (run / "sidecar.json").write_text(json.dumps(data))
    said = [w for w in api.calibrate(run).warnings if "profiler overhead" in w]
    assert len(said) == 1 and said[0].startswith("profiler overhead not removed: on 2 intra-op")
