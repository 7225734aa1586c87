"""A folder's GPU ranks fitted in the worker that read them (calibration.fitted_table, issue
11): the same model, warnings and skipped files as reading every table back and fitting it in
a second pool; a fit that fails names its file; another job's file is left out unfitted."""
from __future__ import annotations

import pytest

from stepsim.calibration.fitted_table import FittedTable
from stepsim.calibration.folders import read_folder
from stepsim.calibration.gpu import calibrate_gpu_pending
from stepsim.calibration.rank_pool import JOBS_ENV
from stepsim.fit import calibrate, calibrate_gpu
from tests.kineto_gen import one_rank_trace


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Three ranks of a job of 3, a GPU file whose fit fails (its kernels alone: no step), a
    file of another job (world size 8), a file that is not JSON."""
    d = tmp_path_factory.mktemp("fitted")
    for r in range(3):
        one_rank_trace(d / f"rank{r}.pt.trace.json", steps=(3, 4, 5, 6 + r),
                       distributedInfo={"rank": r, "world_size": 3})

    def kernels_alone(ev):
        ev[:] = [e for e in ev if e.get("cat") == "kernel"]
    one_rank_trace(d / "rank3.pt.trace.json", change=kernels_alone,
                   distributedInfo={"rank": 3, "world_size": 3})
    one_rank_trace(d / "rank4.pt.trace.json", distributedInfo={"rank": 4, "world_size": 8})
    (d / "rank9.pt.trace.json").write_text("{not json")
    return d


@pytest.mark.parametrize("jobs", ["1", None])
def test_fitted_in_the_reader_equals_fitted_after(folder, monkeypatch, jobs):
    if jobs is None:
        monkeypatch.delenv(JOBS_ENV, raising=False)
    else:
        monkeypatch.setenv(JOBS_ENV, jobs)
    after = calibrate_gpu_pending(read_folder(folder)).model   # tables back, fitted in a pool
    fold = read_folder(folder)
    assert not any(isinstance(t, FittedTable) for t in fold.gpu)
    read_fitted = read_folder(folder, _fit_one())
    assert all(isinstance(t, FittedTable) for t in read_fitted.gpu)
    within = calibrate_gpu_pending(folder).model             # the path: fitted in the reader
    assert within.model_dump_json() == after.model_dump_json()
    assert [r.rank for r in within.ranks] == [0, 1, 2]
    text = " ".join(within.meta.warnings)
    assert "rank3.pt.trace.json: no training step found" in text and "rank9.pt.trace.json: not valid JSON" in text
    assert "rank4.pt.trace.json (world size 8)" in text
    assert calibrate_gpu(folder).model_dump_json() == calibrate(folder).model_dump_json()


def _fit_one():
    from functools import partial

    from stepsim.calibration.gpu import fit_one

    return partial(fit_one, step_regex=None)
