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


def _scaled(shared, x):
    if x == 2:
        raise ModelError(f"item {x} is bad")
    return shared["k"] * x


def _nested(shared, x):
    # an in-process run_many inside a forked worker leaves the worker's shared value alone
    inner = run_many(_scaled, [x], jobs=1, shared={"k": 100})
    return inner[0] + _scaled(shared, x)


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_many_shared_goes_first_to_every_call(monkeypatch, jobs):
    monkeypatch.delenv("STEPSIM_EXECUTOR", raising=False)
    shared = {"k": 3}
    assert run_many(_scaled, [1, 3, 4, 5], jobs=jobs, shared=shared) == [3, 9, 12, 15]
    assert run_many(_nested, [1, 3, 4, 5], jobs=jobs, shared=shared) == [103, 309, 412, 515]
    with pytest.raises(ModelError, match="item 2 is bad"):
        run_many(_scaled, [1, 2, 3], jobs=jobs, shared=shared)
    import stepsim.scenarios.parallel as par
    assert par._shared is par._NOT_SHARED   # let go after the call, also after an error



def _pid_once(path):
    """This process's id once ``path`` exists (None after 60 s without it)."""
    import os
    import time

    end = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > end:
            return None
        time.sleep(0.01)
    return os.getpid()


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_many_meanwhile_runs_once_here_while_the_items_run(monkeypatch, tmp_path, jobs):
    import os

    monkeypatch.delenv("STEPSIM_EXECUTOR", raising=False)
    flag = tmp_path / "meanwhile"
    calls = []

    def meanwhile():   # the items wait for it: called after them, they would time out
        calls.append(os.getpid())
        flag.touch()

    pids = run_many(_pid_once, [str(flag)] * 3, jobs=jobs, meanwhile=meanwhile)
    assert calls == [os.getpid()]
    assert None not in pids
    assert (set(pids) == {os.getpid()}) == (jobs == 1)   # jobs 2: in the forked workers
