"""Bad input left by break14: a sidecar's DDP step counts and barrier releases had no upper
bounds (:mod:`calibration.sidecar_counts`). A record past its bound, which the file itself
fixes, is dropped and counted in one warning naming the file, and the rest calibrates; a
probe list past :data:`calibration.sidecar_ddp.MAX_PROBE_RECORDS` records, or more bucket
marks than the job has parameters, refuses the file in one line (exit 2 at the CLI), no
traceback, the input unchanged."""
import json
import shutil

import pytest

from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_counts import MAX_PROBE_STEPS
from stepsim.calibration.sidecar_ddp import MAX_PROBE_RECORDS
from stepsim.warning_order import printed_texts
from tests.test_bad_input_break14 import refused
from tests.test_quirks import cli, one_line_error

WALL_US = 10_000.0
"""Each step's wall (µs) in :func:`_sidecar`."""


def _sidecar(tmp_path, **ddp):
    """Four profiled 10 ms steps and two unprofiled ones of rank 0 of a 2-rank gloo job (one
    1 MiB parameter), with the ``ddp`` fields given."""
    steps = [{"t_start_us": 1000.0 + WALL_US * k, "wall_us": WALL_US, "cpu_us": 6000.0,
              "next_wall_us": 20.0, "next_cpu_us": 1.0, "profiled": 1 <= k <= 4}
             for k in range(6)]
    d = {"stepsim_sidecar": 1, "host_cores": 2, "loader": {"num_workers": 0}, "steps": steps,
         "ddp": {"world_size": 2, "rank": 0, "backend": "gloo",
                 "params": [{"name": "w", "shape": [512, 512], "numel": 262144,
                             "dtype": "float32", "bytes": 1 << 20},
                            {"name": "b", "shape": [512], "numel": 512, "dtype": "float32",
                             "bytes": 2048}], **ddp}}
    p = tmp_path / "rank0.sidecar.json"
    p.write_text(json.dumps(d))
    return p


def _marks(steps):
    return [{"bytes": 2048, "cpu_us": 100.0, "steps": steps},
            {"bytes": 1 << 20, "cpu_us": 900.0, "steps": 4}]


def _barrier(**first):
    return [{"wait_us": 0.0, "barrier_us": 500.0, "steps": 6},
            {"wait_us": 4e4, "barrier_us": 41_000.0, "steps": 6, **first}]


def _loaded(p):
    """The sidecar read, checked to leave the file as it was."""
    before = p.read_bytes()
    side = load_sidecar(p)
    assert p.read_bytes() == before
    return side


@pytest.mark.parametrize("steps, dropped", [(4, False), (5, True), (10 ** 18, True)])
def test_bucket_marks_over_more_steps_than_profiled_are_dropped(tmp_path, steps, dropped):
    """The meter sums a mark over the profiled steps only: 4 here. 10^18 steps passed the
    marks' CPU bound (steps × wall × cores) and priced a bucket at 1e-14 µs a step; the marks
    are one sequence, so both go, said once with the file's count."""
    side = _loaded(_sidecar(tmp_path, bucket_cpu=_marks(steps)))
    if not dropped:
        assert side.dropped == [] and len(side.ddp.bucket_cpu) == 2
        return
    (note,) = side.dropped
    assert side.ddp.bucket_cpu == []
    assert note.startswith("rank0.sidecar.json: dropped 2 of 2 'ddp.bucket_cpu' record(s) "
                           "that cannot be right; 1 more with them, one sequence (first: "
                           "ddp.bucket_cpu.0: steps "), note
    assert "more than the file's 4 profiled step record(s)" in note and len(note) < 300


@pytest.mark.parametrize("key, record", [
    ("cold_probe", {"pause_us": 2e4, "hot_cpu_us": 5e3, "cold_cpu_us": 6e3}),
    ("barrier_probe", {"wait_us": 2e4, "barrier_us": 2.1e4}),
])
@pytest.mark.parametrize("steps, dropped", [(MAX_PROBE_STEPS, False),
                                            (MAX_PROBE_STEPS + 1, True), (10 ** 18, True)])
def test_a_probe_record_of_too_many_steps_is_dropped(tmp_path, key, record, steps, dropped):
    """A probe record's steps weigh it in the means pooled over the runs: 10^18 on one
    replicate outweighed every other run (past 10^308, a float overflow). The other record
    stays and calibrates."""
    other = {**record, "pause_us": 1e4} if key == "cold_probe" else \
        {**record, "wait_us": 0.0, "barrier_us": 600.0}
    side = _loaded(_sidecar(tmp_path, **{key: [{**record, "steps": steps},
                                               {**other, "steps": 6}]}))
    kept = getattr(side.ddp, key)
    assert [r.steps for r in kept] == ([6] if dropped else [steps, 6])
    if dropped:
        (note,) = side.dropped
        assert note.startswith(f"rank0.sidecar.json: dropped 1 of 2 'ddp.{key}' record(s) "
                               f"that cannot be right (first: ddp.{key}.0: steps "), note
        assert f"more than {MAX_PROBE_STEPS:,}" in note


