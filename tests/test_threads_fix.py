"""``--fix intra_op_threads`` (scenarios.host_threads): fewer intra-op threads for a training
step oversubscribed by DataLoader workers, held against closed forms on a hand-built model;
plan ranks it with the other fixes and diagnose names it where it applies."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.models.params import StepModel
from stepsim.scenarios.ceiling import components
from stepsim.scenarios.fixes import get_fix
from stepsim.scenarios.transforms import apply_ops
from stepsim.scenarios.op_text import parse_fix
from stepsim.simcore.errors import ModelError
from tests.test_host_physics import host_model, mean_ms

STEP_MS, PARALLEL = 40.0, 0.9


def _captured(nw: int, produce_ms: float, efficiency: float = 0.75, cores: int = 2,
              capture_threads: int | None = 2) -> StepModel:
    """A 40 ms step, 90 % of its wall parallel on 2 intra-op threads (captured so), beside
    ``nw`` workers of ``produce_ms`` per batch on ``cores`` cores."""
    m = host_model(nw, cores, produce_ms, STEP_MS, threads=2, parallel=PARALLEL)
    ops = [op.model_copy(update={"capture_threads": capture_threads,
                                 "parallel_efficiency": efficiency})
           if op.kind == "cpu" else op for op in m.host.ops]
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


def _one_thread_ms(e: float) -> float:
    """The step on one thread: serial 4 ms + the parallel part's work e·2·36 ms."""
    return STEP_MS * (1 - PARALLEL) + STEP_MS * PARALLEL * 2 * e


@pytest.mark.parametrize("fix,e", [("intra_op_threads", 0.75),
                                   ("intra_op_threads:efficiency=0.5", 0.5),
                                   ("intra_op_threads:threads=1,efficiency=1", 1.0)])
def test_fewer_threads_beside_busy_workers_closed_form(fix, e):
    """2 workers always busy (200 ms a batch) beside the step on 2 cores: with one intra-op
    thread, 3 single threads keep both cores busy, so step = (P + one thread's step) / 2; the
    default is the cores the workers leave, at least 1. The stalled team took longer."""
    m = _captured(2, 200.0)
    after = apply_ops(m, [parse_fix(fix)])
    assert [op.threads for op in after.host.ops if op.kind == "cpu"] == [1]
    assert mean_ms(after, 60) == pytest.approx((200.0 + _one_thread_ms(e)) / 2, rel=0.01)
    assert mean_ms(m, 60) > mean_ms(after, 60) * 1.2


def test_explicit_threads_without_workers_take_the_parallel_work():
    """An explicit count applies anywhere: at num_workers=0 one thread makes the batch
    (5 ms) and then runs the parallel part's work alone: step = 5 + 4 + 0.75·2·36 ms."""
    m = _captured(0, 5.0)
    assert mean_ms(apply_ops(m, [parse_fix("intra_op_threads:threads=1")]), 20) \
        == pytest.approx(5.0 + _one_thread_ms(0.75))


def test_a_given_efficiency_is_measured_and_not_drawn():
    m = _captured(2, 200.0)
    m = m.model_copy(update={"meta": m.meta.model_copy(update={
        "ranges": {"host.ops[1].parallel_efficiency": (0.67, 1.33)},
        "sources": {"host.ops[1].parallel_efficiency": "assumed"}})})
    after = apply_ops(m, [parse_fix("intra_op_threads:efficiency=0.6")])
    assert after.host.ops[1].parallel_efficiency == 0.6
    assert after.meta.sources["host.ops[1].parallel_efficiency"] == "measured"
    assert "host.ops[1].parallel_efficiency" not in after.meta.ranges


@pytest.mark.parametrize("model,why", [
    (_captured(0, 5.0), "fit the 2 cores"),                    # no workers: nothing spins
    (_captured(1, 5.0, cores=4), "fit the 4 cores"),
    (_captured(2, 200.0, capture_threads=None), "capture_threads"),
    (host_model(2, 2, 200.0, STEP_MS, threads=2, parallel=0.0), "no parallel part"),
])
def test_refused_where_nothing_spins_or_nothing_is_known(model, why):
    with pytest.raises(ModelError, match=why):
        apply_ops(model, [parse_fix("intra_op_threads")])
    assert get_fix("intra_op_threads").candidates(model) == []


def test_candidates_least_aggressive_first():
    m = host_model(2, 4, 200.0, STEP_MS, threads=8, parallel=PARALLEL)
    ops = [op.model_copy(update={"capture_threads": 8}) if op.kind == "cpu" else op
           for op in m.host.ops]
    m = m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})
    got = [c["threads"] for c in get_fix("intra_op_threads").candidates(m)]
    assert got == [7, 4, 2, 1]


