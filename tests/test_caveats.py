"""What-if caveats (scenarios.caveats): oversubscribed intra-op threads are named."""
from __future__ import annotations

import re

import pytest

from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.op_text import parse_set
from tests.test_host_physics import host_model


@pytest.mark.parametrize("threads,workers,cores,named", [
    (2, 2, 2, True),     # 2 intra-op threads + 2 workers on 2 cores
    (1, 2, 2, False),    # one thread: the workers time-share, nothing spins
    (2, 0, 2, False),    # no workers: the threads have their cores
    (2, 1, 4, False),    # enough cores
])
def test_oversubscribed_intra_op_threads(threads, workers, cores, named):
    m = host_model(0, cores, 5.0, 20.0, threads=threads, parallel=0.8)
    got = caveats(m, [parse_set(f"loader.num_workers={workers}")])
    hit = [c for c in got if "intra-op threads" in c]
    assert bool(hit) == named
    if named:
        assert "torch.set_num_threads(1)" in hit[0] and "spin" in hit[0]


def test_no_ops_on_an_oversubscribed_model():
    """A model captured oversubscribed is named even without ops (simulate, validate)."""
    m = host_model(2, 2, 30.0, 20.0, threads=2, parallel=0.8)
    assert any("intra-op threads" in c for c in caveats(m, []))


def _team(m, cap, eff=None, measured=False):
    """``m`` with its cpu op captured on ``cap`` threads at parallel efficiency ``eff``
    (default: calibration's assumed middle of 1/T..1), ``measured`` or assumed."""
    eff = (1 + 1 / cap) / 2 if eff is None else eff
    ops = [op.model_copy(update={"capture_threads": cap, "parallel_efficiency": eff})
           if op.kind == "cpu" else op for op in m.host.ops]
    src = {**m.meta.sources,
           "host.ops[1].parallel_efficiency": "measured" if measured else "assumed"}
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops}),
                                "meta": m.meta.model_copy(update={"sources": src})})


@pytest.mark.parametrize("capture_threads,priced", [(8, True), (None, False)])
def test_the_threads_caveat_is_one_short_sentence(capture_threads, priced):
    """Printed beside every verb: one sentence of at most 280 characters (8 threads beside 16
    workers on 8 cores) that says what to do, naming the fix that prices it where the model
    can (its capture threads recorded)."""
    m = host_model(16, 8, 5.0, 20.0, threads=8, parallel=0.8)
    if capture_threads:
        m = _team(m, capture_threads)
    said = [c for c in caveats(m, []) if "intra-op threads" in c]
    assert len(said) == 1 and len(said[0]) <= 280 and said[0].count(";") == 1
    assert "torch.set_num_threads(1)" in said[0]
    assert ("--fix intra_op_threads" in said[0]) == priced


def test_threads_advice_gives_the_range_over_the_unmeasured_efficiency():
    """A user's CNN (2 threads, 93 % parallel, 55 ms step, 33 ms a batch, 2 cores, assumed
    efficiency 0.75): one thread beside one worker was re-measured 0.86x as fast as the
    baseline where the old sentence said "avoids it". At efficiency 1 (the other thread was
    working) one thread doubles the parallel part: the worst end loses, so the sentence gives
    the range and does not say "avoids"."""
    m = _team(host_model(0, 2, 33.0, 55.0, threads=2, parallel=0.93), 2)
    said = [c for c in caveats(m, [parse_set("loader.num_workers=1")]) if "intra-op" in c][0]
    assert "avoids" not in said and "unmeasured parallel efficiency" in said
    lo, hi = (float(x) for x in re.search(r"(\d\.\d\d)x-(\d\.\d\d)x", said).groups())
    assert lo < 1.0 < hi


@pytest.mark.parametrize("eff,avoids", [(0.5, True), (0.95, False)])
def test_threads_advice_with_a_measured_efficiency(eff, avoids):
    """Measured efficiency 1/T (the second thread only spun): one thread loses nothing and
    ends the stall, "avoids it"; measured 0.95: one figure, below 1, no "avoids"."""
    m = _team(host_model(0, 2, 33.0, 55.0, threads=2, parallel=0.93), 2, eff, measured=True)
    said = [c for c in caveats(m, [parse_set("loader.num_workers=1")]) if "intra-op" in c][0]
    assert ("avoids it" in said) == avoids
    x = float(re.search(r"(\d\.\d\d)x as fast", said).group(1))
    assert (x > 1.0) == avoids


