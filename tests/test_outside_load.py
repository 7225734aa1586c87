"""Outside load on a CPU capture, read from its sidecar (calibration.outside_load): the run's
own runnable threads hold every core they can on a quiet machine, own contention included."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from stepsim.fit import calibrate
from stepsim.calibration.outside_load import LOAD_WARN, outside_load
from stepsim.calibration.sidecar import Sidecar
from tests.conftest import run_cli

MS = 1000.0


def _side(batches, steps, cores=2, workers=1, threads=1) -> Sidecar:
    """A sidecar with worker batches ``(start, end, cpu)`` and profiled training steps
    ``(start, end, cpu[, vcsw, ivcsw])`` outside ``next()`` (ms)."""
    produce = [{"worker": i % max(workers, 1) if workers else -1, "pid": 100 + i, "seq": 1 + i,
                "wall_us": (b - a) * MS, "cpu_us": c * MS, "proc_cpu_us": c * MS,
                "t_end_us": b * MS} for i, (a, b, c) in enumerate(batches)]
    rows = []
    for a, b, c, *sw in steps:
        vol, inv = sw or (0, 10)
        rows.append({"t_start_us": a * MS, "wall_us": (b - a) * MS, "cpu_us": c * MS,
                     "proc_cpu_us": c * MS, "next_wall_us": 0.0, "next_cpu_us": 0.0,
                     "next_proc_cpu_us": 0.0, "vcsw": vol, "ivcsw": inv, "profiled": True})
    return Sidecar.model_validate({"stepsim_sidecar": 1, "host_cores": cores,
                                   "torch_num_threads": threads, "produce": produce,
                                   "steps": rows, "loader": {"num_workers": workers}})


def _steps(n, wall, cpu):
    return [(k * wall, (k + 1) * wall, cpu) for k in range(n)]


def test_a_thread_with_a_free_core_that_ran_half_the_time_was_loaded():
    # one worker and the main thread on 2 cores: 200 ms of core time a 100 ms step could hold
    side = _side(_steps(4, 100, 100), _steps(4, 100, 50))
    o = outside_load(side, 1, 1, 1)
    assert o.held == pytest.approx(600 / 800) and o.mean_threads == pytest.approx(2.0)
    assert o.warning() is not None and "75 %" in o.warning() and "quiet machine" in o.warning()


def test_own_contention_is_not_outside_load():
    # two workers and the main thread on 2 cores: each held 2/3 of a core, the cores were full
    side = _side(_steps(4, 90, 60) + _steps(4, 90, 60), _steps(4, 90, 60), workers=2)
    o = outside_load(side, 2, 1, 1)
    assert o.held == pytest.approx(1.0) and o.warning() is None


def test_a_stalled_team_spinning_holds_its_cores():
    # torch on 2 threads beside one worker on 2 cores: 3 runnable threads, 2 cores full
    side = _side(_steps(4, 100, 200 / 3), _steps(4, 100, 400 / 3), threads=2)
    assert outside_load(side, 1, 1, 2).held == pytest.approx(1.0)


def test_the_bound_is_the_replay_tolerance():
    held = 1 / (1 + LOAD_WARN)
    quiet = _side(_steps(4, 100, 100), _steps(4, 100, 100 * (2 * held - 1) + 1e-3))
    loaded = _side(_steps(4, 100, 100), _steps(4, 100, 100 * (2 * held - 1) - 1e-3))
    assert outside_load(quiet, 1, 1, 1).warning() is None
    assert outside_load(loaded, 1, 1, 1).warning() is not None


def test_a_blocked_step_is_not_runnable():
    # the step blocked (voluntary switches): its CPU short of its wall is not load
    blocked = [(a, b, 10, 30, 2) for a, b, _ in _steps(4, 100, 0)]
    o = outside_load(_side(_steps(4, 100, 100), blocked), 1, 1, 1)
    assert o.steps == 0 and o.held == pytest.approx(1.0)


def _cpu_times(src, dst, share: float):
    """Capture ``src`` copied with every busy interval's CPU time ``share`` × its wall time (the
    trace and the walls as measured) and the rest of it waited on the run queue: 1 is a quiet
    machine, less a loaded one. Its main thread and each worker then hold ``share`` of a core
    at once, which only a host with a core for each can: the copy's usable cores are at least
    that many (a capture limited to one CPU, as a 1-core CI machine records, read its "quiet"
    copy's threads as holding 1.78 of the 1 core they could have held)."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "sidecar.json").read_text())
    threads = 1 + (data["loader"].get("num_workers") or 0)
    data["host_cores"] = max(data.get("host_cores") or 1, threads)
    data["cpu_count"] = max(data.get("cpu_count") or 1, data["host_cores"])
    for r in data["produce"]:
        r["cpu_us"] = r["proc_cpu_us"] = share * r["wall_us"]
        r["run_wait_us"] = (1 - share) * r["wall_us"]
        if r.get("gap_cpu_us") is not None:     # a worker's work between batches: the same
            r["gap_cpu_us"] = min(r["gap_cpu_us"], share * r["gap_wall_us"])
            r["gap_run_wait_us"] = (1 - share) / share * r["gap_cpu_us"]
    for s in data["steps"]:
        busy = share * (s["wall_us"] - s["next_wall_us"])
        # next()'s own work (unpickling the batch) got the same share of a core: at most
        # share × its wall of CPU, the rest of that CPU's time waiting on the run queue
        nxt = min(s["next_cpu_us"], share * s["next_wall_us"])
        s["next_cpu_us"] = s["next_proc_cpu_us"] = nxt
        s["cpu_us"], s["proc_cpu_us"] = s["next_cpu_us"] + busy, s["next_proc_cpu_us"] + busy
        s["run_wait_us"] = (1 - share) * (s["wall_us"] - s["next_wall_us"])
        s["next_run_wait_us"] = (1 - share) / share * nxt
        s["vcsw"], s["ivcsw"] = 0, 40
    (dst / "sidecar.json").write_text(json.dumps(data))
    return dst


def test_calibration_warns_once_of_a_loaded_capture(cpu_run_nw1, tmp_path):
    quiet = calibrate(_cpu_times(cpu_run_nw1, tmp_path / "quiet", 1.0))
    assert quiet.meta.notes["outside_load_held"] == pytest.approx(1.0, abs=0.01)
    assert not any("outside load" in w for w in quiet.meta.warnings)
    loaded_dir = _cpu_times(cpu_run_nw1, tmp_path / "loaded", 0.4)
    loaded = calibrate(loaded_dir)
    assert loaded.meta.notes["outside_load_held"] == pytest.approx(0.4, abs=0.01)
    said = [w for w in loaded.meta.warnings if "outside load" in w]
    assert len(said) == 1 and "40 %" in said[0] and "2.5x slower" in said[0]
    assert "re-capture on a quiet machine" in said[0]
    # the preempted-step note says the same thing less plainly: not said beside it
    assert not any("preempted" in w for w in loaded.meta.warnings)
    r = run_cli("calibrate", str(loaded_dir), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 0
    assert r.stderr.count("ran under outside load: its own") == 1
    # a replay that misses the loaded capture names the load as the reason
    from stepsim.results import Calibration

    mean = float(np.mean(loaded.meta.measured_step_us))
    for model, why in ((loaded, "the capture ran under outside load"),
                       (quiet, "the model misses something")):
        c = Calibration(model=model, output=None, warnings=(), window=None,
                        steady_mean_us=0.2 * mean, steady_median_us=0.2 * mean)
        assert why in c.steady_warning


def test_every_what_if_of_a_loaded_capture_repeats_it():
    """A model whose capture ran under outside load says so beside every what-if, not only at
    calibration; one from a quiet capture (or without the note) does not."""
    from stepsim.models.params import HostOp, HostParams, StepModel
    from stepsim.scenarios.caveats import caveats
    from stepsim.scenarios.transforms import SetOp

    base = StepModel(host=HostParams(ops=[HostOp(kind="cpu", dur_us=1000.0)]))
    ops = [SetOp(path="loader.num_workers", value=2)]

    def said(held):
        m = base.model_copy(deep=True)
        if held is not None:
            m.meta.notes["outside_load_held"] = held
        return any("ran under outside load" in w for w in caveats(m, ops))

    assert said(0.3) and said(1 / (1 + LOAD_WARN) - 0.01)
    assert not said(1.0) and not said(1 / (1 + LOAD_WARN) + 0.01) and not said(None)


def test_a_re_measured_run_under_outside_load_is_said_at_validation(cpu_run_nw1, tmp_path):
    """The re-measured run is a capture too: its load is read as calibration reads it, and a
    loaded one says so beside its error (a new user's −68 % came with no hint)."""
    from stepsim.calibration.measure import measured_steps

    quiet = measured_steps(_cpu_times(cpu_run_nw1, tmp_path / "quiet", 1.0) / "trace.json.gz")
    assert not any("re-measured run ran under outside load" in w for w in quiet.warnings)
    loaded = measured_steps(_cpu_times(cpu_run_nw1, tmp_path / "loaded", 0.4)
                            / "trace.json.gz")
    said = [w for w in loaded.warnings if "re-measured run ran under outside load" in w]
    assert len(said) == 1 and "40 %" in said[0] and "2.5x slower" in said[0]


def test_a_ddp_capture_whose_identical_steps_took_more_cpu_is_flagged():
    """A DDP rank blocks every step, so the capture's load is read from its identical steps'
    CPU time instead (calibration.outside_load.speed_change): mean ÷ 10th percentile − 1 past
    LOAD_WARN warns, and ``p10 / mean`` is what the model keeps as outside_load_held."""
    from stepsim.calibration.outside_load import speed_change

    def side(cpus_ms):
        return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                       "produce": [], "steps": [
            {"wall_us": 30 * MS, "cpu_us": c * MS, "next_wall_us": 0.0, "next_cpu_us": 0.0,
             "profiled": True} for c in cpus_ms] + [
            {"wall_us": 30 * MS, "cpu_us": 99 * MS, "next_wall_us": 0.0, "next_cpu_us": 0.0,
             "profiled": False}]})   # unprofiled steps are not the capture's window

    warnings: list[str] = []
    steady = side([16.0] * 10)
    assert speed_change({0: steady, 1: steady}, warnings) == pytest.approx(1.0)
    assert not warnings
    # half the window at 40 ms of CPU: mean 28 against a 10th percentile of 16, +75 %
    loaded = side([16.0] * 10 + [40.0] * 10)
    assert speed_change({0: steady, 1: loaded}, warnings) == pytest.approx(16 / 28)
    assert len(warnings) == 1 and "rank 1's identical steps" in warnings[0] \
        and "+75%" in warnings[0]
    # under the bound: held, no warning
    warnings.clear()
    mild = side([16.0] * 10 + [17.6] * 10)               # +5 %
    assert speed_change({0: mild}, warnings) == pytest.approx(16 / 16.8) and not warnings
    assert speed_change({0: side([16.0, 16.0])}, warnings) is None


