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


@pytest.mark.parametrize("capture_threads,priced", [(2, True), (None, False)])
def test_the_threads_caveat_is_one_short_sentence(capture_threads, priced):
    """Printed beside every verb: one sentence of at most 200 characters (64 threads beside 16
    workers on 8 cores, the widest numbers here) that says what to do, naming the fix that
    prices it where the model can (its capture threads recorded)."""
    m = host_model(16, 8, 5.0, 20.0, threads=64, parallel=0.8)
    ops = [op.model_copy(update={"capture_threads": capture_threads}) if op.kind == "cpu"
           else op for op in m.host.ops]
    m = m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})
    said = [c for c in caveats(m, []) if "intra-op threads" in c]
    assert len(said) == 1 and len(said[0]) <= 200 and said[0].count(";") == 1
    assert "torch.set_num_threads(1) avoids it" in said[0]
    assert ("--fix intra_op_threads" in said[0]) == priced
