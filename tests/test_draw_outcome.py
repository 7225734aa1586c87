"""models.metrics.mean_and_bottleneck (a Monte Carlo draw's outcome) is summarize's mean step
and bottleneck, on randomized DataLoader models (cores to spare or not) and several ranks."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from stepsim.models.metrics import mean_and_bottleneck, summarize
from stepsim.models.params import RankParams
from stepsim.models.simulate import simulate
from tests.test_solo_loader import models


@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 6), st.booleans())
def test_mean_and_bottleneck_is_summarize_s(m, cores, two_ranks):
    m = m.model_copy(deep=True)
    m.loader.host_cores = cores   # below the threads: they wait for cores (SimPy)
    if two_ranks:
        m.ranks = [RankParams(rank=0), RankParams(rank=1, delay_us=500.0)]
    res = simulate(m, steps=6, warmup=2, seed=1)
    s = summarize(res)
    assert mean_and_bottleneck(res) == (s.mean_step_us, s.bottleneck)
