"""The released ranks' training threads on one core after a barrier (models.cpu_co): closed
forms of two threads released together onto k cores, and the barrier what-if that sets it."""
from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.models.cpu import CpuPool
from stepsim.models.cpu_co import SLICE_US, co_core_work
from stepsim.models.params import StepModel
from stepsim.scenarios import ddp_release
from stepsim.scenarios.ddp_release import released_on_one_core


def _released(cores: int, q: float, work: list[float], shared: float, at: list[float],
              gloo: float = 0.0):
    """Threads arriving at ``at`` (µs), each running its ``work`` on the shared core until
    ``shared`` µs after the second joined, the rest on the pool; with ``gloo``, one more
    thread of that much pool work from 0 (a gloo thread beside them). Returns (ends, core
    time each advanced)."""
    env = simpy.Environment()
    pool = CpuPool(env, cores, contended=True, quantum_us=q)
    ends, cores_used = {}, {}

    def thread(i):
        yield env.timeout(at[i])
        c, left = yield from co_core_work(pool, work[i], 0.0, shared)
        c += yield from pool.work(left)
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


def test_two_threads_released_together_share_one_core_for_d_then_spread():
    """Both released at 0 with W µs each, sharing one core for D (a multiple of two slices):
    they alternate slices, each advancing D/2, then each has a core for W − D/2: both end at
    W + D/2. Without the shared core (D = 0) both end at W."""
    W, D, q = 8_000.0, 4 * SLICE_US, 500.0
    ends, used = _released(2, q, [W, W], D, [0.0, 0.0])
    assert ends == pytest.approx({0: W + D / 2, 1: W + D / 2})
    assert used == pytest.approx({0: W, 1: W})
    alone, _ = _released(2, q, [W, W], 0.0, [0.0, 0.0])
    assert alone == pytest.approx({0: W, 1: W})


def test_the_first_released_runs_alone_until_the_second_joins():
    """The second released a (two slices) after the first: the first runs a alone at full
    speed, then they share D: ends W + D/2 and a + W + D/2."""
    W, D, a = 8_000.0, 4 * SLICE_US, 2 * SLICE_US
    ends, _ = _released(2, 500.0, [W, W], D, [0.0, a])
    assert ends == pytest.approx({0: W + D / 2, 1: a + W + D / 2})


def test_the_shared_core_leaves_the_other_core_to_a_gloo_thread():
    """Two released threads of two slices each, sharing for four slices, and a gloo thread of
    G µs on 2 cores: the gloo thread has the other core at once (G), the pair alternates
    slices on theirs and ends at 3 and 4 slices."""
    G = 1_500.0
    ends, _ = _released(2, 500.0, [2 * SLICE_US] * 2, 4 * SLICE_US, [0.0, 0.0], gloo=G)
    assert ends["gloo"] == pytest.approx(G)
    assert sorted([ends[0], ends[1]]) == pytest.approx([3 * SLICE_US, 4 * SLICE_US])


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 3), st.lists(st.floats(100.0, 20_000.0), min_size=2, max_size=2),
       st.floats(0.0, 10_000.0), st.lists(st.floats(0.0, 5_000.0), min_size=2, max_size=2),
       st.sampled_from([250.0, 1_000.0, 2_000.0]))
def test_every_thread_gets_its_work_and_waits_at_most_half_the_shared_time(cores, work, d,
                                                                           at, q):
    """Two released threads on 2-3 cores, whatever their works, shared time, release times
    and the pool's quantum: each thread's core time is its work, it ends no earlier than its
    release plus its work, and no later than without the shared core plus half the shared
    time and a slice and a quantum of turn-taking."""
    ends, used = _released(cores, q, work, d, at)
    alone, _ = _released(cores, q, work, 0.0, at)
    for i, w in enumerate(work):
        assert used[i] == pytest.approx(w)
        assert ends[i] >= at[i] + w - 1e-6
        assert ends[i] <= alone[i] + d / 2 + SLICE_US + q + 1e-6


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
    (to the bit); more makes the step longer, and never by more than the shared time (each
    thread waits at most half the shared time)."""
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
    assert base < steps[1] < steps[2] <= base + 4_000.0
