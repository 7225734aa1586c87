"""Per-rank reading and fitting in processes (issue 11 §4): the same model as in one process,
results in file order, a bad file named rather than failing the pool, slimmed tables."""
from __future__ import annotations

import os

import pytest

from stepsim.calibration.events import build_table
from stepsim.fit import calibrate_gpu
from stepsim.calibration.rank_pool import JOBS_ENV, Problem, jobs_for, map_ranks
from stepsim.calibration.trace_io import load_trace
from stepsim.simcore.errors import InputError
from tests.kineto_gen import one_rank_trace


def _square_or_refuse(x: int) -> int:
    if x < 0:
        raise InputError(f"f{x}.json", "negative")
    return x * x


def test_map_ranks_keeps_order_and_returns_problems(monkeypatch):
    items = list(range(-2, 30))
    want = [Problem((f"f{x}.json", "negative", None)) if x < 0 else x * x for x in items]
    assert map_ranks(_square_or_refuse, items) == want
    monkeypatch.setenv(JOBS_ENV, "1")
    assert jobs_for(100) == 1
    assert map_ranks(_square_or_refuse, items) == want


def test_jobs_follow_the_cores_and_the_items(monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    assert jobs_for(1) == 1
    assert jobs_for(10_000) == len(os.sched_getaffinity(0))


def test_one_process_inside_a_daemonic_worker():
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(jobs_for, (100,)) == 1
        assert pool.apply(map_ranks, (_square_or_refuse, [1, 2, 3])) == [1, 4, 9]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Four ranks of the standard synthetic trace and a file that is not JSON."""
    d = tmp_path_factory.mktemp("ranks")
    for r in range(4):
        one_rank_trace(d / f"rank{r}.pt.trace.json", steps=(3, 4, 5, 6 + r),
                       distributedInfo={"rank": r, "world_size": 4})
    (d / "rank9.pt.trace.json").write_text("{not json")
    return d


def test_a_folder_calibrates_alike_in_one_process_and_in_several(folder, monkeypatch):
    monkeypatch.delenv(JOBS_ENV, raising=False)
    pooled = calibrate_gpu(folder, coarse=False)
    monkeypatch.setenv(JOBS_ENV, "1")
    alone = calibrate_gpu(folder, coarse=False)
    assert pooled.model_dump_json() == alone.model_dump_json()
    assert [r.rank for r in pooled.ranks] == [0, 1, 2, 3]
    assert any("rank9.pt.trace.json: not valid JSON" in w for w in pooled.meta.warnings)


def test_a_slim_table_keeps_only_the_events_whose_args_fits_read(tmp_path):
    def annotate(ev):
        ev.append({"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 1,
                   "tid": 100, "ts": 1_000_010.0, "dur": 5.0,
                   "args": {"Input Dims": [[4, 4]], "Input type": ["float"]}})
    table = build_table(load_trace(one_rank_trace(tmp_path / "t.json", change=annotate)))
    slim = table.slim()
    kept = [i for i in range(len(slim)) if slim.names[i] == "nccl:all_reduce"]
    assert len(slim._raw.events) == len(kept) == 1
    assert slim.args(kept[0])["Input Dims"] == [[4, 4]]
    with pytest.raises(LookupError):
        slim.event(0)
    for c in table._COLUMNS:
        assert getattr(slim, c) is getattr(table, c)   # the columns are shared, not copied


def test_a_fit_from_a_worker_opens_its_ops_and_tasks_on_first_use(folder):
    """A pickled RankFit (what a worker sends back) holds its host ops and device tasks packed;
    unpickled, they open on first use equal to the fit's, the rest is there at once."""
    import pickle

    from stepsim.calibration.gpu import fit_rank

    fit = fit_rank(build_table(load_trace(folder / "rank1.pt.trace.json")))
    back = pickle.loads(pickle.dumps(fit))
    assert "_packed" in back.__dict__ and "ops" not in back.__dict__
    assert back.rank == 1 and back.collectives == fit.collectives   # not packed
    assert back.ops == fit.ops and back.streams == fit.streams and back.ops
    assert "_packed" not in back.__dict__
    assert pickle.loads(pickle.dumps(back)) == fit   # packed again, opened again
    with pytest.raises(AttributeError):
        back.no_such_field
