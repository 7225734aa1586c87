"""GPU calibration of several ranks (synthetic two-rank jobs from ``tests/kineto_gen.py``,
rank from file names, duplicate ranks) and of the real shared traces when present."""
from __future__ import annotations

from pathlib import Path

import pytest

from stepsim.fit import calibrate_gpu
from stepsim.models.simulate import simulate
from tests.kineto_gen import measured_median, one_rank_trace, two_rank_dir

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def test_multi_rank_alignment_transfer_and_skew(tmp_path):
    m = calibrate_gpu(two_rank_dir(tmp_path))
    assert [r.rank for r in m.ranks] == [0, 1]
    n = m.meta.notes
    assert n["reference_rank"] == 0
    off = dict(kv.split(":") for kv in n["clock_offsets_us"].split(","))
    assert float(off["1"]) == pytest.approx(5000.0, abs=1.0)
    coll = [t for t in m.task_map().values() if t.kind == "collective"][0]
    assert coll.dur_us == pytest.approx(150.0)  # transfer, from the last rank to arrive
    late = [r for r in m.ranks if r.rank == 1][0]
    assert late.delay_us > 0
    assert m.comm.world_size == 2
    assert m.meta.sources["ranks.1.delay_us"] == "inferred"
    assert m.meta.sources["ranks.0.delay_us"] == "measured"
    r = simulate(m, steps=4, warmup=2)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_rank_from_file_name_and_missing_rank(tmp_path):
    d = tmp_path / "byname"
    d.mkdir()
    one_rank_trace(d / "worker3.pt.trace.json")
    m = calibrate_gpu(d / "worker3.pt.trace.json")
    assert m.ranks[0].rank == 3 and any("file name" in w for w in m.meta.warnings)
    p = one_rank_trace(tmp_path / "anonymous.json")
    m = calibrate_gpu(p)
    assert m.ranks[0].rank == 0 and any("taken as rank 0" in w for w in m.meta.warnings)


def test_two_files_with_the_same_rank_are_two_captures(tmp_path):
    d = tmp_path / "captures"
    d.mkdir()
    one_rank_trace(d / "a.json", distributedInfo={"rank": 2, "world_size": 4})
    one_rank_trace(d / "b.json", distributedInfo={"rank": 2, "world_size": 4})
    m = calibrate_gpu(d)
    assert [r.rank for r in m.ranks] == [2]
    w = [w for w in m.meta.warnings if "both claim rank 2" in w]
    assert len(w) == 1 and "separate captures" in w[0] and "using a.json" in w[0] \
        and "ignoring b.json" in w[0]


# ------------------------------------------------------------------------- shared traces
def _shared(rel: str) -> Path:
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"shared trace {rel} not present under {SHARED}")
    return p


def test_shared_dlrm_rank_replays():
    m = calibrate_gpu(_shared("param/dlrm_kineto/worker2_step_12.1694128201554.pt.trace.json"))
    assert m.ranks[0].rank == 2 and m.comm.world_size == 8
    r = simulate(m, steps=3, warmup=1)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_dlrm_all_ranks_replay():
    m = calibrate_gpu(_shared("param/dlrm_kineto"))
    assert [r.rank for r in m.ranks] == list(range(8))
    assert m.meta.notes["collectives_matched"] == 8
    r = simulate(m, steps=3, warmup=1)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_old_dialect_resnet_replays():
    m = calibrate_gpu(_shared("kineto/be239c04_rec2021-06-08/resnet50_num_workers_0/"
                              "worker0.1623143566756.pt.trace.json.gz"))
    r = simulate(m, steps=3, warmup=2)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_recsys_trace_replays_busy_and_exposed_comm():
    # up to 145 ms per step of device idle that the trace does not explain: as gaps (not busy
    # time) the replay shows the step's measured GPU busy and exposed communication
    from stepsim.models.metrics import summarize

    m = calibrate_gpu(_shared("hta/negative_queue_length_values_check/rank0.json.gz"))
    s = summarize(simulate(m, steps=4, warmup=2))
    n = m.meta.notes
    assert s.median_step_us == pytest.approx(n["measured_median_step_us"], rel=0.01)
    assert 100 * s.device_busy_us / s.mean_step_us == pytest.approx(n["step_gpu_busy_pct"], abs=2)
    assert s.exposed_comm_us == pytest.approx(n["step_exposed_comm_us"], rel=0.05)
