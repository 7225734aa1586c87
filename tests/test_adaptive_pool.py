"""A core pool that can be contended, run adaptively (models/cpu.py: CPU work as one timeout
and the host thread running ahead while the threads that may be runnable fit the cores)
against the same processes with every piece of CPU work in quanta (``engine="quanta"``):
same step times, spans, task runs, host waits and queue depths, whether the pool goes free,
stays contended or has to run again (``Oversubscribed``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import stepsim.models.cpu as cpu_mod
from stepsim.models.params import (DeviceParams, DeviceTask, DurationSpec, HostOp, HostParams,
                                   LoaderParams, RankParams, StepModel)
from stepsim.models.simulate import simulate
from tests.test_solo import assert_rows, assert_same_records
from tests.test_solo_loader import _depths, _spans, models

MS = 1000.0


@pytest.fixture
def pools(monkeypatch):
    """Every CpuPool made, and how many times one raised Oversubscribed."""
    made, raised = [], []
    init, claim = cpu_mod.CpuPool.__init__, cpu_mod.CpuPool.claim

    def tracked_init(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    def tracked_claim(self, threads):
        try:
            claim(self, threads)
        except cpu_mod.Oversubscribed:
            raised.append(self)
            raise

    monkeypatch.setattr(cpu_mod.CpuPool, "__init__", tracked_init)
    monkeypatch.setattr(cpu_mod.CpuPool, "claim", tracked_claim)
    return made, raised


def assert_same_as_quanta(m: StepModel, steps: int = 8, warmup: int = 2, seed: int = 0):
    a = simulate(m, steps=steps, warmup=warmup, seed=seed, engine="quanta")
    b = simulate(m, steps=steps, warmup=warmup, seed=seed, engine="events")
    assert_same_records(b, a, spans=_spans)
    assert _depths(b) == _depths(a)
    assert b.loader_stats[0].consumed == a.loader_stats[0].consumed
    assert b.loader_stats[0].max_outstanding == a.loader_stats[0].max_outstanding
    # the default engine runs these processes too (a contended pool is never solved)
    c = simulate(m, steps=steps, warmup=warmup, seed=seed)
    np.testing.assert_allclose(c.step_us, b.step_us, rtol=1e-12, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(models(), st.integers(1, 4), st.integers(0, 3))
def test_adaptive_pool_matches_quanta(m, cores, seed):
    """The loader models of test_solo_loader on 1-4 cores (contended when they have more
    threads)."""
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores
    assert_same_as_quanta(m, steps=10, warmup=2, seed=seed)


def _pipeline(nw: int, produce_us: float, consume_us: float, cores: int,
              **kw) -> StepModel:
    """A step of one next(), ``consume_us`` of host CPU work and a launch of 30 ms of device
    work, synced."""
    ops = [HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=consume_us),
           HostOp(kind="launch", task="k", dur_us=50.0), HostOp(kind="sync")]
    return StepModel(
        loader=LoaderParams(num_workers=nw, produce=DurationSpec(mean_us=produce_us, cv=0.2),
                            host_cores=cores, **kw),
        host=HostParams(ops=ops),
        device=DeviceParams(streams={"7": [DeviceTask(id="k", stream="7", dur_us=30 * MS)]}))


def test_a_pool_whose_workers_go_idle_runs_free(pools):
    """4 workers and the host thread on 4 cores: contended while the prefetch queue fills,
    then one worker at a time (the device is the bottleneck): the pool goes free, same
    output."""
    made, raised = pools
    m = _pipeline(4, 20 * MS, 2 * MS, cores=4)
    assert_same_as_quanta(m, steps=20, warmup=3)
    adaptive = [p for p in made if p.adaptive and p.env.now > 0]   # solved() makes one too
    assert len(adaptive) == 2 and all(p.contended for p in adaptive)
    assert all(p.went_free > 0 for p in adaptive) and not raised
    assert all(p.went_free == 0 for p in made if not p.adaptive)


def test_a_pool_that_stays_oversubscribed_never_goes_free(pools):
    """Producer-bound: 4 workers busy all along on 2 cores with the host thread."""
    made, raised = pools
    m = _pipeline(4, 100 * MS, 2 * MS, cores=2)
    assert_same_as_quanta(m, steps=10, warmup=2)
    assert not raised
    assert all(p.went_free == 0 for p in made)


def test_claims_passing_the_cores_during_a_timeout_run_again(pools):
    """2 workers, prefetch 1, on 2 cores with the host thread: a worker's batch (one timeout
    while the other is idle) is still running when next() sends the other its index: the run
    is redone in quanta, same output."""
    made, raised = pools
    m = _pipeline(2, 45 * MS, 1 * MS, cores=2, prefetch_factor=1)
    assert_same_as_quanta(m, steps=12, warmup=2)
    assert raised


@settings(max_examples=25, deadline=None)
@given(models(), st.integers(1, 4), st.integers(2, 3), st.integers(0, 3))
def test_adaptive_pool_with_an_intra_op_team_matches_quanta(m, cores, team, seed):
    """A host op with a parallel part on ``team`` threads (claimed all along)."""
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores
    m.host.uses_core = True
    m.host.ops.insert(0, HostOp(kind="cpu", dur_us=3 * MS, threads=team, parallel_fraction=0.5))
    assert_same_as_quanta(m, steps=8, warmup=2, seed=seed)


def test_two_ranks_on_one_host_claim_its_cores_together(pools):
    """Two ranks on host ``a``, each with 2 workers, on 4 cores: their claims add up (6
    while the queues fill, then the two host threads and a worker now and then)."""
    made, raised = pools
    m = _pipeline(2, 5 * MS, 2 * MS, cores=4).model_copy(deep=True)
    m.ranks = [RankParams(rank=0, host="a"), RankParams(rank=1, host="a")]
    a = simulate(m, steps=10, warmup=2, engine="quanta")
    b = simulate(m, steps=10, warmup=2, engine="events")
    np.testing.assert_allclose(b.step_us, a.step_us, rtol=1e-12, atol=1e-6)
    assert_rows(_spans(b), _spans(a))
    ran = [p for p in made if p.adaptive and p.env.now > 0]
    assert len(ran) == 1 and ran[0].went_free > 0 and not raised
    assert ran[0].claims >= 2     # the two host threads, claimed all along
