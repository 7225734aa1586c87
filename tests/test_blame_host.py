"""The host walk over the host spans' columns (models/blame_host.py) charges what the walk over
the span rows (``Blame._host`` without columns) charges: the same keys in the same order, the
same floats to the last bit, the same waits followed to the device; over random intervals
and over the critical path, on randomized DataLoader models, the reference scenarios and a
real trace (whose host lane is held as blocks)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from stepsim.models.blame import Blame, critical_path, device_paced
from stepsim.models.params import load_model
from stepsim.models.simulate import simulate
from tests.test_solo_loader import models

REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "reference"


def _pair(res, rank: int) -> tuple[Blame, Blame]:
    """Two Blames of ``res``: one reading the host spans as columns, one row by row."""
    cols, rows = Blame(res, rank), Blame(res, rank)
    rows.host_cols = None
    return cols, rows


def _check(m, steps: int, warmup: int, seed: int, keep: str = "brief") -> int:
    """Both walks over random intervals and the critical path; the spans walked."""
    res = simulate(m, steps=steps, warmup=warmup, seed=seed, keep=keep)
    rank = res.ranks[0]
    a, b = _pair(res, rank)
    if a.host_cols is None:
        return 0
    w0, w1 = res.rank_window_us(rank)
    rng = np.random.default_rng(seed)
    ends = a.host_ends
    edges = [x for x in ends[:: max(1, len(ends) // 40)] if w0 <= x <= w1]
    for x, y in [*zip(edges, edges[1:]), *np.sort(rng.uniform(w0, w1, (40, 2))).tolist()]:
        sa, sb = [], []
        a.acc.clear(), b.acc.clear()
        a._host(x, y, sa)
        b._host(x, y, sb)
        assert repr(dict(a.acc)) == repr(dict(b.acc))
        assert sa == sb and repr(sa) == repr(sb)
    a, b = _pair(res, rank)
    paced = device_paced(res, rank)
    assert repr(critical_path(a, w0, w1, paced)) == repr(critical_path(b, w0, w1, paced))
    assert repr(dict(a.acc)) == repr(dict(b.acc))
    return len(ends)


@settings(max_examples=25, deadline=None)
@given(models(), st.integers(1, 6), st.integers(0, 3), st.sampled_from(["brief", "all"]))
def test_random_models(m, cores, seed, keep):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores
    _check(m, 20, 2, seed, keep)


@pytest.mark.parametrize("name", sorted(p.stem for p in REFERENCE.glob("*.yaml")
                                         if "ops" not in yaml.safe_load(p.read_text())))
def test_reference_scenarios(name):
    _check(load_model(REFERENCE / f"{name}.yaml"), 30, 3, 2)


def test_a_real_trace_with_sync_waits():
    """ResNet-50 (V100) as calibrated: its holes after a sync wait follow the wait to the
    device (a ``finish`` pushed from the host walk)."""
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    for ops in ([SetOp(path="device.gap_scale", value=1.3)],
                [SetOp(path="loader.num_workers", value=2)]):
        res = simulate(apply_ops(m, ops), steps=40, warmup=3, seed=0, keep="brief")
        a, _ = _pair(res, 0)
        stack: list = []
        a._host(*res.rank_window_us(0), stack)
        assert stack, "no wait followed to the device"
        assert _check(apply_ops(m, ops), 40, 3, 0) > 0