def test_a_ddp_capture_whose_cpu_spread_is_its_own_is_not_called_loaded():
    """The same spread of identical steps' CPU, where every rank's ``machine`` record reads
    other processes busy on 2.5 % of the cores, is the job's own (its ranks' intra-op threads
    on shared cores: a user's 2-rank job measured +177 % with others at 2.7 %): no outside
    load is kept (None) and the warning says so; at 40 % others, it is outside load."""
    from stepsim.calibration.outside_load import speed_change

    def side(cpus_ms, busy_us, proc_us):
        return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                       "produce": [], "host_name": "h", "steps": [
            {"wall_us": 30 * MS, "cpu_us": c * MS, "next_wall_us": 0.0, "next_cpu_us": 0.0,
             "profiled": True} for c in cpus_ms],
            "machine": {"wall_us": 1e6, "busy_us": busy_us, "cores": 2,
                        "proc_cpu_us": proc_us, "tick_us": 1e4}})

    spread = [16.0] * 10 + [40.0] * 10                    # +75 % over the 10th percentile
    warnings: list[str] = []
    quiet = {0: side(spread, 1.95e6, 0.95e6), 1: side(spread, 1.95e6, 0.95e6)}
    assert speed_change(quiet, warnings) is None
    assert len(warnings) == 1 and "+75%" in warnings[0] and "2 % of the machine's cores" \
        in warnings[0] and "not outside load" in warnings[0]
    warnings.clear()
    busy = {0: side(spread, 2e6, 0.6e6), 1: side(spread, 2e6, 0.6e6)}   # others 40 %
    assert speed_change(busy, warnings) == pytest.approx(16 / 28)
    assert len(warnings) == 1 and warnings[0].startswith("the capture ran under outside load")


