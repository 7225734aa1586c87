"""A model with no parallel part of the step (fresh11's HF capture under load, 2026-12-07: 2
intra-op threads, CPU time within the wall time) holds no intra-op team: the team's stall
``γ`` (``host.team_stall``) acts on nothing, so the interval does not draw it and the
what-if's warnings do not describe a team the model does not have; they say once that the
threads' stall is unpriced, and what to do."""
from __future__ import annotations

import pytest

from stepsim.models.simulate import simulate
from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.draws import uncertain_params
from stepsim.scenarios.op_text import parse_set
from tests.test_host_physics import host_model


def _model(parallel: float):
    """2 intra-op threads on 2 cores at 0 workers, ``γ`` drawn over 1–10 (calibration's
    prior)."""
    m = host_model(0, 2, 5.0, 20.0, threads=2, parallel=parallel)
    return m.model_copy(update={"host": m.host.model_copy(update={
        "team_stall": 5.5, "team_stall_range": (1.0, 10.0)})})


@pytest.mark.parametrize("workers", [1, 2])
def test_no_team_no_stall_drawn_nor_a_team_described(workers):
    ops = [parse_set(f"loader.num_workers={workers}")]
    varied, skipped = uncertain_params(_model(0.0), ops)
    assert "host.team_stall" not in varied and "no intra-op team" in skipped["host.team_stall"]
    got = caveats(_model(0.0), ops)
    assert not [c for c in got if "busy worker(s)" in c or "a team of" in c]
    hit = [c for c in got if "intra-op threads" in c]
    assert len(hit) == 1 and "no parallel part" in hit[0] and len(hit[0]) <= 300
    assert "torch.set_num_threads(1)" in hit[0] and "quiet machine" in hit[0]
    assert hit[0].startswith("oversubscribed intra-op threads: 2 beside")   # as sweep finds it
    # the same model with a parallel part keeps both, and draws γ
    varied, _ = uncertain_params(_model(0.8), ops)
    assert varied["host.team_stall"] == (1.0, 10.0)
    assert [c for c in caveats(_model(0.8), ops) if "busy worker(s)" in c]


def test_gamma_changes_nothing_without_a_team():
    """Why it is not drawn: the step at γ 1 and γ 10 is the same, to the bit, beside two busy
    workers on 2 cores (with a parallel part it is not: γ acts while every team thread's core
    has a runnable worker)."""
    def steps(parallel, gamma):
        m = host_model(2, 2, 60.0, 20.0, threads=2, parallel=parallel)
        m = m.model_copy(update={"host": m.host.model_copy(update={"team_stall": gamma})})
        return simulate(m, steps=60, warmup=10, seed=0).job_step_us.tolist()
    assert steps(0.0, 1.0) == steps(0.0, 10.0)
    assert steps(0.8, 1.0) != steps(0.8, 10.0)
