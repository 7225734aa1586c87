"""Sidecar fields in range one by one that cannot be right together, or instants a double
cannot tell apart (breaker findings, 2026-12-05, on a real 1-worker capture's sidecar): a
step at ``t_start_us`` 1e300 crashed calibration (ZeroDivisionError: start + wall == start);
batches ending at 1e300 printed numpy's RuntimeWarning and refused the file; a gap's run-queue
wait 100x its wall read as 4.1 runnable threads (1.7 true); a worker's process CPU 50x its
wall on 2 cores set ``threads_per_worker`` to 50 (replay +704 %); ``iter_start_us`` after the
first step gave a start-up "measured" 0; ``host_cores`` 1000 beside ``cpu_count`` 2 was kept."""
from __future__ import annotations

import json

import pytest

from stepsim.calibration.sidecar import load_sidecar
from stepsim.cli import main


def _sidecar(tmp_path, edit):
    produce = [{"worker": 0, "pid": 9, "seq": k, "wall_us": 100.0, "cpu_us": 60.0,
                "proc_cpu_us": 70.0, "t_end_us": 1000.0 + 100.0 * (k + 1),
                "gap_wall_us": 5.0, "gap_cpu_us": 4.0, "gap_run_wait_us": 1.0}
               for k in range(4)]
    steps = [{"t_start_us": 1000.0 + 100.0 * k, "wall_us": 100.0, "cpu_us": 50.0,
              "next_wall_us": 20.0, "next_cpu_us": 1.0, "profiled": True} for k in range(4)]
    d = {"stepsim_sidecar": 1, "host_cores": 2, "cpu_count": 4, "iter_start_us": 900.0,
         "loader": {"num_workers": 1}, "produce": produce, "steps": steps,
         "probe": {"num_workers": 2, "produce": [dict(r, worker=1) for r in produce]}}
    edit(d)
    p = tmp_path / "sidecar.json"
    p.write_text(json.dumps(d))
    return load_sidecar(p)


def test_a_sound_sidecar_says_nothing(tmp_path):
    side = _sidecar(tmp_path, lambda d: None)
    assert side.dropped == [] and len(side.produce) == 4 and side.iter_start_us == 900.0


@pytest.mark.parametrize("edit,first", [
    (lambda d: d["produce"][1].update(worker=3), "produce.1: worker 3, its loader has "
                                                 "num_workers=1"),
    (lambda d: d["produce"][0].update(proc_cpu_us=5000.0), "produce.0: process CPU 5000 µs "
                                                           "past 10 × 2 core(s)"),
    (lambda d: d["produce"][3].update(t_end_us=1e300), "produce.3.t_end_us: Input should be"),
    (lambda d: d["probe"]["produce"][0].update(worker=2), "probe.produce.0: worker 2"),
])
def test_a_batch_that_cannot_be_right_is_dropped_and_counted(tmp_path, edit, first):
    side = _sidecar(tmp_path, edit)
    (note,) = side.dropped
    assert "dropped 1 of 4" in note and f"(first: {first}" in note, note
    assert len(side.produce) + len(side.probe.produce) == 7


def test_a_gap_wait_past_its_wall_is_not_recorded(tmp_path):
    side = _sidecar(tmp_path, lambda d: d["produce"][1].update(gap_run_wait_us=500.0))
    (note,) = side.dropped
    assert "produce.1.gap_run_wait_us: 500 µs past its gap_wall_us of 5 µs" in note, note
    assert side.produce[1].gap_run_wait_us is None and side.produce[1].gap_wall_us == 5.0


@pytest.mark.parametrize("t,what", [(1050.0, "first step's start"),
                                    (1000.5, "worker 0's first fetch")])
def test_iter_start_after_the_first_step_or_fetch_is_not_recorded(tmp_path, t, what):
    def edit(d):
        d["iter_start_us"] = t
        d["produce"][0]["t_end_us"] = 1000.0 + 100.0   # first fetch at 1000.0
        if "fetch" in what:   # the first step starts later, still ending as step 1 starts
            d["steps"][0].update(t_start_us=1040.0, wall_us=60.0)
    side = _sidecar(tmp_path, edit)
    (note,) = side.dropped
    assert "ignored iter_start_us" in note and what in note, note
    assert side.iter_start_us is None


def test_more_usable_cores_than_the_machine_is_refused(tmp_path):
    with pytest.raises(Exception, match="host_cores: 8 usable cores on a machine of "
                                        "cpu_count 4"):
        _sidecar(tmp_path, lambda d: d.update(host_cores=8))


def test_a_step_too_short_for_its_instant_spacing_weighs_nothing(tmp_path):
    """At the largest instant a step's compute (wall − next) of 0.1 µs is below the clock's
    spacing: start + next == start + wall; it is skipped, not divided by."""
    from stepsim.calibration.outside_load import busy_spans

    def edit(d):
        d["steps"][3].update(t_start_us=2.0 ** 52 - 1e3, wall_us=20.1, next_wall_us=20.0,
                               run_wait_us=0.0)
    side = _sidecar(tmp_path, edit)
    assert busy_spans(side, 1, 1, 1).shape[1] == 5


@pytest.mark.parametrize("edit,words", [
    (lambda d: d["steps"][0].update(t_start_us=1e300), "steps.0.t_start_us: Input should be "
                                                       "less than or equal to"),
    (lambda d: d.update(host_cores=d["cpu_count"] + 1), "bad sidecar field host_cores"),
])
def test_cli_refuses_in_one_line(capsys, tmp_path, cpu_run_nw1, edit, words):
    d = json.loads((cpu_run_nw1 / "sidecar.json").read_text())
    edit(d)
    side = tmp_path / "side.json"
    side.write_text(json.dumps(d))
    out = tmp_path / "m.json"
    assert main(["calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--sidecar", str(side),
                 "-o", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"stepsim: error: {side}: ") and words in err[0]
    assert not out.exists()


def test_cli_drops_batches_ending_past_the_clock(capsys, tmp_path, cpu_run_nw1):
    d = json.loads((cpu_run_nw1 / "sidecar.json").read_text())
    for r in d["produce"]:
        r["t_end_us"] = 1e300
    side = tmp_path / "side.json"
    side.write_text(json.dumps(d))
    assert main(["calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--sidecar", str(side),
                 "-o", str(tmp_path / "m.json")]) == 0
    err = capsys.readouterr().err
    assert "RuntimeWarning" not in err and f"dropped {len(d['produce'])} of" in err, err


@pytest.mark.parametrize("ddp,field", [
    ({"bucket_cap_mb": 1e300}, "ddp.bucket_cap_mb: Input should be less than"),
    ({"bucket_cap_mb_list": [25.0, 1e300]}, "ddp.bucket_cap_mb_list.1: Input should be less"),
    ({"first_bucket_bytes": 2**63}, "ddp.first_bucket_bytes: Input should be less than"),
])
def test_a_bucket_cap_torch_cannot_hold_is_refused(tmp_path, ddp, field):
    """A DDP record's cap past 2**63 bytes (torch's int(cap * 2**20) overflows there) became
    the model's comm.bucket_cap_mb of 1e300, which --set refuses past 2**43 MiB."""
    with pytest.raises(Exception, match=f"bad sidecar field {field}"):
        _sidecar(tmp_path, lambda d: d.update(ddp={"world_size": 1, "rank": 0,
                                                   "backend": "gloo", **ddp}))
