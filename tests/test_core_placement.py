"""Per-core placement beside torch's intra-op team (models/cpu_place.py), in closed form: a
worker that woke shares one core's queue with a team thread (half a core each, measured) while
the other team thread keeps its core, so the team advances at its slowest thread's share; a
worker runnable longer than BALANCE_AFTER_US is balanced over the cores (the fair pool)."""
from __future__ import annotations

import pytest
import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.cpu_place import (BALANCE_AFTER_US, balanced_share, placed_share,
                                      team_rate)


def _region(workers: int, p_us: float, w_us: float, stall: float, start_us: float = 0.0,
            pieces: int = 1, team: int = 2) -> dict:
    """A region of ``team`` threads, ``p_us`` of work each, from ``start_us``, beside
    ``workers`` DataLoader-like threads (named, so placed when they wake) each running
    ``w_us`` of work from 0 in ``pieces`` back-to-back calls, on 2 contended cores."""
    env = simpy.Environment()
    pool = CpuPool(env, 2, contended=True, stall=stall)
    out = {"core_us": [0.0] * workers, "w_end_us": [0.0] * workers}

    def worker(i):
        for _ in range(pieces):
            out["core_us"][i] += yield from pool.work(w_us / pieces, thread=("r", i))
        out["w_end_us"][i] = env.now

    def region():
        yield env.timeout(start_us)
        out["advanced_us"] = yield from pool.parallel_work(team * p_us, team)
        out["end_us"] = env.now - start_us

    for i in range(workers):
        env.process(worker(i))
    env.process(region())
    env.run()
    return out


@pytest.mark.parametrize("stall", [1.0, 2.27, 10.0])
def test_one_worker_that_woke_halves_the_team_whatever_gamma(stall):
    """A team of 2 on 2 cores beside 1 worker that woke: the worker and one team thread share
    a core (1/2 each), the other team thread spins on its own: the team ends at P / (1/2)
    (the fair pool: P / (2/3)^(1+γ), ×2.25 at γ 1, ×57.7 at γ 10); the worker, W of work,
    had half a core till then: it ends at 2P + (W − P)."""
    p_us = 50_000.0
    out = _region(1, p_us, 10 * p_us, stall)
    assert out["advanced_us"] == pytest.approx(p_us)
    assert out["end_us"] == pytest.approx(2 * p_us, rel=5e-3)
    assert out["core_us"][0] == pytest.approx(10 * p_us)
    assert out["w_end_us"][0] == pytest.approx(2 * p_us + 9 * p_us, rel=5e-3)


def test_without_workers_the_team_is_unchanged():
    out = _region(0, 50_000.0, 0.0, 5.0)
    assert out["end_us"] == pytest.approx(50_000.0)


@pytest.mark.parametrize("stall", [1.0, 2.0])
def test_two_workers_one_per_core(stall):
    """Two workers that woke go one per core (the least-loaded queue): every thread holds half
    a core, each core on its own: the team advances at (1/2)^(1+γ) (measured beside two
    spinners: ×4.17 median, γ 1.06)."""
    p_us = 20_000.0
    out = _region(2, p_us, 20 * p_us, stall)
    assert out["end_us"] == pytest.approx(p_us / 0.5 ** (1 + stall), rel=5e-3)


def test_a_worker_runnable_past_the_balance_time_gets_the_fair_share():
    """A worker runnable since 0 in back-to-back pieces, a region from past BALANCE_AFTER_US:
    the worker has been balanced over the cores, so the fair pool holds: 3 threads on 2 cores,
    s = 2/3, the team advancing at s^(1+γ) (measured: an always-busy worker held 0.68–0.73 of
    a core beside the team)."""
    p_us, stall = 20_000.0, 1.5
    pieces = int(10 * BALANCE_AFTER_US / 2_000)   # the pool's 2 ms quanta, as the hogs'
    out = _region(1, p_us, 10 * BALANCE_AFTER_US, stall, start_us=1.2 * BALANCE_AFTER_US,
                  pieces=pieces)
    assert out["end_us"] == pytest.approx(p_us / (2 / 3) ** (1 + stall), rel=0.01)


def test_a_worker_that_sleeps_between_pieces_stays_placed():
    """The same worker with gaps (a new index each time) wakes each piece: placed, the team
    at 1/2 however long the worker has run in all."""
    env = simpy.Environment()
    pool = CpuPool(env, 2, contended=True, stall=3.0)
    out = {}

    def worker():
        while True:
            yield from pool.work(20_000.0, thread=("r", 0))
            yield env.timeout(1.0)

    def region():
        yield env.timeout(2 * BALANCE_AFTER_US)
        t0 = env.now
        yield from pool.parallel_work(2 * 10_000.0, 2)
        out["end_us"] = env.now - t0

    env.process(worker())
    env.process(region())
    env.run(until=4 * BALANCE_AFTER_US)
    assert out["end_us"] == pytest.approx(20_000.0, rel=0.05)


def test_named_threads_without_a_team_share_the_pool_fairly():
    """Placement is beside a team only: three named threads on 2 cores get 2/3 each."""
    env = simpy.Environment()
    pool = CpuPool(env, 2, contended=True)
    ends = []

    def t(i):
        yield from pool.work(100_000.0, thread=("r", i))
        ends.append(env.now)

    for i in range(3):
        env.process(t(i))
    env.run()
    assert max(ends) == pytest.approx(150_000.0, rel=0.02)


def test_shares_add_up_to_the_cores():
    """Team threads on both cores, one placed worker on core 1, one balanced thread: core
    time adds up to 2 cores; the placed worker's core shared by 2.5 threads."""
    loads = [1, 2]   # core 0: a team thread; core 1: a team thread and the placed worker
    s0, s1 = placed_share(loads, 1, 0), placed_share(loads, 1, 1)
    b = balanced_share(loads, 1)
    assert s0 == pytest.approx(1 / 1.5) and s1 == pytest.approx(1 / 2.5)
    assert s0 + 2 * s1 + b == pytest.approx(2.0)
    assert team_rate([1.0, 0.5], 7.0) == pytest.approx(0.5)
    assert team_rate([2 / 3, 2 / 3], 2.0) == pytest.approx((2 / 3) ** 3)
