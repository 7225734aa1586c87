"""Closed forms of the input pipeline held against the simulator (issue: end to end)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel
from stepsim.models.simulate import simulate


def _model(nw: int, cores: int, produce_us: float, consume_us: float, pf: int = 2) -> StepModel:
    return StepModel(
        loader=LoaderParams(num_workers=nw, prefetch_factor=pf, host_cores=cores,
                            produce=DurationSpec(mean_us=produce_us)),
        host=HostParams(uses_core=False, ops=[HostOp(kind="next_batch"),
                                              HostOp(kind="cpu", dur_us=consume_us)]))


@settings(max_examples=25, deadline=None)
@given(nw=st.integers(1, 8), cores=st.integers(1, 4), produce_ms=st.integers(20, 200))
def test_producer_bound_throughput(nw, cores, produce_ms):
    """Fast consumer: batches/s = min(num_workers, cores) / produce time. With more workers
    than cores batches arrive in bursts of ``num_workers``, so the window spans whole bursts."""
    res = simulate(_model(nw, cores, produce_ms * 1e3, 10.0), steps=8 * nw, warmup=3 * nw)
    expected_us = produce_ms * 1e3 / min(nw, cores)
    assert abs(res.mean_step_us - expected_us) / expected_us < 0.03


@settings(max_examples=25, deadline=None)
@given(nw=st.integers(1, 8), consume_ms=st.integers(20, 200))
def test_consumer_bound_step_is_consumer_time(nw, consume_ms):
    """Workers with a core each and fast production: step = the consumer's time."""
    res = simulate(_model(nw, nw, 5e3, consume_ms * 1e3), steps=30, warmup=3)
    assert abs(res.mean_step_us - consume_ms * 1e3) < 1.0


@settings(max_examples=25, deadline=None)
@given(nw=st.integers(1, 6), pf=st.integers(1, 4), cores=st.integers(1, 4),
       consume_ms=st.integers(1, 100))
def test_outstanding_bound_at_every_instant(nw, pf, cores, consume_ms):
    res = simulate(_model(nw, cores, 30e3, consume_ms * 1e3, pf), steps=20, warmup=2)
    series = res.samples["rank0.loader.outstanding"]
    assert max(v for _, v in series) <= nw * pf
    assert res.max_outstanding[0] <= nw * pf
