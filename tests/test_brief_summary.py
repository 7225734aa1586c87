"""models.metrics.brief_summary (what a sweep point reports) is summarize's, field by field for
the fields it fills, on randomized DataLoader models (cores to spare or not) and several
ranks."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from stepsim.models.metrics import BRIEF_FIELDS, brief_summary, summarize
from stepsim.models.params import RankParams
from stepsim.models.simulate import simulate
from tests.test_solo_loader import models


@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 6), st.booleans())
def test_brief_summary_is_summarize_s(m, cores, two_ranks):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores   # below the threads: they wait for cores (SimPy)
    if two_ranks:
        m.ranks = [RankParams(rank=0), RankParams(rank=1, delay_us=500.0)]
    res = simulate(m, steps=6, warmup=2, seed=1)
    s, b = summarize(res), brief_summary(res)
    assert b.brief and not s.brief
    for name in BRIEF_FIELDS[:-1]:
        assert getattr(b, name) == getattr(s, name), name
    assert b.lane_busy == {} and b.device_category_us == {}   # not computed: left empty


def test_brief_summary_on_a_real_trace():
    """The ResNet-50 trace (V100), as calibrated, and with four DataLoader workers."""
    from stepsim.calibration.gpu import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    for model in (m, apply_ops(m, [SetOp(path="loader.num_workers", value=4)])):
        res = simulate(model, steps=12, warmup=3, seed=0)
        s, b = summarize(res), brief_summary(res)
        assert [getattr(b, k) for k in BRIEF_FIELDS[:-1]] == \
            [getattr(s, k) for k in BRIEF_FIELDS[:-1]]
