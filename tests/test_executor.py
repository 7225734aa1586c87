"""The executor behind sweeps, draws and plans: local process pool by default, a Dask local
cluster when ``STEPSIM_EXECUTOR=dask``; same results either way."""
from __future__ import annotations

import pytest

from stepsim.scenarios.parallel import executor_name, run_many
from stepsim.scenarios.sweep import sweep
from stepsim.simcore.errors import ModelError
from tests.test_planner import SIM, cpu_model


def _bad(x):
    if x == 2:
        raise ModelError(f"item {x} is bad")
    return x * x


def test_executor_name(monkeypatch):
    monkeypatch.delenv("STEPSIM_EXECUTOR", raising=False)
    assert executor_name() == "local"
    monkeypatch.setenv("STEPSIM_EXECUTOR", "dask:tcp://127.0.0.1:8786")
    assert executor_name() == "dask:tcp://127.0.0.1:8786"
    monkeypatch.setenv("STEPSIM_EXECUTOR", "slurm")
    with pytest.raises(ModelError, match="STEPSIM_EXECUTOR"):
        executor_name()


def test_sweep_on_a_dask_local_cluster_matches_the_local_pool(monkeypatch):
    pytest.importorskip("dask.distributed")
    model = cpu_model(workers=1, produce_us=12_000)
    grid = {"loader.num_workers": [0, 1, 2, 4]}
    monkeypatch.delenv("STEPSIM_EXECUTOR", raising=False)
    local = sweep(model, grid, jobs=2, **SIM)
    monkeypatch.setenv("STEPSIM_EXECUTOR", "dask")
    seen = []
    remote = sweep(model, grid, jobs=2, progress=lambda d, n: seen.append((d, n)), **SIM)
    assert [p.prediction.median_step_us for p in remote.points] == \
        [p.prediction.median_step_us for p in local.points]
    assert seen[-1] == (4, 4)
    with pytest.raises(ModelError, match="item 2 is bad"):
        run_many(_bad, [1, 2, 3], jobs=2)
