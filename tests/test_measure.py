"""Measured steps of a re-measured run, as ``stepsim validate`` reads them: one trace, a
capture folder, or a directory of per-rank traces."""
from __future__ import annotations

import pytest

from stepsim.calibration.measure import measured_steps
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli, shared_traces
from tests.kineto_gen import Gen


def rank_trace(path, host_us, numbers, drop_kernel_of=None):
    """Steps of ``host_us`` µs each (a launch and a stream sync), ``ProfilerStep#N`` for N in
    ``numbers``; the kernel of step ``drop_kernel_of`` is missing (the profiler lost it)."""
    g = Gen()
    for n, h in zip(numbers, host_us):
        s0 = g.t
        g.cpu(20)
        g.launch("volta_sgemm_128x64_nn", 100)
        if n == drop_kernel_of:
            g.ev.pop()
        g.stream_sync()
        g.cpu(h - (g.t - s0))
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    return g.dump(path)


def test_a_directory_of_ranks_pays_the_slowest_rank_per_step(tmp_path):
    rank_trace(tmp_path / "rank0.json", [1000, 3000, 1000], [5, 6, 7])
    rank_trace(tmp_path / "rank1.json", [1000, 2000, 1000, 1000], [4, 5, 6, 7])
    m = measured_steps(tmp_path)
    assert m.step_numbers == [5, 6, 7]
    assert m.step_us[:2] == pytest.approx([2000.0, 3000.0])
    assert any("left out" in w for w in m.warnings)


def test_ranks_without_a_common_step_are_an_error(tmp_path):
    rank_trace(tmp_path / "rank0.json", [1000, 1000], [1, 2])
    rank_trace(tmp_path / "rank1.json", [1000, 1000], [3, 4])
    with pytest.raises(InputError, match="share no step number"):
        measured_steps(tmp_path)


def test_a_step_whose_gpu_work_was_lost_is_not_measured(tmp_path):
    p = rank_trace(tmp_path / "t.json", [5000, 1000, 1000, 1000], [0, 1, 2, 3], drop_kernel_of=0)
    m = measured_steps(p)
    assert m.step_numbers == [1, 2, 3]
    assert any("incomplete" in w for w in m.warnings)


def test_validate_a_directory_of_ranks(tmp_path):
    dlrm = shared_traces() / "param" / "dlrm_kineto"
    model = tmp_path / "dlrm.json"
    r = run_cli("calibrate", str(dlrm), "-o", str(model))
    assert r.returncode == 0, r.stderr
    r = run_cli("validate", str(model), str(dlrm), "--steps", "4", "--warmup", "2", "--json")
    assert r.returncode == 0, r.stderr
    import json
    rec = json.loads(r.stdout)[0]
    assert abs(rec["error_pct"]) < 3.0


def test_listed_rank_files_of_one_job_are_one_run(tmp_path):
    import json

    from stepsim.calibration.measure import measured_runs

    for r, host in ((0, [1000, 3000, 1000]), (1, [2000, 1000, 1000])):
        p = rank_trace(tmp_path / f"t{r}.json", host, [5, 6, 7])
        d = json.loads(p.read_text())
        d["distributedInfo"] = {"rank": r, "world_size": 2}
        p.write_text(json.dumps(d))
    runs = measured_runs([tmp_path / "t0.json", tmp_path / "t1.json"])
    assert len(runs) == 1 and runs[0].step_us[:2] == pytest.approx([2000.0, 3000.0])
    assert any("of one job" in w for w in runs[0].warnings)
    # the same file twice would count twice
    with pytest.raises(InputError, match="again"):
        measured_runs([tmp_path / "t0.json", tmp_path / "t0.json"])


def test_worker_startup_rule_without_a_sidecar():
    import numpy as np

    from stepsim.calibration.measure import STARTUP_RATIO, startup_step

    steps = np.array([4000.0, 200.0, 300.0, 200.0])
    waits = np.array([1900.0, 1.0, 100.0, 2.0])
    up = startup_step(None, steps, waits, True)
    assert up is not None and up.in_trace and up.source == "trace"
    assert (up.step_us, up.next_us, up.later_next_us) == (4000.0, 1900.0, 2.0)
    # a single-process loader, or a first next() no longer than STARTUP_RATIO x a later one
    assert startup_step(None, steps, waits, False) is None
    waits[2] = 1900.0 / STARTUP_RATIO
    assert startup_step(None, steps, waits, True) is None


def test_validate_leaves_the_worker_startup_step_out(tmp_path, cpu_run_nw1):
    """A capture whose profiler starts at the loop's first step (no skip, wait or warm-up):
    the first step spawns 2 workers and waits for their first batch; it is taken out of the
    measured steps and reported on its own. With the harness's default schedule the trace
    holds no start-up step, and the sidecar's first iteration is reported."""
    import json

    from tests.conftest import record_cpu_run

    out = record_cpu_run(tmp_path / "nw2", num_workers=2, active=5,
                         schedule={"wait": 0, "warmup": 0, "skip_first": 0})
    m = measured_steps(out)
    up = m.startup
    assert up is not None and up.source == "sidecar" and up.in_trace
    assert len(m.step_us) == 4 and m.step_numbers[0] == 1
    assert up.next_us > up.later_next_us and up.step_us > up.next_us
    model = tmp_path / "m.json"
    r = run_cli("calibrate", str(cpu_run_nw1), "-o", str(model))
    assert r.returncode == 0, r.stderr
    r = run_cli("validate", str(model), str(out), "--set", "loader.num_workers=2",
                "--steps", "20", "--draws", "0", "--json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)[0]
    assert rec["steps_measured"] == 4 and rec["startup_runs"] == 1
    assert rec["startup_us"] == pytest.approx(up.step_us)
    assert rec["measured_mean_us"] == pytest.approx(sum(m.step_us) / 4)
    r = run_cli("validate", str(model), str(out), "--set", "loader.num_workers=2",
                "--steps", "20", "--draws", "0")
    assert "the first step (a multi-process DataLoader's start-up) is left out" in r.stdout
    assert "(4)" in r.stdout
    # one validate per setting into one ledger: the paragraph in full once, then one line
    # (fresh13, 2026-12-07: each setting's validate repeated it)
    ledger = tmp_path / "l.jsonl"
    said = []
    for label in ("first", "second"):
        r = run_cli("validate", str(model), str(out), "--set", "loader.num_workers=2",
                    "--steps", "20", "--draws", "0", "--ledger", str(ledger), "--label", label)
        assert r.returncode == 0, r.stderr
        said.append(" ".join(r.stdout.split()))   # (the console wraps its lines)
    assert "(a multi-process DataLoader's start-up) is left out" in said[0]
    assert "(a multi-process DataLoader's start-up)" not in said[1]
    assert "the first step left out of the measured steps" in said[1]
    assert "as the ledger's earlier records said" in said[1]
    default = measured_steps(cpu_run_nw1)
    assert default.startup is not None and not default.startup.in_trace
    assert len(default.step_us) == 6
    # calibration counts the steps validation counts: its measured mean agrees
    from stepsim.fit import calibrate

    own = calibrate(out)
    assert own.meta.steps_used == m.step_numbers
    assert own.meta.measured_step_us == pytest.approx(m.step_us)
    assert any("worker start-up step" in w for w in own.meta.warnings)
    assert calibrate(cpu_run_nw1).meta.measured_step_us == pytest.approx(default.step_us)