def test_the_threads_fix_says_its_step_at_both_ends_of_the_assumed_efficiency():
    """``--fix intra_op_threads`` without ``:efficiency=``: the point takes the assumed middle
    (a user's CNN: 75.8 ms predicted, 106.6 re-measured at efficiency 0.94); the warning gives
    the step at 1.00 (slower) and 0.50 (faster); a measured efficiency says nothing."""
    from stepsim.scenarios.transforms import FixOp
    m = _team(host_model(0, 2, 33.0, 55.0, threads=2, parallel=0.93), 2)
    ops = [parse_set("loader.num_workers=1"), FixOp(name="intra_op_threads")]
    said = [c for c in caveats(m, ops) if "assumed parallel efficiency" in c]
    assert len(said) == 1
    slow, fast = (float(x) for x in re.findall(r"(\d+\.\d) ms", said[0]))
    assert slow > fast
    given = [parse_set("loader.num_workers=1"),
             FixOp(name="intra_op_threads", args={"efficiency": 0.9})]
    assert not [c for c in caveats(m, given) if "assumed parallel efficiency" in c]


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_team_beside_workers_states_the_measured_slowdown(workers):
    """Beside busy workers a 2-thread team's step was measured ×0.89–1.88 its 0-worker wall
    (scenarios.caveats.TEAM_BESIDE_WORKERS: 5 CNNs on 2 cores, the second user's ×1.34/1.88/
    1.53 at 1/2/4 workers), which the interval (γ drawn 1–10) does not cover: the caveat says
    so, with the measured range and the prior it draws, naming its parameter
    (``host.team_stall``: a new user read "γ 1, not varied" and could not find it), within 300
    characters (280 before the name's 16; the CLI heads it with a one-line summary)."""
    m = host_model(0, 2, 5.0, 20.0, threads=2, parallel=0.8)
    m = m.model_copy(update={"host": m.host.model_copy(update={
        "team_stall": 5.5, "team_stall_range": (1.0, 10.0)})})
    got = caveats(m, [parse_set(f"loader.num_workers={workers}")])
    hit = [c for c in got if "busy worker(s)" in c]
    assert len(hit) == 1 and len(hit[0]) <= 300
    said = hit[0]
    assert f"a team of 2 threads beside {workers} busy worker(s) on 2 cores" in said
    assert "×0.89–1.88" in said and "outside this interval" in said and "(host.team_stall γ 1–10)" in said
    assert any("torch.set_num_threads(1)" in c for c in got)      # the advice is kept


def test_team_beside_workers_range_brackets_the_records():
    """The stated range holds every measured ratio it names (extremes, not a fit)."""
    from stepsim.scenarios.caveats import TEAM_BESIDE_WORKERS
    lo, hi = TEAM_BESIDE_WORKERS
    fresh2 = [39.7 / 29.6, 55.5 / 29.6, 45.4 / 29.6]      # ledger_d.jsonl means, w1/w2/w4 ÷ w0
    fresh13 = [349.0 / 349.7, 310.3 / 349.7, 322.0 / 349.7]  # its 3-run means, w1/w2/w4 ÷ w0
    assert all(lo - 0.005 <= r <= hi + 0.005 for r in fresh2 + fresh13 + [0.95, 1.04, 1.31, 1.53])


def test_plan_names_a_move_that_puts_workers_beside_the_team():
    """A plan of workers=2 then 1 intra-op thread (the second user's plan, predicted 21.5 ms,
    measured 29.6; its move 1 predicted 31.5, measured 55.5): the last state has no team, so
    the plan's caveat for the whole is silent, and move 1's is named."""
    from stepsim.scenarios.caveats import move_threads
    from stepsim.scenarios.op_text import parse_fix
    m = _team(host_model(0, 2, 25.0, 20.0, threads=2, parallel=0.86), 2)
    moves = [parse_set("loader.num_workers=2"), parse_fix("intra_op_threads:threads=1")]
    assert not [c for c in caveats(m, moves) if "busy worker(s)" in c]
    said = move_threads(m, [], moves)
    assert len(said) == 1 and said[0].startswith("after move 1: a team of 2 threads beside 2")


def test_the_threads_fix_says_how_to_turn_a_one_thread_timing_into_e():
    """The warning that asks for ``:efficiency=E`` gives E from the step timed at 1 thread,
    with the model's numbers, in the one meaning the fix uses (models.plans.threads_ratio:
    the parallel part's speed-up ÷ threads). Closed form: 55 ms at 2 threads, 93 % parallel;
    on 1 thread the step is 55 (0.07 + 0.93·2·E) = 3.85 + 102.3·E ms, so a run timed at
    t1 = 3.85 + 102.3 × 0.7 = 75.46 ms gives E = 0.70, and the fix given it prices t1 again.
    The earlier recipe, (t1/t2 − 0.070) / 1.860 with t2 the 2-thread step, gave fresh10
    E = 0.385 from a step with its stall beside a worker in t2 (priced −19 % off)."""
    from stepsim.models.plans import threads_ratio
    from stepsim.scenarios.transforms import FixOp, apply_ops
    from stepsim.models.simulate import simulate
    m = _team(host_model(0, 2, 33.0, 55.0, threads=2, parallel=0.93), 2)
    ops = [parse_set("loader.num_workers=1"), FixOp(name="intra_op_threads")]
    said = [c for c in caveats(m, ops) if "assumed parallel efficiency" in c][0]
    assert "time the step at 1 thread(s) and give :efficiency=E, E = (t − " in said
    a, b = (float(v) for v in re.search(r"the step is ([\d.]+) \+ ([\d.]+)·E ms", said).groups())
    assert (a, b) == pytest.approx((3.85, 102.3), abs=0.06)
    op = next(op for op in m.host.ops if op.kind == "cpu")
    r = threads_ratio(op.model_copy(update={"threads": 1, "parallel_efficiency": 0.7}))[0]
    t1 = 55.0 * r
    assert t1 == pytest.approx(75.46)
    e = (t1 - a) / b
    assert e == pytest.approx(0.70, abs=0.002)
    fixed = apply_ops(m, [ops[0], FixOp(name="intra_op_threads", args={"efficiency": e})])
    assert simulate(fixed, steps=40, warmup=10).mean_step_us / 1e3 == pytest.approx(t1, rel=2e-3)
