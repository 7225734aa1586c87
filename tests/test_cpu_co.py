"""The released ranks' training threads on one core after a barrier (models.cpu_co): closed
forms of two threads released together onto k cores, and the barrier what-if that sets it."""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.models.cpu import CpuPool
from stepsim.models.cpu_co import co_core_work
from stepsim.models.params import StepModel
from stepsim.scenarios import ddp_release
from stepsim.scenarios.ddp_release import released_on_one_core


def _released(cores: int, q: float, work: list[float], co: float, at: list[float],
              gloo: float = 0.0):
    """Threads arriving at ``at`` (µs), each running ``co`` µs on the shared core and the rest
    of its ``work`` on the pool; with ``gloo``, one more thread of that much pool work from 0
    (a gloo thread beside them). Returns (ends, core time each returned)."""
    env = simpy.Environment()
    pool = CpuPool(env, cores, contended=True, quantum_us=q)
    ends, cores_used = {}, {}

    def thread(i):
        yield env.timeout(at[i])
        c = yield from co_core_work(pool, min(co, work[i]))
        c += yield from pool.work(work[i] - min(co, work[i]))
        ends[i], cores_used[i] = env.now, c

    def other():
        c = yield from pool.work(gloo)
        ends["gloo"], cores_used["gloo"] = env.now, c

    for i in range(len(work)):
        env.process(thread(i))
    if gloo:
        env.process(other())
    env.run()
    return ends, cores_used


def test_two_threads_released_together_onto_two_cores_share_one_for_their_first_co_us():
    """Both arrive at 0 with W µs each, the first S (a multiple of the quantum q) on one core:
    they alternate quanta there, so the first leaves it at 2S − q and the second at 2S; each
    then has a core of its own for W − S: ends W + S − q and W + S. Without the shared core
    (S = 0) both end at W: the pair's mean step grows by S − q/2."""
    W, S, q = 8_000.0, 3_000.0, 500.0
    ends, used = _released(2, q, [W, W], S, [0.0, 0.0])
    assert sorted(ends.values()) == pytest.approx([W + S - q, W + S])
    assert used == pytest.approx({0: W, 1: W})
    alone, _ = _released(2, q, [W, W], 0.0, [0.0, 0.0])
    assert sorted(alone.values()) == pytest.approx([W, W])


def test_a_thread_alone_on_the_shared_core_runs_at_full_speed():
    """The second thread arrives after the first has left the shared core: neither waits."""
    W, S, q = 8_000.0, 2_000.0, 500.0
    ends, _ = _released(2, q, [W, W], S, [0.0, S + 100.0])
    assert ends == pytest.approx({0: W, 1: S + 100.0 + W})


def test_the_shared_core_leaves_the_other_core_to_a_gloo_thread():
    """Two released threads (S = W: all on the shared core) and a gloo thread of G µs on 2
    cores: the gloo thread has the other core at once (G), the pair ends at 2W on theirs."""
    W, G, q = 4_000.0, 1_500.0, 500.0
    ends, _ = _released(2, q, [W, W], W, [0.0, 0.0], gloo=G)
    assert ends["gloo"] == pytest.approx(G)
    assert sorted([ends[0], ends[1]]) == pytest.approx([2 * W - q, 2 * W])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.lists(st.floats(100.0, 20_000.0), min_size=2, max_size=3),
       st.floats(0.0, 10_000.0), st.lists(st.floats(0.0, 5_000.0), min_size=3, max_size=3),
       st.sampled_from([250.0, 1_000.0, 2_000.0]))
def test_every_thread_gets_its_work_and_none_ends_before_it_could(cores, work, co, at, q):
    """Whatever the cores, works, shared share, arrivals and quantum: each thread's core time
    is its work, it ends no earlier than its arrival plus its work, and the shared core costs
    a thread at most the others' work on it."""
    at = at[:len(work)]
    ends, used = _released(cores, q, work, co, at)
    for i, w in enumerate(work):
        assert used[i] == pytest.approx(w)
        assert ends[i] >= at[i] + w - 1e-6
        others = sum(min(co, v) for j, v in enumerate(work) if j != i)
        alone, _ = _released(cores, q, work, 0.0, at)
        assert ends[i] <= alone[i] + others + q + 1e-6


def _demo_model() -> StepModel:
    from stepsim.models.params import load_model
    return load_model("tests/data/ddp_demo_model.json")


def test_the_what_if_sets_it_only_where_a_barrier_probe_measured_the_release(monkeypatch):
    monkeypatch.setattr(ddp_release, "CO_CORE_US", 2_500.0)
    m = _demo_model()
    probed = m.model_copy(update={"comm": m.comm.model_copy(update={
        "barrier_exit": [(0.0, 400.0), (40_000.0, 1_800.0)]})})
    assert released_on_one_core(probed).comm.barrier_co_core_us == 2_500.0
    bare = m.model_copy(update={"comm": m.comm.model_copy(update={"barrier_exit": []})})
    assert released_on_one_core(bare).comm.barrier_co_core_us == 0.0
    # a value already set is kept; a model without one writes no field
    kept = probed.model_copy(update={"comm": probed.comm.model_copy(update={
        "barrier_co_core_us": 700.0})})
    assert released_on_one_core(kept).comm.barrier_co_core_us == 700.0
    assert "barrier_co_core_us" not in bare.model_dump_json()


def test_the_straggler_and_barrier_step_grows_with_the_shared_core_and_not_without():
    """On the DDP demo's model: 0 µs on the shared core simulates the barrier row as before
    (to the bit); more makes the step longer, and never by more than twice the µs (each
    thread can wait at most for the other's turns there)."""
    from stepsim.models.simulate import simulate
    from stepsim.scenarios.ddp_whatifs import add_straggler, insert_barrier

    m = _demo_model()
    m = m.model_copy(update={"comm": m.comm.model_copy(update={"barrier_exit": []})})
    row = insert_barrier(add_straggler(m, 1, "forward", 40.0))
    steps = []
    for co in (0.0, 2_000.0, 4_000.0):
        x = row.model_copy(update={"comm": row.comm.model_copy(update={
            "barrier_co_core_us": co})})
        steps.append(float(simulate(x, steps=12, warmup=2, seed=0).job_step_us.mean()))
    base = float(simulate(row, steps=12, warmup=2, seed=0).job_step_us.mean())
    assert steps[0] == base
    assert base < steps[1] < steps[2] <= base + 2 * 4_000.0