def test_the_cpu_cores_ceiling_counts_the_team():
    """2 intra-op threads + 1 worker on 2 cores are 3 runnable threads (as the simulator counts
    them): the cores' ceiling gives each a core."""
    comp = components(_captured(1, 10.0))
    assert comp["cpu_cores"][0].value == 3


def test_plan_ranks_it_with_the_other_fixes():
    """Workers always busy beside a stalled team: a third worker does not help (173.8 ms at 2
    workers, 172.4 at 3: each worker placed on a core's queue beside a team thread), one
    intra-op thread ends the stall: the plan's first move is intra_op_threads(threads=1)."""
    p = api.plan(_captured(2, 200.0), steps=40, warmup=10, draws=0, jobs=1).to_dict()
    first = p["moves"][0]
    assert first["fix"] == "fix intra_op_threads(threads=1)"
    tried = {t["op"]: t["mean_step_ms"] for t in first["tried"]}
    assert tried["fix more_workers(workers=3)"] > 1.1 * first["mean_step_ms"]
    assert first["before_ms"] > 1.1 * first["mean_step_ms"]
    assert first["mean_step_ms"] == pytest.approx((200.0 + _one_thread_ms(0.75)) / 2, rel=0.01)


@pytest.mark.parametrize("nw,named", [(2, True), (0, False)])
def test_diagnose_names_it_when_it_applies(nw, named):
    doc = api.diagnose(_captured(nw, 200.0), steps=40, warmup=10, draws=0, jobs=1).to_dict()
    fixes = [w["fix"] for f in doc["findings"] for w in f["whatifs"]]
    assert (sum(f.startswith("intra_op_threads") for f in fixes) == 1) == named
    if named:
        w = next(w for f in doc["findings"] for w in f["whatifs"]
                 if w["fix"].startswith("intra_op_threads"))
        assert w["step_us"] / 1e3 == pytest.approx((200.0 + _one_thread_ms(0.75)) / 2, rel=0.01)
        assert w["offered"]


def test_plan_looks_one_move_ahead_when_workers_alone_stall_the_team():
    """A fresh user's CNN (2026-12-05, 2 cores, torch's default 2 threads, num_workers=0):
    workers alone predicted 0.93-0.98x (the team stalls beside them) and intra_op_threads does
    not apply without workers, so the greedy plan stopped at 1.00x while 2 workers and one
    thread predicted 1.72x (re-measured 1.5x at 4 workers). Here: a 60 ms batch on the main
    thread and a 40 ms step, team stall 10: 2 workers alone gain under the plan's 5 %, so it
    takes them for the next move, one thread beside 2 always-busy workers: (60 + 58) / 2 ms."""
    m = _captured(0, 60.0)
    m = m.model_copy(update={"host": m.host.model_copy(update={"team_stall": 10.0})})
    p = api.plan(m, min_gain=0.05, steps=40, warmup=10, draws=0, jobs=1).to_dict()
    first, second = p["moves"][:2]
    assert first["fix"].startswith("fix more_workers") and first["speedup"] < 1.05
    assert first["enables"] == second["fix"] == "fix intra_op_threads(threads=1)"
    assert second["enables"] is None
    assert second["mean_step_ms"] == pytest.approx((60.0 + _one_thread_ms(0.75)) / 2, rel=0.01)
    assert p["speedup"] > 1.6


def test_diagnose_prices_plans_pair_where_workers_stall_the_team():
    """The look-ahead model above (2 cores, 2 threads, num_workers=0, a 60 ms batch on the
    main thread): diagnose's input leaf prices the workers fix and, as plan's look-ahead does
    (``scenarios.plan.follow_up``), that fix with one intra-op thread beside it: (60 + 58) / 2
    ms, the plan's pair; before, diagnose offered the workers alone (under 1.05x)."""
    m = _captured(0, 60.0)
    m = m.model_copy(update={"host": m.host.model_copy(update={"team_stall": 10.0})})
    doc = api.diagnose(m, steps=40, warmup=10, draws=0, jobs=1).to_dict()
    fixes = {w["fix"]: w for f in doc["findings"] for w in f["whatifs"]}
    pair = [f for f in fixes if " --fix intra_op_threads" in f]
    assert len(pair) == 1 and pair[0].startswith("more_workers")
    w = fixes[pair[0]]
    assert w["offered"] and w["step_us"] / 1e3 == pytest.approx(
        (60.0 + _one_thread_ms(0.75)) / 2, rel=0.01)
    alone = next(v for f, v in fixes.items() if f.startswith("more_workers") and "--" not in f)
    assert alone["step_us"] > 1.3 * w["step_us"]
