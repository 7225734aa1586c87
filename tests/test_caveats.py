"""What-if caveats (scenarios.caveats): oversubscribed intra-op threads are named."""
from __future__ import annotations

import pytest

from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.transforms import parse_set
from tests.test_host_physics import host_model


@pytest.mark.parametrize("threads,workers,cores,named", [
    (2, 2, 2, True),     # 2 intra-op threads + 2 workers on 2 cores
    (1, 2, 2, False),    # one thread: the workers time-share, nothing spins
    (2, 0, 2, False),    # no workers: the threads have their cores
    (2, 1, 4, False),    # enough cores
])
def test_oversubscribed_intra_op_threads(threads, workers, cores, named):
    m = host_model(0, cores, 5.0, 20.0, threads=threads, parallel=0.8)
    got = caveats(m, [parse_set(f"loader.num_workers={workers}")])
    hit = [c for c in got if "intra-op threads" in c]
    assert bool(hit) == named
    if named:
        assert "torch.set_num_threads(1)" in hit[0] and "spin" in hit[0]


def test_no_ops_on_an_oversubscribed_model():
    """A model captured oversubscribed is named even without ops (simulate, validate)."""
    m = host_model(2, 2, 30.0, 20.0, threads=2, parallel=0.8)
    assert any("intra-op threads" in c for c in caveats(m, []))
