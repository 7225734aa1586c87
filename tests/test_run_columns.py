"""Task runs held as blocks (``keep="brief"``: models/run_columns.py) read as the runs made one
by one: row by row, as columns, through the ``(step, task)`` lookups, and in the critical path
and its holes (the same floats, bit for bit, keys in the same order, as the run-by-run path of
a ``keep="all"`` simulation), on randomized DataLoader models (cores to spare or not), the
reference scenarios and a real trace."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from stepsim.models.blame import Blame, critical_path, device_paced
from stepsim.models.metrics import brief_summary
from stepsim.models.params import load_model
from stepsim.models.run_columns import BlockRuns, latest_ready_us
from stepsim.models.simulate import simulate
from tests.test_solo_loader import models

REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "reference"


def _same(x, y) -> None:
    assert repr(x) == repr(y)   # floats to the last bit, dicts in the same order


def _check(m, steps: int, warmup: int, seed: int) -> bool:
    """``keep="brief"`` against ``keep="all"``; whether runs were held as blocks."""
    full = simulate(m, steps=steps, warmup=warmup, seed=seed, keep="all")
    held = simulate(m, steps=steps, warmup=warmup, seed=seed, keep="brief")
    assert held.runs == full.runs and len(held.runs) == len(full.runs)
    assert [held.runs[i] for i in range(len(full.runs))] == full.runs
    _same(brief_summary(held), brief_summary(full))
    if not isinstance(held.runs, BlockRuns) or len(held.ranks) > 1:
        return False
    rank = held.ranks[0]
    a, b = Blame(held, rank), Blame(full, rank)
    assert a.run_cols is not None and a.run_cols.unique and b.run_cols is None
    cols, runs = a.run_cols, full.runs
    for name, i in (("launch", 4), ("ready", 5), ("start", 6), ("end", 7), ("gap", 8)):
        want = np.array([np.nan if r[i] is None else r[i] for r in runs], dtype=float)
        assert np.array_equal(getattr(cols, name), want, equal_nan=True), name
    assert cols.step.tolist() == [r.step for r in runs]
    assert [cols.tasks[c] for c in cols.task.tolist()] == [r.task for r in runs]
    for r in runs:   # the lookups give the dicts' runs, and nothing where they have none
        assert a.by_key.get((r.step, r.task)) == b.by_key.get((r.step, r.task))
        assert a.prev.get((r.step, r.task)) == b.prev.get((r.step, r.task))
        assert a.by_key.get((r.step + 10_000, r.task)) is None
    assert a.by_key.get((0, "no such task")) is None
    got = latest_ready_us(a, np.arange(len(runs)))
    assert got.tolist() == [b.latest_ready(r)[1] for r in runs]
    w = held.rank_window_us(rank)
    paced = device_paced(held, rank)
    for win in (w, (w[0] + (w[1] - w[0]) / 3, w[1] - (w[1] - w[0]) / 5)):
        a, b = Blame(held, rank), Blame(full, rank)
        holes = (win[1] - 1e4, win[1])
        _same(critical_path(a, *win, paced, None, holes), critical_path(b, *win, paced, None, holes))
        _same(dict(a.acc), dict(b.acc))
    return True


@settings(max_examples=25, deadline=None)
@given(models(), st.integers(1, 6), st.integers(0, 3))
def test_block_runs_are_the_runs(m, cores, seed):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores
    _check(m, 24, 2, seed)


@pytest.mark.parametrize("name", sorted(p.stem for p in REFERENCE.glob("*.yaml")
                                         if "ops" not in yaml.safe_load(p.read_text())))
def test_block_runs_on_reference_scenarios(name):
    _check(load_model(REFERENCE / f"{name}.yaml"), 30, 3, 2)


def test_block_runs_on_a_real_trace():
    """ResNet-50 (V100) as calibrated, at a gap scale and with two DataLoader workers: its
    repeated steps cycle through several distinct blocks."""
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    for ops in ([SetOp(path="device.gap_scale", value=1.3)],
                [SetOp(path="loader.num_workers", value=2)]):
        assert _check(apply_ops(m, ops), 60, 3, 0)
