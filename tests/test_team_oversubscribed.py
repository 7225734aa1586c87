"""A team of more intra-op threads than cores does not stall itself: libgomp spins 100 times,
not 300,000, before a waiting thread sleeps when its threads outnumber the CPUs (the
``GOMP_SPINCOUNT`` documentation), so its threads share the cores. Before, the stall exponent
``γ (T − 1)`` applied there too: 8 threads on 2 cores advanced at ``(1/4)^(1 + 7γ)`` and a
simulation of 30 steps did not end."""
from __future__ import annotations

import simpy

from stepsim import api
from stepsim.models.cpu import CpuPool
from tests.test_host_physics import host_model


def test_coupling_of_a_team_larger_than_the_cores_is_one():
    pool = CpuPool(simpy.Environment(), cores=2, contended=True, stall=10.0)
    pool.active = 4
    assert pool.coupling(team=4) == 1.0          # T > c: no stall, whatever γ
    assert pool.coupling(team=2) == (2 / 4) ** 10.0   # T ≤ c beside others: (c/R)^(γ(T−1))


def test_eight_threads_on_two_cores_simulate_and_do_not_depend_on_the_stall():
    steps = []
    for stall in (1.0, 10.0):
        m = host_model(2, 2, 5.0, 20.0, threads=8, parallel=0.8)
        m.host.team_stall = stall
        steps.append([r["step_ms"] for r in api.simulate(m, steps=20, seed=0).rows()])
    assert steps[0] == steps[1]
