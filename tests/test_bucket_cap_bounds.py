"""A bucket cap past 2**63 bytes (``--set comm.bucket_cap_mb=1e308``) is one line (exit 2), as
torch's DDP refuses it (OverflowError converting it to bytes); before: a traceback from
``mib_to_bytes`` (OverflowError: cannot convert float infinity to integer)."""
from __future__ import annotations

import pytest

from stepsim.models.ddp import MAX_CAP_MB, build_buckets, set_bucket_caps
from stepsim.models.params import GradParam
from stepsim.simcore.errors import ModelError
from tests.test_ddp_ranks import cpu_ddp

GRADS = [GradParam(name=f"w{i}", bytes=4 << 20) for i in range(3)]


@pytest.mark.parametrize("cap", [1e308, MAX_CAP_MB, float("inf")])
def test_a_cap_past_2_63_bytes_is_refused(cap):
    with pytest.raises(ModelError, match="below 8.796e\\+12"):
        build_buckets(GRADS, cap, 1.0)
    model = cpu_ddp(2).model_copy(deep=True)
    model = model.model_copy(update={"comm": model.comm.model_copy(
        update={"grad_params": GRADS})})
    with pytest.raises(ModelError, match="comm.bucket_cap_mb must be > 0 MiB and below"):
        set_bucket_caps(model, bucket_cap_mb=cap)


def test_a_cap_just_below_the_bound_is_one_bucket():
    assert [b.bytes for b in build_buckets(GRADS, MAX_CAP_MB * 0.999, MAX_CAP_MB * 0.999)] \
        == [3 * (4 << 20)]


def test_scaling_a_collective_past_a_double_is_one_line():
    """``--scale 1e308 category=communication`` on a model with a bus cost model: the
    collective's bytes overflow a double; before: OverflowError (a traceback) rounding them."""
    from stepsim.scenarios.primitives import scale
    from stepsim.scenarios.op_text import parse_selector

    m = cpu_ddp(2)
    m = m.model_copy(update={"comm": m.comm.model_copy(update={"bus_gbps": 1.0})})
    with pytest.raises(ModelError, match="x1e\\+308: gives an invalid model: .*bytes"):
        scale(m, parse_selector("category=communication"), 1e308)