def test_a_ddp_capture_that_held_fewer_cores_than_its_replicates_is_flagged():
    """The same setting's runs hold the same share of the cores: a capture whose processes
    held 0.5 of a core against its replicates' 0.85 (median) waited for cores others held;
    held = 0.5 / 0.85, and a warning. A capture that held more than its replicates is not
    'less loaded than alone': held stays at most 1."""
    from stepsim.calibration.outside_load import share_against_replicates

    def run(share, n=2):
        side = Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                                       "produce": [], "steps": [
            {"wall_us": 40 * MS, "cpu_us": 10 * MS, "proc_cpu_us": share * 40 * MS,
             "next_wall_us": 0.0, "next_cpu_us": 0.0, "profiled": True}] * 5})
        return [side] * n

    warnings: list[str] = []
    runs = [run(0.5), run(0.84), run(0.85), run(0.9)]
    assert share_against_replicates(runs, warnings) == pytest.approx(0.5 / 0.85)
    assert len(warnings) == 1 and "held 0.50 of a core" in warnings[0]
    warnings.clear()
    assert share_against_replicates([run(0.9), run(0.84), run(0.85)], warnings) == 1.0
    assert share_against_replicates([run(0.8), run(0.84)], warnings) == pytest.approx(0.8 / 0.84)
    assert not warnings                                   # 5 % under: within LOAD_WARN
    assert share_against_replicates([run(0.5)], warnings) is None


