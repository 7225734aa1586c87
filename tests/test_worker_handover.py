"""A DataLoader worker's hand-over CPU per batch (``loader.worker_handover_us``): CPU work on
the worker's core share beside its produce time, measured from the sidecar's ``gap_cpu_us``
(the capture's workers, else a probe at a second ``num_workers``), else assumed."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from stepsim.calibration.handover import HANDOVER_PRIOR_US, handover_from_sidecar
from stepsim.scenarios.noop import unread_params
from tests.test_host_physics import host_model, mean_ms


def _with_handover(m, us: float):
    return m.model_copy(update={"loader": m.loader.model_copy(update={"worker_handover_us": us})})


@pytest.mark.parametrize("cores", [1, 4])
def test_worker_bound_step_pays_the_handover(cores):
    """One worker of P = 10 ms a batch and H = 2 ms of hand-over beside a 1 ms step: on 4
    cores (no thread waits: the solved loader) the worker sets the pace, step = P + H = 12 ms
    (P alone before); on 1 core (the event loop's shared pool) the core does P + H + S of work
    a step, 13 ms (11 before)."""
    m = host_model(1, cores, 10.0, 1.0)
    want = 12.0 if cores == 4 else 13.0
    assert mean_ms(_with_handover(m, 2_000.0)) == pytest.approx(want, rel=0.01)
    assert mean_ms(m) == pytest.approx(want - 2.0, rel=0.01)


def test_handover_unread_without_workers():
    """At num_workers=0 the main thread makes each batch: the field is not read (not drawn)."""
    assert "loader.worker_handover_us" in unread_params(host_model(0, 2, 10.0, 1.0))
    assert "loader.worker_handover_us" not in unread_params(host_model(1, 2, 10.0, 1.0))


def _rec(worker, gap):
    return SimpleNamespace(worker=worker, gap_cpu_us=gap)


def _side(produce, probe=None):
    return SimpleNamespace(produce=produce, probe=probe)


def test_measured_from_capture_then_probe_else_assumed():
    own = [_rec(0, None), _rec(0, 900.0), _rec(0, 1_000.0), _rec(0, 1_300.0)]
    f, src, warn = handover_from_sidecar(_side(own))
    assert f["worker_handover_us"] == 1_000.0 and src == {"loader.worker_handover_us":
                                                           "measured"} and not warn
    main = [_rec(-1, None)] * 8       # a 0-worker capture: the main thread's batches
    probe = SimpleNamespace(num_workers=2, produce=[_rec(1, 1_500.0), _rec(0, 1_600.0),
                                                    _rec(1, 1_700.0), _rec(0, None)])
    f, src, _ = handover_from_sidecar(_side(main, probe))
    assert f["worker_handover_us"] == 1_600.0 and src["loader.worker_handover_us"] == "measured"
    f, src, warn = handover_from_sidecar(_side(main))
    assert f["worker_handover_us"] == HANDOVER_PRIOR_US
    assert src["loader.worker_handover_us"] == "assumed" and "not measured" in warn[0]


def test_main_thread_handover_from_probe_else_assumed():
    """A 0-worker capture's ``unpickle_us`` (the main thread's CPU per batch received from a
    worker): its probe's steps' median ``next_cpu_us`` (after the first two), else assumed
    (0 before: a what-if adding workers left it out)."""
    from stepsim.calibration.handover import UNPICKLE_PRIOR_US, probe_unpickle
    steps = [SimpleNamespace(next_cpu_us=v) for v in (5_000.0, 4_000.0, 800.0, 900.0, 1_000.0)]
    probe = SimpleNamespace(num_workers=2, steps=steps, produce=[])
    f, src = probe_unpickle(_side([], probe))
    assert f == {"unpickle_us": 900.0} and src == {"loader.unpickle_us": "measured"}
    f, src = probe_unpickle(_side([]))
    assert f == {"unpickle_us": UNPICKLE_PRIOR_US} and src == {"loader.unpickle_us": "assumed"}


def test_no_warning_without_batches():
    """A capture that timed no batch (a DDP job fed without a DataLoader) has nothing to hand
    over: the value is assumed, and no warning asks for a probe."""
    f, src, warn = handover_from_sidecar(_side([]))
    assert src["loader.worker_handover_us"] == "assumed" and warn == []
