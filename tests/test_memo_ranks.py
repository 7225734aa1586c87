"""Job steps replayed across ranks (models/memo_ranks.py) against the same ranks solved step by
step without replay (no host held at a step's start, nothing captured): same step times,
spans, task runs and host waits."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings

from stepsim.models import memo_ranks
from stepsim.models.params import StepModel
from stepsim.models.simulate import simulate
from tests.conftest import shared_traces
from tests.test_solo import _runs, _spans, assert_rows
from tests.test_solo_ranks import _ring, _solved_without_events, rank_models


def _waits(res) -> list[tuple]:
    return sorted((w.rank, w.step, round(w.start_us, 6), round(w.end_us, 6), w.cause, w.tasks)
                  for w in res.host_waits)


def _replayed_and_not(m: StepModel, monkeypatch, **kw):
    """(replayed run, steps it replayed, run without replay)."""
    hits = []
    real = memo_ranks.JobMemo.at_start

    def spy(self, *a):
        got = real(self, *a)
        hits.append(got)
        return got

    monkeypatch.setattr(memo_ranks.JobMemo, "at_start", spy)
    a = simulate(m, **kw)
    monkeypatch.setattr(memo_ranks.JobMemo, "at_start", real)
    monkeypatch.setattr(memo_ranks.JobMemo, "holds", lambda self, step: False)
    b = simulate(m, **kw)
    monkeypatch.undo()
    return a, sum(hits), b


def assert_replay_same(m: StepModel, monkeypatch, **kw) -> int:
    a, n, b = _replayed_and_not(m, monkeypatch, **kw)
    np.testing.assert_allclose(a.step_us, b.step_us, rtol=1e-12, atol=1e-6)
    np.testing.assert_allclose(a.step_starts_us, b.step_starts_us, rtol=1e-12, atol=1e-6)
    assert_rows(_spans(a), _spans(b))
    assert_rows(_runs(a), _runs(b))
    assert_rows(_waits(a), _waits(b))
    return n


def test_a_ring_with_a_straggler_is_replayed_with_the_same_output(monkeypatch):
    m = _ring(4, [0.0, 0.0, 2000.0, 700.0], depth=2)
    assert _solved_without_events(m, monkeypatch)
    n = assert_replay_same(m, monkeypatch, steps=30, warmup=3, seed=1)
    assert n >= 25   # steady after a few steps: the rest replayed


def test_keep_steps_replays_the_same_step_times(monkeypatch):
    m = _ring(3, [0.0, 1300.0, 400.0])
    full = simulate(m, steps=20, warmup=3)
    lean = simulate(m, steps=20, warmup=3, keep="steps")
    np.testing.assert_allclose(lean.step_us, full.step_us, rtol=1e-12)
    a, n, b = _replayed_and_not(m, monkeypatch, steps=20, warmup=3, keep="steps")
    assert n > 10
    np.testing.assert_allclose(a.step_us, b.step_us, rtol=1e-12, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rank_models())
def test_replayed_ranks_match_the_step_by_step_solve(m):
    from _pytest.monkeypatch import MonkeyPatch

    mp = MonkeyPatch()
    try:
        simulate(m, steps=2, warmup=0)
    except Exception:   # the processes refuse it (a deadlock): nothing to compare
        return
    try:
        assert_replay_same(m, mp, steps=10, warmup=2, seed=2)
    finally:
        mp.undo()


def test_the_dlrm_job_is_replayed_with_the_same_output(monkeypatch):
    """The real 8-rank DLRM trace: all-to-alls, all-reduces, the H2D engine shared by three
    streams; after a few steps every step is replayed."""
    from stepsim.fit import calibrate_gpu
    from stepsim.models.coarsen import coarsen

    m = coarsen(calibrate_gpu(shared_traces() / "param" / "dlrm_kineto", coarse=False))
    n = assert_replay_same(m, monkeypatch, steps=20, warmup=3)
    assert n >= 15
