"""A simulation continued to a larger step count (models/extend.py) is, to the bit, the run
of that count from step 0: the step times at each count on the way, and at the end every
span, task run, host wait, step start and mark and the loader's counts; and the step-count
rule (models/stepcount.py) that uses it chooses the count it chose before and simulates each
step once."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from stepsim.models import processes, run_memo, stepcount
from stepsim.models.extend import Extending, processes_only
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.models.stepcount import FIRST_STEPS, simulate_counted
from stepsim.scenarios.transforms import SetOp, apply_ops
from stepsim.simcore.errors import SimulationError
from tests.conftest import shared_traces
from tests.test_run_memo import DEMO, _same as same_records
from tests.test_solo_ranks import rank_models


@pytest.fixture(scope="module")
def ddp() -> StepModel:
    return StepModel.model_validate_json(DEMO.read_text())


def _same(a, b) -> None:
    """Two results equal to the bit (the memo's check, and the window and loader's peak)."""
    same_records(a, b)
    assert a.window_us == b.window_us and a.warmup == b.warmup
    assert a.every_span() == b.every_span() and a.max_outstanding == b.max_outstanding


def _check(m: StepModel, counts, warmup: int, seed: int, keep: str, engine: str = "auto"):
    """Extending ``m`` through ``counts`` gives each count's step times and, at the last,
    the whole result of ``simulate`` at that count; returns the run."""
    run = Extending(m, warmup, seed, keep)
    for n in counts:
        fresh = simulate(m, steps=n, warmup=warmup, seed=seed, keep=keep, engine=engine)
        np.testing.assert_array_equal(run.job_step_us(n), fresh.job_step_us)
    _same(run.result(), fresh)
    return run


@pytest.mark.parametrize("keep", ["all", "steps", "brief", "runs"])
def test_the_ddp_demo_continued_is_the_longer_run(ddp, keep):
    """40 → 113 → 226 steps (the counts a chain of the demo took), every span kept or not,
    after 20 warm-up steps; and without warm-up, where the first count's marks start at
    step 0."""
    assert processes_only(ddp)
    run = _check(ddp, (40, 113, 226), 20, 0, keep)
    assert run.restarts == 0   # each count went on from the last
    if keep == "all":
        _check(ddp, (3, 7), 0, 5, keep)


@pytest.mark.parametrize("update", [{"loader.num_workers": 2}, {"comm.grad_accum_steps": 2},
                                    {"comm.bucket_cap_mb": 1.0}])
def test_ddp_variants_continued(ddp, update):
    """DataLoader workers (their own processes and random stream), no_sync micro-steps and
    the 1 MB buckets' many collectives."""
    m = apply_ops(ddp, [SetOp(path=p, value=v) for p, v in update.items()])
    _check(m, (10, 24, 60), 5, 1, "all")


def test_a_shared_trace_job_continued():
    """The real 8-rank DLRM trace, calibrated (three streams per rank sharing the H2D copy
    engine, all-to-alls and all-reduces), against its SimPy processes' run."""
    from stepsim.fit import calibrate_gpu
    from stepsim.models.coarsen import coarsen

    m = coarsen(calibrate_gpu(shared_traces() / "param" / "dlrm_kineto", coarse=False))
    _check(m, (3, 6, 13), 2, 0, "all", engine="events")


def test_a_shared_trace_with_workers_continued():
    """ResNet-50 (V100) as calibrated, given two DataLoader workers (processes, not the
    solver)."""
    from stepsim.fit import calibrate_gpu

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = apply_ops(calibrate_gpu(trace), [SetOp(path="loader.num_workers", value=2)])
    _check(m, (4, 9, 20), 3, 0, "all", engine="events")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rank_models())
def test_random_jobs_continued(m):
    """2-4 ranks with random waits, syncs, launch queues, skews and micro-steps: wherever
    the runs of both counts complete, the continued one is the longer (a host that runs
    ahead of its device ends at the shorter count before its marks are known: that count is
    run again from step 0)."""
    try:
        fresh = [simulate(m, steps=n, warmup=1, seed=2, engine="events") for n in (2, 5)]
    except SimulationError:
        return
    run = Extending(m, 1, 2, "all")
    for n, f in zip((2, 5), fresh):
        np.testing.assert_array_equal(run.job_step_us(n), f.job_step_us)
    _same(run.result(), fresh[1])


def test_the_chain_is_one_run(ddp, monkeypatch):
    """The step-count rule on the demo: the count and result it gave when each count was run
    from step 0, from one run of the processes (each step simulated once); the count
    remembered: asked again, that count's run alone, from the memo."""
    run_memo.clear()
    with monkeypatch.context() as mp:   # as before: each count from step 0
        mp.setattr(stepcount, "processes_only", lambda m: False)
        before, c0 = simulate_counted(ddp, None, 20, 0)
    run_memo.clear()
    made = []
    real = processes.Processes.__init__
    monkeypatch.setattr(processes.Processes, "__init__",
                        lambda self, *a: made.append(1) or real(self, *a))
    r, c = simulate_counted(ddp, None, 20, 0)
    assert len(made) == 1 and c == c0 and c.chosen and c.steps > FIRST_STEPS
    _same(r, before)
    again, c2 = simulate_counted(ddp, None, 20, 0)
    assert c2 == c and len(made) == 1
    _same(again, r)
