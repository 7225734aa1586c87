"""The host lane's spans read as numpy columns (models/host_columns.py) give the summary's
host split and critical path the same floats, bit for bit and keys in the same order, as
reading them span by span, also where a simulation held its repeated steps' spans as blocks
(``keep="brief"``: their columns are made from the blocks'): on randomized DataLoader models (cores to spare or not), the
reference scenarios and a real trace."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from stepsim.models.blame import Blame, critical_path, device_paced
from stepsim.models.host_columns import BlockSpans, HostColumns, HostSpans, lane_spans_of
from stepsim.models.params import load_model
from stepsim.models.simulate import simulate
from stepsim.models.span_pass import host_split
from tests.test_solo_loader import models

REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "reference"


def _same(x, y) -> None:
    assert repr(x) == repr(y)   # floats to the last bit, dicts in the same order


def _from_blocks(res, rank: int) -> None:
    """A lane's spans held as blocks read as those made one by one: row by row, by index and
    as columns."""
    lane = f"rank{rank}.host"
    plain = [sp for sp in res.every_span() if sp.lane == lane]
    held = BlockSpans(res.spans, res.span_blocks, lane)
    assert len(held) == len(plain) and list(held) == plain
    assert [held[i] for i in range(len(plain))] == plain
    assert all(type(sp) is type(q) for sp, q in zip(held, plain))
    want, got = HostColumns(plain), held.cols
    for name in ("start", "dur", "end", "rank", "busy"):
        assert np.array_equal(getattr(got, name), getattr(want, name)), name
        assert getattr(got, name).dtype == getattr(want, name).dtype, name
    assert [got.shapes[c] for c in got.shape] == [want.shapes[c] for c in want.shape]
    assert got.sorted == want.sorted


def _check(res) -> None:
    for rank in res.ranks:
        if res.span_blocks:
            _from_blocks(res, rank)
        w = res.rank_window_us(rank)
        plain = [sp for sp in res.every_span() if sp.lane == f"rank{rank}.host"]
        cols = lane_spans_of(res, f"rank{rank}.host")
        got_busy, want_busy = [], []
        _same(host_split(cols, rank, w, got_busy), host_split(plain, rank, w, want_busy))
        _same(got_busy, want_busy)
        # a window cut inside the spans as well as the measured one
        mid = (w[0] + (w[1] - w[0]) / 3, w[1] - (w[1] - w[0]) / 5)
        _same(host_split(cols, rank, mid), host_split(plain, rank, mid))
        paced = device_paced(res, rank)
        for win in (w, mid):
            a, b = Blame(res, rank, lane_spans_of(res, f"rank{rank}.host")), Blame(
                res, rank, list(plain))
            assert a.host_cols is not None or not cols.cols.sorted
            assert list(a.host) == b.host
            assert Blame(res, rank, HostSpans(plain)).host_ends == b.host_ends   # values
            holes = (win[1] - 1e4, win[1])
            _same(critical_path(a, *win, paced, None, holes),
                  critical_path(b, *win, paced, None, holes))
            _same(dict(a.acc), dict(b.acc))


@settings(max_examples=30, deadline=None)
@given(models(), st.integers(1, 6))
def test_columns_are_the_span_loops(m, cores):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores   # below the threads: they wait for cores (SimPy)
    _check(simulate(m, steps=6, warmup=2, seed=1))
    _check(simulate(m, steps=12, warmup=2, seed=1, keep="brief"))


@pytest.mark.parametrize("name", sorted(p.stem for p in REFERENCE.glob("*.yaml")
                                         if "ops" not in yaml.safe_load(p.read_text())))
def test_columns_on_reference_scenarios(name):
    m = load_model(REFERENCE / f"{name}.yaml")
    _check(simulate(m, steps=12, warmup=3, seed=0))
    _check(simulate(m, steps=12, warmup=3, seed=0, keep="brief"))


def test_columns_on_a_real_trace():
    """The ResNet-50 trace (V100), with and without four DataLoader workers."""
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    for model in (m, apply_ops(m, [SetOp(path="loader.num_workers", value=4)])):
        res = simulate(model, steps=20, warmup=3, seed=0, keep="brief")
        assert res.span_blocks   # repeated steps: columns from their blocks
        _check(res)


def test_columns_from_blocks_on_ranks():
    """The 8-rank DLRM job: every rank's host columns from blocks replayed across ranks."""
    from stepsim.fit import calibrate_gpu
    from tests.conftest import shared_traces

    m = calibrate_gpu(shared_traces() / "param/dlrm_kineto")
    res = simulate(m, steps=12, warmup=3, seed=0, keep="brief")
    assert res.span_blocks
    _check(res)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=3000))
def test_first_seen_is_the_order_of_first_appearance(codes):
    """first_seen reads a growing prefix; it names every code once, in the order a Python
    pass over the whole array first meets them."""
    from stepsim.models.host_columns import first_seen

    arr = np.array(codes, dtype=np.intp)
    assert first_seen(arr, 10) == list(dict.fromkeys(codes))
