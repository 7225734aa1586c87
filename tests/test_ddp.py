"""DDP buckets (reducer.cpp's compute_bucket_assignment_by_size), their all-reduces, ranks."""
from __future__ import annotations

import pytest

from stepsim.models.ddp import apply_ddp, build_buckets, collective_us
from stepsim.models.params import (CommParams, DeviceParams, DeviceTask, GradParam, HostOp, HostParams,
                           RankParams, StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import ModelError

MS = 1000.0

# torchvision resnet18: (name, number of fp32 elements) in registration order
RESNET18 = [("conv1.weight", 9408), ("bn1.weight", 64), ("bn1.bias", 64)]
for _layer, _c, _cin in ((1, 64, 64), (2, 128, 64), (3, 256, 128), (4, 512, 256)):
    for _b in (0, 1):
        _p, _i = f"layer{_layer}.{_b}.", (_cin if _b == 0 else _c)
        RESNET18 += [(_p + "conv1.weight", _c * _i * 9), (_p + "bn1.weight", _c),
                     (_p + "bn1.bias", _c), (_p + "conv2.weight", _c * _c * 9),
                     (_p + "bn2.weight", _c), (_p + "bn2.bias", _c)]
        if _b == 0 and _layer > 1:
            RESNET18 += [(_p + "downsample.0.weight", _c * _i), (_p + "downsample.1.weight", _c),
                         (_p + "downsample.1.bias", _c)]
RESNET18 += [("fc.weight", 512 * 1000), ("fc.bias", 1000)]


def resnet18_params() -> list[GradParam]:
    return [GradParam(name=n, bytes=4 * e) for n, e in RESNET18]


def test_resnet18_has_its_known_parameter_count():
    assert len(RESNET18) == 62 and sum(e for _, e in RESNET18) == 11_689_512


def test_resnet18_buckets_default_caps():
    assert [b.bytes for b in build_buckets(resnet18_params())] == [2_052_000, 28_852_224, 15_853_824]


def test_resnet18_buckets_cap_35():
    assert [b.bytes for b in build_buckets(resnet18_params(), bucket_cap_mb=35)] == [
        2_052_000, 38_297_600, 6_408_448]


def test_bucket_walks_reverse_registration_order_and_closes_at_cap():
    b = build_buckets(resnet18_params())
    assert b[0].params == ("fc.bias", "fc.weight")
    assert b[1].params[-1] == "layer4.0.conv2.weight" and b[2].params[-1] == "conv1.weight"


def test_dtypes_never_share_a_bucket():
    mib = 1 << 20
    ps = [GradParam(name="a", bytes=mib // 2, dtype="float32"),
          GradParam(name="b", bytes=mib // 2, dtype="bfloat16"),
          GradParam(name="c", bytes=mib // 2, dtype="float32"),
          GradParam(name="d", bytes=mib // 2, dtype="bfloat16")]
    got = [(b.dtype, b.params) for b in build_buckets(ps)]
    # reverse order d, c, b, a: each dtype's first bucket closes at 1 MiB
    assert got == [("bfloat16", ("d", "b")), ("float32", ("c", "a"))]


def test_bad_cap_is_a_model_error():
    with pytest.raises(ModelError):
        build_buckets(resnet18_params(), bucket_cap_mb=0)


def test_ring_cost():
    # 100 MB over 4 ranks at 100 GB/s: 2 * 3/4 * 100 MB / 100 GB/s = 1.5 ms, plus 20 us latency
    assert collective_us(100e6, 4, 100.0, 20.0) == pytest.approx(1520.0)
    assert collective_us(100e6, 1, 100.0, 20.0) == 20.0


def ddp_model(world: int = 2, ranks: int = 1, accum: int = 1, cap_mb: float = 25.0) -> StepModel:
    """Backward in three kernels; each makes a third of resnet18's gradients ready."""
    ps = resnet18_params()
    third = len(ps) // 3
    bwd = ["bwd0", "bwd1", "bwd2"]   # bwd0 runs first: it makes the *last* layers' grads
    for i, p in enumerate(ps):
        p.ready_task = bwd[2 - min(i // third, 2)]
    compute = [DeviceTask(id="fwd", stream="compute", dur_us=30 * MS, phase="forward")]
    compute += [DeviceTask(id=b, stream="compute", dur_us=20 * MS, phase="backward") for b in bwd]
    compute += [DeviceTask(id="opt", stream="compute", dur_us=5 * MS, phase="optimizer",
                           category="optimizer")]
    ops = [HostOp(kind="launch", task=t.id) for t in compute] + [HostOp(kind="sync")]
    return StepModel(host=HostParams(ops=ops, uses_core=False),
                     device=DeviceParams(streams={"compute": compute}),
                     comm=CommParams(world_size=world, bus_gbps=10.0, latency_us=0.0,
                                     grad_params=ps, grad_accum_steps=accum, bucket_cap_mb=cap_mb),
                     ranks=[RankParams(rank=r) for r in range(ranks)])


def test_apply_ddp_builds_one_collective_per_bucket_in_order():
    m = apply_ddp(ddp_model())
    comm = m.device.streams["comm"]
    assert [t.bytes for t in comm] == [2_052_000, 28_852_224, 15_853_824]
    assert comm[0].waits == ["bwd0"]          # fc's gradients come first
    assert comm[0].dur_us == pytest.approx(collective_us(2_052_000, 2, 10.0, 0.0))
    opt = m.device.streams["compute"][-1]
    assert opt.waits == [comm[-1].id]        # the optimizer waits for every bucket


def test_ddp_timeline_and_exposed_communication():
    from stepsim.models.metrics import summarize
    m = apply_ddp(ddp_model())
    res = simulate(m, steps=3, warmup=1)
    runs = {r.task: (r.start_us / MS, r.end_us / MS) for r in res.runs if r.step == 1}
    b = [collective_us(x, 2, 10.0, 0.0) / MS for x in (2_052_000, 28_852_224, 15_853_824)]
    # compute: fwd [0,30], bwd0 [30,50], bwd1 [50,70], bwd2 [70,90]
    # bucket 1 holds layer4 (ready after bwd0) and some layer3 (after bwd1): it waits for bwd1
    s0 = runs["ddp.bucket0"][0] - runs["fwd"][0]
    assert s0 == pytest.approx(50.0)
    ends = [runs[f"ddp.bucket{i}"][1] - runs["fwd"][0] for i in range(3)]
    assert ends[0] == pytest.approx(50 + b[0])
    assert ends[1] == pytest.approx(50 + b[0] + b[1])
    assert ends[2] == pytest.approx(max(90, 50 + b[0] + b[1]) + b[2])
    s = summarize(res)
    assert s.exposed_comm_us / MS == pytest.approx(ends[2] - 90)
    assert s.mean_step_us / MS == pytest.approx(ends[2] + 5)


def test_collective_waits_for_the_slowest_rank():
    m = apply_ddp(ddp_model(ranks=2))
    m.ranks[1].delay_us = 7 * MS
    res = simulate(m, steps=2, warmup=1)
    assert res.step_us[0].tolist() == res.step_us[1].tolist()
    skew = [s for s in res.spans if s.cause == "arrival_skew" and s.rank == 0 and s.step == 1]
    assert skew and skew[0].dur_us == pytest.approx(7 * MS)


def test_no_sync_accumulation_skips_collectives_and_optimizer():
    m = apply_ddp(ddp_model(accum=4))
    res = simulate(m, steps=8, warmup=0)
    steps_with_comm = sorted({r.step for r in res.runs if r.task.startswith("ddp.")})
    assert steps_with_comm == [3, 7]          # (step + 1) % 4 == 0
    assert not [r for r in res.runs if r.task == "opt" and r.step in (0, 1, 2)]
    assert res.step_us[0][0] == pytest.approx(90 * MS)


def test_apply_ddp_without_params_is_identity_and_needs_a_cost():
    m = ddp_model()
    assert apply_ddp(m.model_copy(update={"comm": CommParams()})).device == m.device
    with pytest.raises(ModelError, match="bus_gbps"):
        apply_ddp(m.model_copy(update={"comm": m.comm.model_copy(update={"bus_gbps": None})}))


def captured_nccl_model() -> StepModel:
    """A captured NCCL step, as calibration infers it from a trace (the DLRM rank-1 shape):
    three backward all-reduces with an embedding send/recv among them on the comm stream, a
    backward kernel ``w`` that the trace shows waiting for the middle all-reduce, and the
    optimizer waiting for the last one. One pseudo-parameter per captured bucket (as
    ``calibration.nccl_buckets`` infers them), in registration order (reversed)."""
    from stepsim.calibration.nccl_buckets import infer_buckets

    gbps = 10.0
    dur = lambda b: collective_us(b, 2, gbps, 0.0)   # noqa: E731 - one measured rate
    compute = [DeviceTask(id=i, stream="7", dur_us=10 * MS, phase="backward",
                          waits=["ar1"] if i == "w" else []) for i in ("k0", "k1", "w", "k2")]
    compute += [DeviceTask(id="opt", stream="7", dur_us=2 * MS, phase="optimizer",
                           waits=["ar2"])]
    sizes = {"ar0": 4_000_000, "ar1": 400, "ar2": 2_000_000}
    ready = {"ar0": "k0", "ar1": "k1", "ar2": "k2"}   # the stream event each waited for
    comm = [DeviceTask(id="ar0", stream="84", name="ncclKernel_AllReduce_RING_LL_Sum_float",
                       kind="collective", category="communication", phase="backward",
                       dur_us=dur(sizes["ar0"]), bytes=sizes["ar0"], waits=["k0"]),
            DeviceTask(id="a2a", stream="84", name="ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
                       kind="collective", category="communication", phase="backward",
                       dur_us=3 * MS, bytes=24576),
            *(DeviceTask(id=i, stream="84", name="ncclKernel_AllReduce_RING_LL_Sum_float",
                         kind="collective", category="communication", phase="backward",
                         dur_us=dur(sizes[i]), bytes=sizes[i], waits=[ready[i]])
              for i in ("ar1", "ar2"))]
    order = ["k0", "ar0", "a2a", "k1", "ar1", "w", "k2", "ar2", "opt"]
    ops = [HostOp(kind="launch", task=t) for t in order] + [HostOp(kind="sync")]
    m = StepModel(host=HostParams(ops=ops, uses_core=False),
                  device=DeviceParams(streams={"7": compute, "84": comm}),
                  comm=CommParams(world_size=2, latency_us=0.0))
    return infer_buckets(m)


def test_rebuilt_buckets_keep_other_collectives_and_carry_each_wait():
    """Caps too small to merge the captured buckets rebuild the step as it was: the send/recv
    stays in its place among the buckets, ``w`` waits for the bucket carrying the middle
    all-reduce's gradients (not the last one), and the step time is the captured one."""
    from stepsim.models.ddp import set_bucket_caps

    m = captured_nccl_model()
    assert [p.name for p in m.comm.grad_params] == ["bucket2", "bucket1", "bucket0"]
    r = set_bucket_caps(m, bucket_cap_mb=1e-4)
    assert [t.id for t in r.device.streams["84"]] == ["ddp.bucket0", "a2a", "ddp.bucket1",
                                                      "ddp.bucket2"]
    waits = {t.id: t.waits for t in r.device.streams["7"]}
    assert waits["w"] == ["ddp.bucket1"] and waits["opt"] == ["ddp.bucket2"]
    base = simulate(m, steps=3, warmup=1).mean_step_us
    assert simulate(r, steps=3, warmup=1).mean_step_us == pytest.approx(base, rel=1e-9)


def test_merged_buckets_that_a_captured_wait_cannot_follow_are_refused_with_the_reason():
    """A cap that merges every bucket makes ``w``'s wait need ``k2``, which runs after ``w``
    on its stream: that is refused naming the tasks (not a model that fails validation)."""
    from stepsim.models.ddp import set_bucket_caps
    from stepsim.scenarios.fixes import get_fix

    m = captured_nccl_model()
    with pytest.raises(ModelError, match=r"w \(backward, stream 7\) waits in the trace for the "
                                         r"all-reduce ar1, .*ready only after w \(at k2\)"):
        set_bucket_caps(m, bucket_cap_mb=25)
    with pytest.raises(ModelError, match="cannot apply to this model as captured"):
        get_fix("bucket_cap_mb").apply(m, {"mb": 50.0})


def test_the_bucket_fix_at_the_default_cap_is_not_the_default():
    """DDP's default (bucket_cap_mb unset: 25 MiB, first bucket 1 MiB) is not
    ``bucket_cap_mb=25``, which caps the first bucket at 25 MiB too (torch's
    ``_BucketCapacityConfig.create``): the fix rebuilds the buckets (resnet18's 2 MB fc
    gradients join the next bucket) instead of saying it is already 25; a model whose first
    bucket is already 25 MiB is refused."""
    from stepsim.scenarios.fixes import get_fix
    from stepsim.simcore.errors import NotApplicable

    m = apply_ddp(ddp_model())
    assert (m.comm.bucket_cap_mb, m.comm.first_bucket_cap_mb) == (25.0, 1.0)
    got = get_fix("bucket_cap_mb").apply(m, {"mb": 25.0})
    assert got.comm.first_bucket_cap_mb == 25.0
    assert [t.bytes for t in got.device.streams["comm"]] == [2_052_000 + 28_852_224, 15_853_824]
    with pytest.raises(NotApplicable, match="already 25"):
        get_fix("bucket_cap_mb").apply(got, {"mb": 25.0})