def test_a_stalled_team_s_load_bound_is_its_share_to_the_team():
    """A 2-thread training step captured beside more runnable threads than cores is calibrated
    as its wall × s², each thread's share s lowered by the load too: a user's CNN (held 0.46)
    replayed −77 % (4.3x) where the warning said 2.2x. The warning now gives 1 / held^T."""
    side = _side(_steps(4, 100, 100), _steps(4, 100, 50))
    o = outside_load(side, 1, 1, 1)
    assert "can be off by as much:" in o.warning()          # one thread: 1 / held
    said = o.warning(team=2)
    assert f"up to {1 / o.held ** 2:.1f}x" in said and "s^2" in said


def test_calibration_of_a_loaded_team_capture_says_the_compounded_bound(cpu_run_nw1, tmp_path):
    d = _cpu_times(cpu_run_nw1, tmp_path / "loaded", 0.4)
    data = json.loads((d / "sidecar.json").read_text())
    data["torch_num_threads"], data["host_cores"] = 2, 2      # 2 threads + 1 worker > 2 cores
    (d / "sidecar.json").write_text(json.dumps(data))
    m = calibrate(d)
    held = m.meta.notes["outside_load_held"]
    assert m.meta.notes["outside_load_team"] == 2
    said = [w for w in m.meta.warnings if "ran under outside load" in w]
    assert len(said) == 1 and f"up to {1 / held ** 2:.1f}x" in said[0]
    from stepsim.scenarios.caveats import input_caveats
    every = [w for w in input_caveats(m) if "ran under outside load" in w]
    assert len(every) == 1 and f"up to {1 / held ** 2:.1f}x through its 2-thread" in every[0]


def test_a_loaded_team_capture_at_0_workers_says_the_team_figure(cpu_run_nw0, tmp_path):
    """A 2-thread step at num_workers=0 on 2 cores: calibration inverts no stall (the run's
    threads fit the cores), but the load stalls the team all the same, its threads spinning at
    the barriers, so the captured step itself is stretched about 1 / held^2 (a user's CNN:
    three captures held 31-53 %, their steps 6.8-16.6x a calm capture's; 1 / held said
    1.9-3.2x). The warning gives both; one thread keeps 'as much'."""
    d = _cpu_times(cpu_run_nw0, tmp_path / "loaded", 0.4)
    data = json.loads((d / "sidecar.json").read_text())
    data["torch_num_threads"], data["host_cores"] = 2, 2
    (d / "sidecar.json").write_text(json.dumps(data))
    m = calibrate(d)
    held = m.meta.notes["outside_load_held"]
    said = [w for w in m.meta.warnings if "ran under outside load" in w]
    assert len(said) == 1 and f"about {1 / held ** 2:.1f}x or more" in said[0]
    assert "spins at their barriers" in said[0]
    one = calibrate(_cpu_times(cpu_run_nw0, tmp_path / "one", 0.4))
    said = [w for w in one.meta.warnings if "ran under outside load" in w]
    assert len(said) == 1 and "can be off by as much:" in said[0]


def test_the_jobs_own_spread_names_the_threads_it_ran():
    """The job's-own-spread warning names intra-op teams only where a rank ran more than one
    thread (fresh14: a 1-thread-a-rank torchrun job was told of intra-op teams)."""
    from stepsim.calibration.outside_load import speed_change

    def side(threads):
        return Sidecar.model_validate({
            "stepsim_sidecar": 1, "loader": {"num_workers": 1}, "produce": [],
            "host_name": "h", "torch_num_threads": threads, "steps": [
                {"wall_us": 30 * MS, "cpu_us": c * MS, "next_wall_us": 0.0,
                 "next_cpu_us": 0.0, "profiled": True} for c in [16.0] * 10 + [40.0] * 10],
            "machine": {"wall_us": 1e6, "busy_us": 1.95e6, "cores": 2, "proc_cpu_us": 0.95e6,
                        "tick_us": 1e4}})

    for threads, says, not_said in ((1, "the ranks' training threads beside their DataLoader "
                                         "workers and gloo's threads", "intra-op"),
                                    (2, "every rank's 2 intra-op threads", "gloo's threads")):
        warnings: list[str] = []
        assert speed_change({0: side(threads), 1: side(threads)}, warnings) is None
        assert says in warnings[0] and not_said not in warnings[0]
