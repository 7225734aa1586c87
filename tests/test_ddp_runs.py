"""The DDP demo calibrates from the profiled runs of the defaults that ran without outside
load (:mod:`calibration.ddp_runs`): a run whose cores or CPU speed are past LOAD_WARN off the
runs' median is left out and said, the first quiet run is the capture."""
from __future__ import annotations

import pytest

from stepsim.calibration.ddp_runs import off_runs


def test_a_run_past_the_bound_against_the_runs_median_is_off():
    """Closed form, the 11:02 demo's speeds (capture 1.0, replicates 1.047, 1.061, 1.535):
    median 1.054, so 1.535 is 1.456x it, past 1.10; the 10:04 demo's shares (capture 0.52
    against 0.84-0.87): median 0.84, 0.84 / 0.52 = 1.61x. Within 10 % is not off; a run
    faster than the median or holding more cores is not load; two runs cannot say."""
    assert list(off_runs([None] * 4, [1.0, 1.047, 1.061, 1.535])) == [3]
    assert "1.46x the runs' median" in off_runs([None] * 4, [1.0, 1.047, 1.061, 1.535])[3]
    shares = [0.521, 0.837, 0.866, 0.842]
    off = off_runs(shares, [1.0, 0.992, 1.0, 0.981])
    assert list(off) == [0] and "held 0.52 of a core" in off[0]
    assert off_runs([0.80, 0.84, 0.86, 0.95], [1.0, 0.95, 1.05, 1.09]) == {}
    assert off_runs([0.84, 0.85], [1.0, 1.5]) == {}
    # speeds 1.0, 1.0, 1.109 (median 1.0): 10.9 % over, off; 1.099: not
    assert list(off_runs([None] * 3, [1.0, 1.0, 1.109])) == [2]
    assert off_runs([None] * 3, [1.0, 1.0, 1.099]) == {}


def _timed(step_ms, share, cpu_ms, steps=4):
    """One timed run of 2 ranks as demo.ddp_job records it: steps of ``step_ms``, its
    processes' threads holding ``share`` of a core over them, the training thread ``cpu_ms``
    of CPU a step (phases: thread CPU at the step's start, index 5, and end, index 10)."""
    wall = step_ms * 1e3 * steps
    rank = {"step_starts_us": [k * step_ms * 1e3 for k in range(steps + 1)],
            "threads": [{"cpu_us": share * wall}],
            "phases": [[0.0] * 5 + [0.0, 0, 0, 0, 0, cpu_ms * 1e3]] * steps}
    return [rank, rank]


def test_a_repeat_under_outside_load_sets_its_row_apart_when_slower_than_predicted():
    """Closed form (demo.ddp_load): the 09:33 demo's bucket_cap_mb=25 repeats, one at 37 ms a
    step holding 0.49 of a core against 0.85 and 0.81: that repeat is loaded; measured
    (37 + 19 + 22) / 3 = 26 ms against 20.7 predicted, slower: the row is set apart (‡) and the
    quiet repeats' mean 20.5 ms is shown (error +1.0 %); predicted 30 ms (faster measured)
    it stays scored. A repeat whose training thread took 1.3x the CPU per step is loaded too;
    the old demo scored every row whatever its repeats' load."""
    from stepsim.demo.ddp import summarize
    from stepsim.demo.ddp_load import loaded_repeats, mark_row

    reps = [_timed(37, 0.49, 12.4), _timed(19, 0.85, 12.4), _timed(22, 0.81, 12.4)]
    assert list(loaded_repeats(reps)) == [0]
    means = [37e3, 19e3, 22e3]
    row = {"setting": "bucket_cap_mb=25", "predicted_ms": 20.7, "measured_ms": 26.0,
           "error": 20.7 / 26.0 - 1}
    marked = mark_row(row, means, reps)
    assert marked["load_set_apart"] and marked["quiet_measured_ms"] == pytest.approx(20.5)
    assert marked["quiet_error"] == pytest.approx(20.7 / 20.5 - 1)
    assert "held 0.49 of a core" in marked["loaded"][0]["why"]
    kept = mark_row(dict(row, predicted_ms=30.0, error=30 / 26 - 1), means, reps)
    assert not kept["load_set_apart"] and kept["loaded"]
    slow_cpu = [_timed(26, 0.85, 16.8), _timed(21, 0.86, 12.9), _timed(22, 0.83, 13.0)]
    assert list(loaded_repeats(slow_cpu)) == [0]
    assert loaded_repeats([_timed(21, 0.85, 12.9)] * 3) == {}

    from pathlib import Path

    class _Pick:
        capture, replicates, left_out = Path("capture"), [], []
        shares, speeds, outside = [], [], []

    class _Model:
        class host:
            speed_runs = [1.0]

        class meta:
            notes = {}

    rows = [dict(row, error=0.01, in_sample=True), marked,
            dict(row, setting="b", error=-0.04), dict(row, setting="c", error=0.06)]
    summary = summarize(rows, _Model, _Pick)
    assert summary["out_of_sample_scored"] == 2 and summary["set_apart"] == ["bucket_cap_mb=25"]
    assert summary["out_of_sample_median_abs_error"] == pytest.approx(0.05)
    assert summary["out_of_sample_max_abs_error"] == pytest.approx(0.06)


