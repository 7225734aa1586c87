"""The memo of whole simulations (models/run_memo.py): a repeated run gives an equal result
that no other caller shares, and the chosen step count (models/stepcount.py) gives the run it
gave before, whatever the memo holds and whether a count keeps its spans on the way."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepsim.models import run_memo
from stepsim.models.engine import comm_cpu_us
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from stepsim.models.stepcount import simulate_counted

DEMO = Path(__file__).parent / "data" / "ddp_demo_model.json"


@pytest.fixture(scope="module")
def ddp() -> StepModel:
    return StepModel.model_validate_json(DEMO.read_text())


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.step_us, b.step_us)
    assert a.spans == b.spans and a.runs == b.runs and a.host_waits == b.host_waits
    assert a.step_starts_us == b.step_starts_us and a.step_marks_us == b.step_marks_us
    assert a.samples == b.samples and a.loader_stats == b.loader_stats


def test_a_repeated_run_is_equal_and_independent(ddp, monkeypatch):
    run_memo.clear()
    ran = []
    real = run_memo.simulate
    monkeypatch.setattr(run_memo, "simulate", lambda *a, **k: ran.append(1) or real(*a, **k))
    first, c1 = simulate_counted(ddp, 30, 5, 3)
    again, c2 = simulate_counted(ddp.model_copy(deep=True), 30, 5, 3)   # an equal model
    assert len(ran) == 1 and c1 == c2
    _same(first, again)
    fresh = simulate(ddp, steps=30, warmup=5, seed=3)
    _same(first, fresh)
    # what one caller does to its result reaches no other
    first.spans.clear()
    first.runs.append(None)
    first.step_us[0, 0] = -1.0
    first.step_starts_us[0].clear()
    first.loader_stats[0].consumed.append(-1)
    third, _ = simulate_counted(ddp, 30, 5, 3)
    assert len(ran) == 1
    _same(again, fresh)
    _same(third, fresh)
    # another seed, step count or keep is another run
    simulate_counted(ddp, 30, 5, 4)
    simulate_counted(ddp, 31, 5, 3)
    simulate_counted(ddp, 30, 5, 3, keep="steps")
    assert len(ran) == 4


def test_memo_drops_the_least_recently_used(ddp, monkeypatch):
    run_memo.clear()
    monkeypatch.setattr(run_memo, "ENTRIES", 2)
    for seed in (0, 1, 2):
        run_memo.memo_simulate(ddp, 4, 1, seed, "steps")
    assert [k[3] for k in run_memo._held] == [1, 2]
    big = run_memo.memo_simulate(ddp, 4, 1, 3, "all")   # one result's records: the rest go
    monkeypatch.setattr(run_memo, "MAX_RECORDS", 3 * (len(big.spans) + len(big.runs)) // 2)
    run_memo.memo_simulate(ddp, 4, 1, 4, "all")
    assert [k[3] for k in run_memo._held] == [4]


def test_a_chosen_count_is_the_run_it_names(ddp):
    """Where every count keeps its spans (collectives on the host cores: SimPy throughout),
    the count chosen is still the run of that many steps, as asked."""
    assert comm_cpu_us(ddp)
    run_memo.clear()
    for keep in ("all", "steps", "brief"):
        r, c = simulate_counted(ddp, None, 20, 0, keep=keep)
        assert c.chosen and c.steps > 40   # past the first count
        fresh = simulate(ddp, steps=c.steps, warmup=20, seed=0, keep=keep)
        if keep == "brief":
            np.testing.assert_array_equal(r.step_us, fresh.step_us)
            assert r.every_span() == fresh.every_span() and list(r.runs) == list(fresh.runs)
        else:
            _same(r, fresh)
