"""Without workers the main process makes its batches on a worker's threads
(``loader.threads_per_worker``): the library threads a worker's process runs beside its own
(numpy's OpenBLAS team, fresh7's audio job) run in the main process too (issue 10, stall19)."""
from __future__ import annotations

import pytest

from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.scenarios.noop import unread_params

P_US, C_US = 40_000.0, 10_000.0
"""A batch's work (µs of CPU, on all its threads) and the training step's."""


def _model(tpw: int, cores: int, team: int = 1) -> StepModel:
    op = {"kind": "cpu", "dur_us": C_US}
    if team > 1:
        op.update(threads=team, parallel_fraction=1.0)
    return StepModel.model_validate({
        "loader": {"num_workers": 0, "produce": {"mean_us": P_US}, "host_cores": cores,
                   "threads_per_worker": tpw},
        "host": {"ops": [{"kind": "next_batch"}, op]}})


def _step_us(m: StepModel) -> float:
    return simulate(m, steps=30, warmup=5, seed=0).mean_step_us


@pytest.mark.parametrize("tpw,cores,team,want", [
    (1, 2, 1, P_US + C_US),          # one thread: as before
    (2, 2, 1, P_US / 2 + C_US),      # two threads on two cores (solved without events)
    (2, 1, 1, P_US + C_US),          # two threads sharing one core
    (2, 2, 2, P_US / 2 + C_US),      # beside a 2-thread team that is idle meanwhile (SimPy)
    (4, 2, 1, P_US / 2 + C_US),      # four threads on two cores
])
def test_the_main_process_batch_runs_on_a_workers_threads(tpw, cores, team, want):
    """A batch of P µs of work on ``tpw`` threads, then a step of C µs: P / min(tpw, cores)
    + C a step."""
    assert _step_us(_model(tpw, cores, team)) == pytest.approx(want, rel=1e-3)


def test_threads_per_worker_is_read_at_zero_workers_only_past_one():
    assert "loader.threads_per_worker" in unread_params(_model(1, 2))
    assert "loader.threads_per_worker" not in unread_params(_model(2, 2))
