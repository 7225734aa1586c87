"""models.cores.Cores against simpy.Resource: the same workload gives the same trace of
grants, releases and event order, ties included (integer durations make many), and a gloo
DDP model (whose gloo wake-ups and training threads take cores every few hundred µs)
simulates to the same spans and step times, bit for bit, on either."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.models import cpu
from stepsim.models.cores import Cores
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate

DATA = Path(__file__).parent / "data"


def _trace(make, seed: int, procs: int, cap: int, rounds: int) -> list[tuple]:
    """Each of ``procs`` processes takes a core ``rounds`` times (some with a deadline, as
    ``CpuPool.hold`` does, some leaving before it was granted), holding it an integer number
    of µs; every grant, give-up and release with its instant and the queue's eid order."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    res = make(env, cap)
    out: list[tuple] = []
    plan = [[(int(rng.integers(0, 4)), int(rng.integers(1, 5)), int(rng.integers(0, 3)))
             for _ in range(rounds)] for _ in range(procs)]

    def proc(i):
        for gap, hold, how in plan[i]:
            if gap:
                yield env.timeout(gap)
            with res.request() as req:
                if how == 0:   # a deadline, as CpuPool.hold's turn for a core
                    got = yield req | env.timeout(2)
                    if req not in got:
                        out.append((env.now, i, "gave up", len(res.queue)))
                        continue
                else:
                    yield req
                out.append((env.now, i, "got", res.count, len(res.queue)))
                yield env.timeout(hold)
            out.append((env.now, i, "released", res.count))
            # the next event in the queue: the order ties are taken in
            out.append(("next", env.peek()))

    for i in range(procs):
        env.process(proc(i))
    env.run()
    return out


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 31), procs=st.integers(1, 6), cap=st.integers(1, 3))
def test_cores_trace_is_simpy_resources(seed, procs, cap):
    want = _trace(lambda env, c: simpy.Resource(env, capacity=c), seed, procs, cap, 12)
    got = _trace(Cores, seed, procs, cap, 12)
    assert got == want


def test_cores_count_and_queue():
    env = simpy.Environment()
    cores = Cores(env, 2)
    a, b, c = cores.request(), cores.request(), cores.request()
    assert cores.count == 2 and cores.queue == [c]
    assert a.triggered and b.triggered and not c.triggered
    cores.release(a)
    assert cores.count == 1 and not c.triggered   # granted when the release is processed
    env.run()
    assert c.triggered and cores.count == 2 and cores.queue == []
    with pytest.raises(ValueError):
        Cores(env, 0)


@pytest.mark.parametrize("seed", [0, 3])
def test_ddp_model_same_on_simpy_resource(monkeypatch, seed):
    m = StepModel.model_validate_json((DATA / "ddp_demo_model.json").read_text())
    a = simulate(m, steps=30, warmup=5, seed=seed, keep="all")
    monkeypatch.setattr(cpu, "Cores", lambda env, c: simpy.Resource(env, capacity=c))
    b = simulate(m, steps=30, warmup=5, seed=seed, keep="all")
    assert list(a.job_step_us) == list(b.job_step_us)
    assert a.spans == b.spans and list(a.runs) == list(b.runs)