def test_other_processes_busy_on_the_machine_load_a_run_whatever_the_median():
    """Closed form (demo.ddp_load.outside_share): over a 1 s run on 2 cores the machine was
    busy 1.9 s and the job's threads used 1.6 s: others held 0.3 / 2 = 15 % of the cores'
    time, past LOAD_WARN, so the run is loaded even where two of three repeats were (the
    11:59 demo: shares 0.83, 0.50, 0.50, whose median is the loaded 0.50, so the median
    readings found nothing); 1.7 s busy (5 %) is quiet. Runs recorded before ``machine``
    cannot tell (None)."""
    from stepsim.demo.ddp_load import loaded_repeats, outside_share

    def run(busy_s, share=0.8, own_s=1.6):
        ranks = _timed(25, share, 13.0, steps=40)
        for r in ranks:
            r["threads"] = [{"cpu_us": own_s / 2 * 1e6}]
        ranks[0] = dict(ranks[0], machine={"wall_us": 1e6, "busy_us": busy_s * 1e6,
                                           "steal_us": 0.0, "cores": 2})
        return ranks

    assert outside_share(run(1.9)) == pytest.approx(0.15)
    assert outside_share(run(1.7)) == pytest.approx(0.05)
    assert outside_share(_timed(25, 0.8, 13.0)) is None
    assert list(loaded_repeats([run(1.7), run(1.9), run(1.9)])) == [1, 2]
    assert "busy 15 % of the machine" in loaded_repeats([run(1.7), run(1.9), run(1.9)])[1]
    assert loaded_repeats([run(1.7)] * 3) == {}


torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from tests.conftest import later_run, steps_in_turn  # noqa: E402
from tests.test_gloo import _copy_capture, gloo_run  # noqa: E402,F401  (a real 2-rank job)


def _slower(factor):
    """A sidecar edit: every step's CPU (thread and process) and wall ``factor``x; without the
    machine's busy CPU the recording read on this shared host (an older sidecar), so only the
    edit sets a run apart."""
    def edit(side):
        side.pop("machine", None)
        for s in side["steps"]:
            for k in ("cpu_us", "proc_cpu_us", "wall_us"):
                if s.get(k) is not None:
                    s[k] *= factor
        steps_in_turn(side["steps"])   # the longer walls push the later steps on, as in a run
    return edit


