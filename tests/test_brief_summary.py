"""models.metrics.brief_summary (what a sweep point reports) is summarize's, field by field for
the fields it fills (dicts in the same order), on randomized DataLoader models (cores to spare
or not) and several ranks, on real traces and on the reference scenarios, also when the
simulation keeps no device-stream span (``keep="brief"``, what a sweep point simulates); and
the numpy sums the critical path uses are a Python loop's, bit for bit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from stepsim.models.blame import running_total
from stepsim.models.intervals import merge, merge_arrays
from stepsim.models.metrics import BRIEF_FIELDS, brief_summary, summarize
from stepsim.models.params import RankParams, load_model
from stepsim.models.simulate import simulate
from tests.test_solo_loader import models

REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "reference"


def _same(b, s) -> None:
    """``b`` (brief) holds ``s``'s values, field by field, dicts in the same order."""
    assert b.brief and not s.brief
    for name in BRIEF_FIELDS[:-1]:
        got, want = getattr(b, name), getattr(s, name)
        assert got == want, name
        if isinstance(want, dict):
            assert list(got) == list(want), name
    assert [list(h.causes) for h in b.holes] == [list(h.causes) for h in s.holes]


@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 6), st.booleans())
def test_brief_summary_is_summarize_s(m, cores, two_ranks):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores   # below the threads: they wait for cores (SimPy)
    if two_ranks:
        m.ranks = [RankParams(rank=0), RankParams(rank=1, delay_us=500.0)]
    res = simulate(m, steps=6, warmup=2, seed=1)
    s, b = summarize(res), brief_summary(res)
    _same(b, s)
    assert b.lane_busy == {} and b.device_category_us == {}   # not computed: left empty
    _same(brief_summary(simulate(m, steps=6, warmup=2, seed=1, keep="brief")), s)


def test_brief_summary_on_a_real_trace():
    """The ResNet-50 trace (V100), as calibrated, and with four DataLoader workers."""
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    for model in (m, apply_ops(m, [SetOp(path="loader.num_workers", value=4)]),
                  apply_ops(m, [SetOp(path="device.gap_scale", value=1.7)])):
        res = simulate(model, steps=40, warmup=3, seed=0)
        s = summarize(res)
        _same(brief_summary(res), s)
        _same(brief_summary(simulate(model, steps=40, warmup=3, seed=0, keep="brief")), s)


@pytest.mark.parametrize("trace", ["param/resnet_kineto.json.gz", "param/dlrm_kineto"])
def test_brief_summary_on_other_traces(trace):
    """Another ResNet capture (steps replayed, `models/memo.py`) and the 8-rank DLRM job
    (replayed across ranks, `models/memo_ranks.py`)."""
    from stepsim.fit import calibrate_gpu
    from tests.conftest import shared_traces

    m = calibrate_gpu(shared_traces() / trace)
    s = summarize(simulate(m, steps=30, warmup=3, seed=0))
    _same(brief_summary(simulate(m, steps=30, warmup=3, seed=0, keep="brief")), s)


@pytest.mark.parametrize("name", sorted(p.stem for p in REFERENCE.glob("*.yaml")
                                         if "ops" not in yaml.safe_load(p.read_text())))
def test_brief_summary_on_reference_scenarios(name):
    """Every reference model (the scenario files of operations left out)."""
    m = load_model(REFERENCE / f"{name}.yaml")
    s = summarize(simulate(m, steps=20, warmup=3, seed=0))
    _same(brief_summary(simulate(m, steps=20, warmup=3, seed=0, keep="brief")), s)


def test_brief_keep_drops_only_device_stream_spans():
    m = load_model(REFERENCE / "input_pipeline_a.yaml")
    full, brief = (simulate(m, steps=8, warmup=2, seed=3, keep=k) for k in ("all", "brief"))
    assert brief.every_span() == [sp for sp in full.spans if ".stream:" not in sp.lane]
    assert brief.span_blocks and len(brief.spans) < len(brief.every_span())   # steps held
    assert brief.runs == full.runs and brief.host_waits == full.host_waits
    assert (brief.step_us == full.step_us).all() and brief.samples == full.samples


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9, allow_nan=False), max_size=300))
def test_running_total_is_a_loops(xs):
    total = 0.0
    for x in xs:
        total += x
    assert running_total(np.array(xs, dtype=float)) == total


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=120))
def test_merge_arrays_is_the_loops(pairs):
    """Touching intervals join; the numpy merge (any size) gives the pairs that ``merge``'s
    loop (fewer than 64 intervals) does."""
    iv = [(s * 0.5, s * 0.5 + d * 0.25) for s, d in pairs]
    out: list[list[float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    a = np.array(iv, dtype=float).reshape(-1, 2)
    assert merge_arrays(a[:, 0], a[:, 1]) == [(s, e) for s, e in out] == merge(iv)
