"""More DataLoader workers than keep up with the step change nothing in the prediction, by the
model's physics, not by ignoring them: the prefetch queue fills, the extra workers wait for
indices (not runnable), so they add neither throughput nor contention; while the step is
input-bound, each worker added does change it (here: beside a stalled intra-op team)."""
from __future__ import annotations

import pytest

from stepsim.models.metrics import summarize
from stepsim.models.simulate import simulate
from tests.test_host_physics import host_model


def _run(nw: int, produce_ms: float):
    """A 35 ms step, 90 % parallel on torch's default 2 threads, on 2 cores."""
    r = simulate(host_model(nw, 2, produce_ms, 35.0, threads=2, parallel=0.9), steps=200,
                 warmup=30)
    s = summarize(r)
    worker_us = sum(v for k, v in s.lane_busy.items() if "worker" in k) * r.mean_step_us
    return r.mean_step_us / 1e3, worker_us / 1e3


def test_workers_beyond_keeping_up_are_idle():
    """79 ms a batch (the new user's 2-core case): 2 workers keep up, so 2, 3, 4 and 8 give
    one step (95.12–95.13 ms) and do one batch of CPU (79 ms) per step; one worker cannot. The
    step moves by 0.01 % with which worker makes a batch: a worker that goes straight on to its
    next batch keeps the core it was placed on, one that woke is placed afresh."""
    steps = {nw: _run(nw, 79.0) for nw in (1, 2, 3, 4, 8)}
    assert steps[1][0] > steps[2][0] * 1.05
    for nw in (3, 4, 8):
        assert steps[nw][0] == pytest.approx(steps[2][0], rel=1e-3)
    for nw in (2, 4, 8):
        assert steps[nw][1] == pytest.approx(79.0, rel=1e-6)


def test_workers_count_while_input_bound():
    """300 ms a batch: the workers cannot keep up at 2, so a third and a fourth runnable
    worker change the step (the team stalls more beside them)."""
    two, four = _run(2, 300.0)[0], _run(4, 300.0)[0]
    assert abs(four - two) > 0.05 * two