def test_the_demo_leaves_a_slowed_replicate_out(gloo_run, tmp_path):  # noqa: F811
    """Three replicates of the real job's capture, one whose every step took 1.5x the CPU
    time (the 11:02 demo's third replicate, 1.535x): the demo's score calibrates from the
    capture and the two others (speeds 1.0, 1.0, 1.0 against the capture: the same work),
    says why it left that one out, and the prediction is the quiet runs' (host.cpu_scale 1,
    or the mean of the quiet runs' and the timed re-runs' walls where it draws those);
    the old demo calibrated from all four (cpu_scale exp(mean log) = 1.5^(1/4) = 1.107).
    A capture so slowed is left out the same way, and the first quiet replicate is the
    capture. The timed re-runs step at the capture's own unprofiled wall a step (its slower
    rank's): the level :mod:`demo.ddp_level` solves for is then the recorded job's, whatever
    load the job ran under (a fixed 20 ms, 2.5x faster than this job's steps on a loaded
    host, took the level past the 4x it may move, so the model kept its own: centre_runs 0
    under load ~5, passed alone). What the search guarantees is asserted, not that it lands
    within 1 %: the live job's model can step across its target (a capture under load 11
    simulated 14.4, 14.6 ms at cpu_scale 1.70, 1.88 and 15.8 ms at 1.96 against 15.1 ms:
    the search ended 3 % off after its 8 simulations, and said so; another, 3.9 % off
    where a secant step left the range it searches, before its 8th). Since h-ddp23 the
    search is over the transfer level first (these runs record no CPU: the CPU level stays
    the profiled runs'); where the transfer alone cannot reach the target within 4x (this
    small job's collectives: a clean-clone CI run, 2026-12-07 16:09, centre_runs 0), the CPU
    level is solved on the step as before (demo.ddp_level.REACHED)."""
    from stepsim.calibration.job_runs import unprofiled_wall_us
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.demo.ddp import SETTINGS, score

    src, _ = gloo_run
    step_us = max(unprofiled_wall_us(load_sidecar(p)) for p in src.glob("rank*.sidecar.json"))
    out = tmp_path / "demo"
    _copy_capture(src, out / "capture", edit_sidecar=_slower(1.0))
    for k, f in enumerate([1.0, 1.0, 1.5]):
        _copy_capture(src, out / "replicates" / f"r{k}", edit_sidecar=lambda side, k=k, f=f: (
            _slower(f)(side), later_run(side, 6e7 * (k + 1))))
    rank = {"step_starts_us": [k * step_us for k in range(4)], "barrier_us": [1e3] * 3}
    runs = {f"{label}#{k}": [rank, rank] for label in SETTINGS for k in range(3)}
    model, pick, rows = score(out, runs, 3)
    assert pick.capture == out / "capture"
    assert pick.replicates == [out / "replicates" / "r0", out / "replicates" / "r1"]
    assert [p.name for p, _ in pick.left_out] == ["r2"]
    assert "1.50x the runs' median" in pick.left_out[0][1]
    assert model.host.speed_runs == pytest.approx([1.0, 1.0, 1.0])
    # the centre: the timed phase's level (demo.ddp_level), CPU and transfer apart: these
    # fake re-runs record no CPU, so cpu_scale stays the profiled runs' and the transfer
    # level (comm.transfer_scale) is solved so that the replay's point is its 3 timed
    # re-runs' pooled mean step, which the interval counts (the closest of the points it
    # simulated to the runs' mean, the one at transfer_scale 1 among them, its distance said)
    from stepsim.demo.ddp_level import _at, _point_us, _with_transfer

    assert model.host.centre_runs == 3
    assert model.comm.transfer_scale == model.meta.notes["timed_transfer_scale"]
    ratio = model.meta.notes["timed_level_ratio"]
    off = rows[0]["predicted_ms"] / rows[0]["measured_ms"] - 1
    before = _point_us(_with_transfer(_at(model, model.host.cpu_scale / ratio), 1.0),
                       0) / 1e3 / rows[0]["measured_ms"] - 1
    assert abs(off) <= abs(before) + 1e-9
    (note,) = [w for w in model.meta.warnings if "the point's host level is the timed" in w]
    assert f"{off:+.1%} off it after " in note
    if ratio != 1.0:   # the transfer alone could not reach the runs (a quiet CI run, 16:09):
        # no CPU recorded, so the CPU level was solved on the step, the transfer left at 1
        assert model.comm.transfer_scale == 1.0 and "solved on the step" in note
    assert rows[0]["in_sample"] and not any(r.get("in_sample") for r in rows[1:])
    # the capture slowed instead: the first quiet replicate calibrates
    out2 = tmp_path / "demo2"
    _copy_capture(src, out2 / "capture", edit_sidecar=_slower(1.5))
    for k in range(3):
        _copy_capture(src, out2 / "replicates" / f"r{k}",
                      edit_sidecar=lambda side, k=k: (_slower(1.0)(side),
                                                      later_run(side, 6e7 * (k + 1))))
    _, pick2, _ = score(out2, runs, 3)
    assert pick2.capture == out2 / "replicates" / "r0"
    assert [p.name for p, _ in pick2.left_out] == ["capture"]



