"""A sweep takes a model's captured window away once where its base operations are sets,
scales or removes (each takes it away first), for its points, their DataLoader check and
their threads caveat (``scenarios.caveats.point_threads``): the same models and words as
applying every point's operations to the model with its window."""
from __future__ import annotations

import pytest

from stepsim.fit import calibrate_gpu
from stepsim.scenarios.caveats import _oversubscribed_threads, point_threads
from stepsim.scenarios.select import Selector
from stepsim.scenarios.sweep import sweep
from stepsim.scenarios.transforms import (FixOp, ScaleOp, SetOp, apply_ops,
                                          apply_with_notes)
from tests.test_window_replay import backlogged_trace


@pytest.fixture
def captured(tmp_path):
    m = calibrate_gpu(backlogged_trace(tmp_path / "backlog.json"), coarse=False)
    assert m.replay is not None
    ops = [op.model_copy(update={"threads": 2}) if op.kind == "cpu" else op for op in m.host.ops]
    loader = m.loader.model_copy(update={"host_cores": 2, "threads_per_worker": 1})
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops}),
                                "loader": loader})


BASES = [[], [ScaleOp(select=Selector(kind="kernel"), factor=0.5)],
         [SetOp(path="device.gap_scale", value=1.2)], [FixOp(name="pin_memory")]]
POINTS = [{"loader.num_workers": w} for w in (0, 1, 2, 4)]


@pytest.mark.parametrize("k", range(len(BASES)))
def test_points_after_the_window_taken_away_once(captured, k):
    base = BASES[k]
    bare = captured.without_replay()
    hits = []
    for values in POINTS:
        todo = [*base, *(SetOp(path=p, value=v) for p, v in values.items())]
        want, notes = apply_with_notes(captured, todo)
        assert apply_with_notes(bare, todo) == (want, notes)
        hits.append(bool(_oversubscribed_threads(want)))
    assert any(hits) and not all(hits)   # the caveat is said at some points only
    said = point_threads(captured, base, POINTS)
    assert said and said[0].startswith(f"at {sum(hits)} of the sweep's points")


def test_sweep_points_equal_their_own_predictions(captured):
    from stepsim.scenarios.predict import predict

    base = [SetOp(path="device.gap_scale", value=1.1)]
    r = sweep(captured, {"loader.num_workers": [0, 2]}, base, steps=6, warmup=2)
    for pt in r.points:
        ops = base + [SetOp(path="loader.num_workers", value=pt.values["loader.num_workers"])]
        want = predict(captured, ops, steps=6, warmup=2, brief=True)
        assert pt.prediction == want and repr(pt.prediction) == repr(want)
        assert pt.prediction.model == apply_ops(captured, ops)
