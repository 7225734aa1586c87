"""Ranks on one host × their intra-op threads over its cores, with heavy-tailed steps: one
warning naming the cause and the fix, said by every verb, and diagnose proposes
``intra_op_threads`` for the host-compute share (a user's 2-rank gloo transformer at torch's
default 2 threads a rank on 2 cores: steps 200–250 and 900–1,400 ms, and diagnose said "no
named fix relieves it")."""
from __future__ import annotations

import pytest

from stepsim.models.params import (DurationSpec, HostOp, HostParams, LoaderParams, Meta,
                                   RankParams, StepModel)
from stepsim.models.rank_threads import (fitting_rank_threads, rank_threads_warning,
                                         ranks_on_host)
from stepsim.scenarios.caveats import caveats, input_caveats

BIMODAL_US = [520e3, 1465e3, 232e3, 225e3, 237e3, 416e3, 1267e3]
"""The user's job steps (µs, the capture's 7 calibrated steps)."""
STEADY_US = [230e3, 240e3, 225e3, 250e3, 236e3, 244e3, 231e3]


def test_two_ranks_of_two_threads_on_two_cores_with_bimodal_steps_are_named():
    said = rank_threads_warning(["vm", "vm"], 2, 2, 1, BIMODAL_US)
    assert said is not None
    assert "2 ranks on host vm × 2 intra-op threads = 4 compute threads" in said
    assert "2 DataLoader worker(s)" in said and "on its 2 cores" in said
    assert "torch.set_num_threads(1)" in said and "--fix intra_op_threads" in said
    assert "median 416 ms, slowest 1465 ms" in said


@pytest.mark.parametrize("hosts,threads,cores,steps", [
    (["vm", "vm"], 1, 2, BIMODAL_US),        # one thread a rank: 2 threads fit 2 cores
    (["vm", "vm"], 2, 4, BIMODAL_US),        # 4 threads fit 4 cores
    (["a", "b"], 2, 2, BIMODAL_US),          # one rank a host
    (["vm", "vm"], 2, 2, STEADY_US),         # oversubscribed, but the steps show no stall
    (["vm", "vm"], 2, 2, BIMODAL_US[:2]),    # too few steps to call a tail
])
def test_no_warning_where_the_threads_fit_or_the_steps_are_steady(hosts, threads, cores,
                                                                  steps):
    assert rank_threads_warning(hosts, threads, cores, 0, steps) is None


def test_a_tail_by_p90_over_p10_alone_counts():
    """Half the steps in each mode: the slowest is under 2× the median but P90 is 4× P10."""
    steps = [200e3] * 5 + [800e3] * 5
    assert rank_threads_warning(["h", "h"], 2, 2, 0, steps) is not None


def test_fitting_threads_are_cores_over_ranks_on_the_busiest_host():
    assert fitting_rank_threads(2, 2) == 1 and fitting_rank_threads(3, 2) == 1
    assert fitting_rank_threads(16, 4) == 4 and fitting_rank_threads(2, 4) == 1
    assert ranks_on_host(["a", "b", "b", None]) == ("b", 2)
    assert ranks_on_host([None, None]) == ("", 0)
    said = rank_threads_warning(["n"] * 4, 8, 16, 0, BIMODAL_US)
    assert "torch.set_num_threads(4)" in said


def _ddp_model(threads: int | None, steps_us=BIMODAL_US) -> StepModel:
    """Two CPU ranks on host vm (2 cores): 1 ms of input, 200 ms of training-step CPU work,
    the capture's intra-op threads a rank in the notes, as gloo calibration writes them."""
    notes = {"kind": "cpu_ddp"} | ({"intra_op_threads": threads} if threads else {})
    return StepModel(
        loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=1000.0), host_cores=2),
        host=HostParams(ops=[HostOp(kind="next_batch"),
                             HostOp(kind="cpu", dur_us=200e3, phase="forward")]),
        ranks=[RankParams(rank=0, host="vm"), RankParams(rank=1, host="vm")],
        meta=Meta(sources={"loader.host_cores": "measured"}, notes=notes,
                  measured_step_us=list(steps_us)))


def test_every_verb_says_it_once_on_a_model_that_records_its_threads():
    m = _ddp_model(2)
    said = [c for c in input_caveats(m) if c.startswith("oversubscribed intra-op threads "
                                                         "across ranks")]
    assert len(said) == 1
    assert sum(c == said[0] for c in caveats(m, [])) == 1
    assert not any("across ranks" in c for c in input_caveats(_ddp_model(1)))
    assert not any("across ranks" in c for c in input_caveats(_ddp_model(None)))
    assert not any("across ranks" in c for c in input_caveats(_ddp_model(2, STEADY_US)))


def test_diagnose_proposes_intra_op_threads_for_the_host_compute_share():
    from stepsim.scenarios.diagnose import diagnose

    fast = {"steps": 6, "warmup": 2, "draws": 0, "jobs": 1}
    d = diagnose(_ddp_model(2), **fast)
    leaf = next(f for f in d.findings if f.key == "host_compute")
    assert "no named fix" not in leaf.verdict
    w = leaf.whatifs[0]
    assert w.fix == "intra_op_threads:threads=1"
    # the model holds no parallel part to price it with: said, with what to measure
    assert "no parallel part" in w.note and "torch.set_num_threads(1) in each rank" in w.note
    # without the oversubscription, the verdict is as before
    plain = diagnose(_ddp_model(1), **fast)
    leaf = next(f for f in plain.findings if f.key == "host_compute")
    assert "no named fix" in leaf.verdict and not leaf.whatifs
