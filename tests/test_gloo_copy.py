"""The last bucket's copy into the gradients and the resume lags pooled over runs (issue 12):
closed forms on a two-bucket CPU DDP model."""
from __future__ import annotations

import pytest

from stepsim.calibration.gloo_pool import pool_lags
from stepsim.models.ddp import set_bucket_caps
from tests.test_gloo_line import MIB, _two_buckets

K = 100.0
"""``comm.grad_copy_us_per_mb`` in the closed forms (µs per MiB)."""


def _copying(samples: list[float] | None = None, lags: list[float] | None = None):
    m = _two_buckets()
    ops = list(m.host.ops)
    ops[-1] = ops[-1].model_copy(update={"samples_us": samples, "resume_lag_us": lags})
    return m.model_copy(update={"comm": m.comm.model_copy(update={"grad_copy_us_per_mb": K}),
                                "host": m.host.model_copy(update={"ops": ops})})


def _optimizer(m) -> object:
    return next(op for op in m.host.ops if op.phase == "optimizer")


def test_the_optimizer_moves_by_the_last_buckets_copy():
    """The calibrated optimizer (1000 µs) holds the copy of the last bucket (3 MiB): one
    bucket of the 4 MiB copies 1 MiB more after the wait (+K), 1 MiB buckets leave 1 MiB
    (-2K); each sample moves alike, none below 0; the what-if applied twice stays put."""
    m = _copying(samples=[900.0, 1100.0, 150.0])
    one = set_bucket_caps(m, bucket_cap_mb=25)
    assert _optimizer(one).dur_us == pytest.approx(1000.0 + K)
    assert _optimizer(one).samples_us == pytest.approx([900 + K, 1100 + K, 150 + K])
    assert _optimizer(set_bucket_caps(one, bucket_cap_mb=25)).dur_us == \
        pytest.approx(1000.0 + K)
    small = set_bucket_caps(m, bucket_cap_mb=1)
    assert [t.bytes for t in small.device.streams["gloo"]][-1] == MIB
    assert _optimizer(small).dur_us == pytest.approx(1000.0 - 2 * K)
    assert _optimizer(small).samples_us == pytest.approx([900 - 2 * K, 1100 - 2 * K, 0.0])
    # without a measured copy rate the optimizer stays as calibrated
    bare = _two_buckets()
    assert _optimizer(set_bucket_caps(bare, bucket_cap_mb=1)).dur_us == pytest.approx(1000.0)
    # the lags ride along unchanged
    lagged = set_bucket_caps(_copying(lags=[0.0, 1500.0]), bucket_cap_mb=1)
    assert _optimizer(lagged).resume_lag_us == [0.0, 1500.0]


def test_lags_are_pooled_over_every_run():
    """Every run's steps, the capture's first; unchanged without a lag, with one run, or
    with a run that has none."""
    m = _copying(lags=[2000.0, 2600.0])
    pooled = pool_lags(m, [[2000.0, 2600.0], [0.0, 300.0], [100.0]])
    assert _optimizer(pooled).resume_lag_us == [2000.0, 2600.0, 0.0, 300.0, 100.0]
    assert pooled.meta.notes["resume_lag_runs"] == 3
    assert pooled.meta.notes["resume_lag_capture_mean_us"] == pytest.approx(2300.0)
    for runs in ([[2000.0, 2600.0]], [[2000.0], None], [[2000.0], []]):
        assert _optimizer(pool_lags(m, runs)).resume_lag_us == [2000.0, 2600.0]
    assert _optimizer(pool_lags(_two_buckets(), [[1.0], [2.0]])).resume_lag_us is None