def test_a_slow_run_says_where_the_slowness_came_from():
    """A run past the bound in CPU time of identical work, by what other processes of the
    machine used over it: little (1 %) says the cores ran slower from outside this machine
    (bench/host_gauge.py: identical work 1.1-1.8x with nothing else on the cores), some (7 %)
    names both, unmeasured says neither is known."""
    speeds = [1.0, 1.0, 1.23]
    quiet = off_runs([None] * 3, speeds, outside=[0.0, -0.02, 0.01])[2]
    assert "1.23x the runs' median" in quiet
    assert "busy 1 % of their time: from outside this machine" in quiet
    some = off_runs([None] * 3, speeds, outside=[0.0, 0.0, 0.07])[2]
    assert "other processes busy 7 %" in some and "or from outside this machine" in some
    assert "the host ran slower (other work on it" in off_runs([None] * 3, speeds)[2]


def test_a_loaded_replay_sets_apart_the_rows_measured_faster_than_its_raised_level():
    """Closed form (demo.ddp_load.level_loaded, the mirror of the rule above): every row's
    point stands on the replay's timed repeats (demo.ddp_level), so the replay's repeats 37,
    19 and 22 ms (the first loaded: 0.49 of a core) put the level at 26 ms where its quiet
    repeats measured 20.5: raised 27 %. A row predicted 30 ms and measured 26 (error +15 %)
    could owe that to the load and is set apart; a row measured slower (error < 0) stays
    scored unless its own repeats were loaded. A replay whose loaded repeat was no slower
    than its quiet ones (mean 20 ms, quiet mean 21) raised nothing; a replay with every
    repeat loaded (no quiet mean) may have raised it by any amount."""
    from stepsim.demo.ddp_load import level_loaded, mark_row

    loaded = [_timed(37, 0.49, 12.4), _timed(19, 0.85, 12.4), _timed(22, 0.81, 12.4)]
    quiet = [_timed(21, 0.85, 12.4)] * 3
    replay = mark_row({"setting": "defaults (replay)", "predicted_ms": 26.0,
                       "measured_ms": 26.0, "error": 0.0}, [37e3, 19e3, 22e3], loaded)
    assert replay["quiet_measured_ms"] == pytest.approx(20.5) and level_loaded(replay)
    fast = {"setting": "bucket_cap_mb=1", "predicted_ms": 30.0, "measured_ms": 26.0,
            "error": 30 / 26 - 1}
    apart = mark_row(fast, [26e3] * 3, quiet, level_loaded(replay))
    assert apart["load_set_apart"] and apart["level_set_apart"] and not apart["loaded"]
    slow = dict(fast, predicted_ms=24.0, error=24 / 26 - 1)
    kept = mark_row(slow, [26e3] * 3, quiet, level_loaded(replay))
    assert not kept["load_set_apart"] and not kept["level_set_apart"]
    assert not mark_row(fast, [26e3] * 3, quiet, False)["load_set_apart"]
    assert not level_loaded(dict(replay, measured_ms=20.0, quiet_measured_ms=21.0))
    assert level_loaded({"loaded": [{"repeat": k} for k in range(3)], "measured_ms": 53.3})
    assert not level_loaded({"loaded": [], "measured_ms": 20.0})


def test_a_ddp_job_names_its_captures_and_its_model_records_them(gloo_run):
    """The DDP demo's job names each rank's capture (the host and the instant before its
    loop's first step, as the harness names a loader's) and a model calibrated from it records
    them (``meta.notes.calibration_captures``, :mod:`calibration.capture_ids`), as the CLI's
    calibrate does: before, its sidecars named no ``iter_start_us`` and the demo's
    ``fit.calibrate`` wrote no note, so ``validate`` could not tell a replay of the demo's
    captures from a fresh run of its setting (break22, 2026-12-07)."""
    import json
    import socket

    from stepsim.calibration.capture_ids import capture_ids, model_capture_ids
    from stepsim.calibration.sidecar import load_sidecar
    from stepsim.fit import calibrate
    from stepsim.views import fresh_runs, measured_runs

    out, _ = gloo_run
    sides = sorted(out.glob("rank*.sidecar.json"))
    assert len(sides) == 2
    for f in sides:
        raw, side = json.loads(f.read_text()), load_sidecar(f)
        assert raw["host_name"] == socket.gethostname()
        # before the first step it times: the capture's start, which no other run shares
        assert side.iter_start_us is not None and side.iter_start_us <= side.steps[0].t_start_us
    ids = capture_ids([out])
    assert len(ids) == 2 and all(i.startswith(f"{socket.gethostname()}@") for i in ids)
    model = calibrate(out)
    assert model_capture_ids(model) == ids
    assert not fresh_runs(model, measured_runs([out])[0])   # its own capture: a replay