@pytest.mark.parametrize("barrier_us, dropped", [
    ((4e4 + 2 * WALL_US) * 1.01 + 1000.0, False),    # at the bound (the clocks' slack)
    ((4e4 + 2 * WALL_US) * 1.01 + 1000.5, True),
    (1e7, True),
    (1e12, True),
])
def test_a_barrier_release_past_two_steps_after_its_wait_is_dropped(tmp_path, barrier_us,
                                                                    dropped):
    """Closed form: a rank's time in the probe's barrier is at most the wait the last rank
    spun plus two step walls (the forwards' ends a step apart at most, the release less than
    a step), past the clocks' slack (1 % + 1000 µs). 1e12 µs (11.6 days) was taken and
    priced every barrier what-if."""
    side = _loaded(_sidecar(tmp_path, barrier_probe=_barrier(barrier_us=barrier_us)))
    assert [r.wait_us for r in side.ddp.barrier_probe] == ([0.0] if dropped else [0.0, 4e4])
    if dropped:
        (note,) = side.dropped
        assert f"(first: ddp.barrier_probe.1: barrier_us {barrier_us:g} µs, past its " \
               f"wait_us of 40000 µs + 2 × the longest step's wall_us of 10000 µs)" in note


@pytest.mark.parametrize("ddp, said", [
    ({"barrier_probe": [{"wait_us": float(w), "barrier_us": 500.0, "steps": 6}
                        for w in range(10 ** 5)]},
     rf"bad sidecar field ddp.barrier_probe: List should have at most {MAX_PROBE_RECORDS} "),
    ({"cold_probe": [{"pause_us": float(w + 1), "hot_cpu_us": 5e3, "cold_cpu_us": 6e3,
                      "steps": 6} for w in range(MAX_PROBE_RECORDS + 1)]},
     rf"bad sidecar field ddp.cold_probe: List should have at most {MAX_PROBE_RECORDS} "),
    ({"bucket_cpu": [{"bytes": 1024, "cpu_us": 1.0, "steps": 4}] * 3},
     r"bucket_cpu has 3 buckets, more than the job's 2 parameter\(s\) with a gradient"),
])
def test_more_records_than_a_job_can_write_refuse_the_file(tmp_path, ddp, said):
    """10^5 barrier waits (distinct, so no copy to name) made the duplicate check quadratic:
    minutes before any answer. A probe list is a run of steps per record; a bucket holds a
    parameter or more."""
    refused(_sidecar(tmp_path, **ddp), said)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The checked-in 2-rank gloo job (``tests/data/gloo_loader_job``) calibrated as it is."""
    from pathlib import Path

    src = Path(__file__).parent / "data" / "gloo_loader_job"
    out = tmp_path_factory.mktemp("job")
    rc, err, _ = cli("calibrate", src, "-o", out / "m.json")
    assert rc == 0, err
    return src, json.loads((out / "m.json").read_text())


def _hostile(job, tmp_path, edit):
    """A copy of the job whose every rank's ``ddp`` record ``edit`` changed."""
    dst = tmp_path / "job"
    shutil.copytree(job[0], dst)
    for f in sorted(dst.glob("rank*/sidecar.json")):
        d = json.loads(f.read_text())
        edit(d["ddp"])
        f.write_text(json.dumps(d))
    return dst


def test_a_hostile_jobs_counts_are_dropped_and_it_calibrates_as_without_them(job, tmp_path):
    """Every rank's marks over 10^18 steps: dropped and said once for both ranks' files; the
    job calibrates as the same job without marks does (exit 0)."""
    def huge(ddp):
        for b in ddp["bucket_cpu"]:
            b["steps"] = 10 ** 18

    def none(ddp):
        ddp["bucket_cpu"] = []

    rc, err, _ = cli("calibrate", _hostile(job, tmp_path / "a", huge), "-o", tmp_path / "a.json")
    assert rc == 0 and "Traceback" not in err, err
    said = [ln for ln in printed_texts(err) if "'ddp.bucket_cpu' record(s)" in ln]
    assert len(said) == 1 and "sidecar.json and 1 other file(s): dropped 2 of 2" in said[0] \
        and "steps about 10^18, more than the file's 8 profiled step record(s)" in said[0], said
    rc, err, _ = cli("calibrate", _hostile(job, tmp_path / "b", none), "-o", tmp_path / "b.json")
    assert rc == 0, err
    a, b = (json.loads((tmp_path / f"{k}.json").read_text()) for k in "ab")
    assert a["comm"] == b["comm"] and a["host"] == b["host"]
    assert a["comm"] != job[1]["comm"]      # (the marks priced the job's buckets)


def test_a_hostile_jobs_probe_list_is_refused_in_one_line(job, tmp_path):
    """10^4 barrier waits on every rank: one line naming rank 0's sidecar, exit 2."""
    def many(ddp):
        ddp["barrier_probe"] = [{"wait_us": float(w), "barrier_us": 500.0, "steps": 6}
                                for w in range(10 ** 4)]

    folder = _hostile(job, tmp_path, many)
    rc, err, _ = cli("calibrate", folder, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "rank0", "sidecar.json",
                   f"ddp.barrier_probe: List should have at most {MAX_PROBE_RECORDS}")
    assert not (tmp_path / "m.json").exists()
