"""Gloo collectives as CPU work on the host's cores: closed forms for the simulator (a
collective that competes with the training threads, with and without a free core) and for the
calibration of its cost from the job's per-thread CPU times."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from stepsim.calibration.gloo_steps import GlooCollective, GlooRank
from stepsim.calibration.gloo_cpu import host_cpu_cost
from stepsim.calibration.sidecar import ThreadCPU
from stepsim.models.params import StepModel
from tests.test_ddp_ranks import B, C, F, O, cpu_ddp, step_us

X = 2 * C
"""The collective's CPU work on each rank (µs)."""


def with_cpu(m: StepModel, fixed_us: float, per_mb_us: float = 0.0) -> StepModel:
    return m.model_copy(update={"comm": m.comm.model_copy(
        update={"host_cpu_us": fixed_us, "host_cpu_us_per_mb": per_mb_us})})


def overlapped(cores: int) -> StepModel:
    """The all-reduce enqueued before backward's host work (as DDP does for early buckets)."""
    m = cpu_ddp(cores)
    ops = m.host.ops
    return m.model_copy(update={"host": m.host.model_copy(
        update={"ops": [ops[0], ops[2], ops[1], ops[3], ops[4]]})})


def test_a_collective_lasts_until_its_cpu_work_is_done():
    """After backward both training threads wait, so each rank's collective has a core: it
    lasts max(transfer, CPU work)."""
    m = cpu_ddp(cores=2)
    assert step_us(with_cpu(m, X)) == pytest.approx(F + B + X + O)
    assert step_us(with_cpu(m, C / 2)) == pytest.approx(F + B + C + O)
    # per MiB of the collective's bytes (4e6 B in cpu_ddp): C/2 + 1.5 C = 2C
    per_mb = 1.5 * C / (4_000_000 / 2 ** 20)
    assert step_us(with_cpu(m, C / 2, per_mb)) == pytest.approx(F + B + X + O)


def test_a_loopback_transfer_is_cpu_work_that_waits_for_the_cores():
    """A collective of transfer C whose CPU work is C/2 per rank: with a core each it lasts C
    (its work, then the other C/2 of its transfer); on a host twice as slow (cpu_scale 2, a
    core each) its work takes C, then the C/2 that is not CPU: 1.5 C, where a transfer taken
    as wire time would still last max(C, C) = C."""
    assert step_us(with_cpu(cpu_ddp(cores=2), C / 2)) == pytest.approx(F + B + C + O)
    m = with_cpu(cpu_ddp(cores=2), C / 2)
    slow = m.model_copy(update={"host": m.host.model_copy(update={"cpu_scale": 2.0})})
    assert step_us(slow) == pytest.approx(2 * (F + B + O) + 1.5 * C)


def test_an_overlapped_collective_is_hidden_only_with_a_free_core():
    """Two ranks on two cores: backward's threads and the collectives' share the cores, which
    stay busy until all 2(B + X) of work is done, so the step is F + B + X + O (the overlap
    hides nothing); with four cores each thread has one: F + max(B, X) + O."""
    assert step_us(overlapped(2)) == pytest.approx(F + B + O)     # no CPU cost: hidden
    assert step_us(with_cpu(overlapped(2), X)) == pytest.approx(F + B + X + O)
    assert step_us(with_cpu(overlapped(4), X)) == pytest.approx(F + B + O)


MIB = 2 ** 20
A_US, K_WORKER, K_TCP = 300.0, 1e-4, 5e-4
"""Per-collective CPU (µs), the worker threads' and the TCP loop's CPU per byte (µs)."""


def _rank(r: int) -> tuple[GlooRank, object]:
    small, big = 262144, 7 * 262144          # float32 elements: 1 MiB and 7 MiB
    colls = [GlooCollective("all_reduce", n, "float", (0, 0), (0, 0), tid)
             for _ in range(8) for n, tid in ((small, 11), (big, 12))]
    cpu = {11: 8 * (A_US + K_WORKER * MIB), 12: 8 * (A_US + K_WORKER * 7 * MIB),
           10: K_TCP * 8 * 8 * MIB}
    side = SimpleNamespace(ddp=SimpleNamespace(
        threads=[ThreadCPU(tid=t, cpu_us=v) for t, v in cpu.items()]))
    return GlooRank(r, 2, "h", Path(f"rank{r}.json"), 0, colls=colls), side


def test_collective_cpu_cost_from_the_threads_cpu_times():
    """a + k × bytes per collective, with the workers' times solved by least squares and the
    TCP loop's per byte."""
    ranks, sides = zip(*(_rank(r) for r in (0, 1)))
    warnings: list[str] = []
    fixed, per_mb, src = host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)),
                                       latency_us=200.0, bus_gbps=1.0, world=2,
                                       warnings=warnings)
    assert fixed == pytest.approx(A_US) and per_mb == pytest.approx((K_WORKER + K_TCP) * MIB)
    assert src == "measured" and not warnings
    # without thread times: one core busy for the transfer (latency + a MiB at 1 GB/s = 1e3
    # bytes per µs), assumed, with a warning
    fixed, per_mb, src = host_cpu_cost(dict(enumerate(ranks)), {}, 200.0, 1.0, 2, warnings)
    assert (fixed, per_mb, src) == (200.0, pytest.approx(MIB / 1e3), "assumed")
    assert "not in the capture sidecars" in warnings[0]
    # the workers ran one mix of sizes: not separable, all of it per byte
    same = {r: GlooRank(r, 2, "h", Path("x"), 0, colls=[c for c in rk.colls if c.tid == 11])
            for r, rk in enumerate(ranks)}
    fixed, per_mb, _ = host_cpu_cost(same, dict(enumerate(sides)), 200.0, 1.0, 2, warnings)
    assert fixed == 0.0 and per_mb > 0 and "could not be split" in warnings[-1]


def test_collective_cpu_cost_from_the_buckets_marks_goes_through_the_workers_a():
    """With the job's per-bucket marks (``ddp.bucket_cpu``: every backend thread's CPU from
    one bucket's readiness to the next's), ``k`` is fitted to them through the worker threads'
    per-collective CPU ``a`` (the TCP loop's CPU is per byte: 8 all-reduces of 1 MiB cost it
    what one of 8 MiB does, measured): ``k = Σ m (c − a) / Σ m²`` over the buckets, and the
    model's notes name that ``a``. Where the workers do not separate ``a``, the marks' own
    line ``a + k × MiB`` is fitted, as where the threads' times are absent."""
    from stepsim.calibration.sidecar import BucketCPU

    a_us, k_us = 450.0, 480.0                          # the marks' own line
    ranks, sides = zip(*(_rank(r) for r in (0, 1)))
    for s in sides:
        s.ddp.bucket_cpu = [BucketCPU(bytes=b, cpu_us=20 * (a_us + k_us * b / MIB), steps=20)
                            for b in (MIB, 7 * MIB)]
    warnings: list[str] = []
    notes: dict = {}
    fixed, per_mb, src = host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)),
                                       200.0, 1.0, 2, warnings, notes)
    # 1 MiB: 930 − 300 = 630; 7 MiB: 3810 − 300 = 3510; k = (630 + 7 × 3510) / 50 = 504
    assert (fixed, per_mb, src) == (pytest.approx(A_US), pytest.approx(504.0), "measured")
    # and the marks' own intercept, the transfer line's floor (a collective's span holds
    # more per collective than its CPU work)
    assert notes == {"host_cpu_worker_us": pytest.approx(A_US),
                     "transfer_floor_us": pytest.approx(a_us)} and not warnings
    # the per-step total of the marks is kept within the least-squares residual
    assert fixed + per_mb * 7 == pytest.approx(a_us + k_us * 7, rel=0.02)
    # the workers ran one mix of sizes: the marks' own line, no note
    same = {r: GlooRank(r, 2, "h", Path("x"), 0, colls=[c for c in rk.colls if c.tid == 11])
            for r, rk in enumerate(ranks)}
    notes = {}
    fixed, per_mb, _ = host_cpu_cost(same, dict(enumerate(sides)), 200.0, 1.0, 2, warnings,
                                     notes)
    assert (fixed, per_mb) == (pytest.approx(a_us), pytest.approx(k_us)) and notes == {}
    # one bucket size: through the workers' a, k = (c − a) / m
    for s in sides:
        s.ddp.bucket_cpu = [BucketCPU(bytes=2 * MIB, cpu_us=20 * 1500.0, steps=20)] * 2
    fixed, per_mb, _ = host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)),
                                     200.0, 1.0, 2, warnings)
    assert (fixed, per_mb) == (pytest.approx(A_US), pytest.approx(600.0))
    # ... and where that a is above the marks (k < 0): the threads' totals
    for s in sides:
        s.ddp.bucket_cpu = [BucketCPU(bytes=MIB, cpu_us=20 * 100.0, steps=20)] * 2
    fixed, per_mb, _ = host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)),
                                     200.0, 1.0, 2, warnings)
    assert fixed == pytest.approx(A_US) and per_mb == pytest.approx((K_WORKER + K_TCP) * MIB)


def test_replicates_pool_the_per_bucket_cpu_fit_at_the_captures_speed():
    """The capture and its replicates are the same setting measured again: a and k are fitted
    over every run's per-bucket CPU, each divided by its run's host speed (a replicate at 1.25x
    the capture's CPU time counts as the capture's), so two runs whose own fits miss in
    opposite directions give the line between them. Without marks in every run, or a model
    whose CPU cost was not measured, nothing changes."""
    from stepsim.calibration.gloo_cpu import pool_bucket_cpu
    from stepsim.calibration.sidecar import BucketCPU
    from tests.test_ddp_ranks import cpu_ddp

    def run(a_us, k_us, speed=1.0):
        return [SimpleNamespace(ddp=SimpleNamespace(bucket_cpu=[
            BucketCPU(bytes=b, cpu_us=10 * speed * (a_us + k_us * b / MIB), steps=10)
            for b in (MIB, 7 * MIB)])) for _ in (0, 1)]

    m = cpu_ddp(2)
    m = m.model_copy(update={"meta": m.meta.model_copy(
        update={"sources": {"comm.host_cpu_us": "measured"}})})
    got = pool_bucket_cpu(m, [run(300.0, 500.0), run(500.0, 500.0, speed=1.25)], [1.0, 1.25])
    assert got.comm.host_cpu_us == pytest.approx(400.0)
    assert got.comm.host_cpu_us_per_mb == pytest.approx(500.0)
    assert got.meta.notes["host_cpu_fit_runs"] == 2
    # through the capture's workers' a: k = Σ m (c − a) / Σ m² over both runs' buckets; the
    # transfer floor noted is the runs' own pooled intercept
    worker = m.model_copy(update={"meta": m.meta.model_copy(
        update={"notes": {"host_cpu_worker_us": 200.0, "transfer_floor_us": 300.0}})})
    got = pool_bucket_cpu(worker, [run(300.0, 500.0), run(500.0, 500.0, speed=1.25)],
                          [1.0, 1.25])
    assert got.comm.host_cpu_us == pytest.approx(200.0)
    assert got.meta.notes["transfer_floor_us"] == pytest.approx(400.0)
    assert got.comm.host_cpu_us_per_mb == pytest.approx(
        (2 * (1 * 600 + 7 * 3600) + 2 * (1 * 800 + 7 * 3800)) / (4 * 50))   # 532
    bare = [SimpleNamespace(ddp=SimpleNamespace(bucket_cpu=[]))] * 2
    assert pool_bucket_cpu(m, [run(300.0, 500.0), bare], [1.0, 1.0]) is m
    assumed = m.model_copy(update={"meta": m.meta.model_copy(update={"sources": {}})})
    assert pool_bucket_cpu(assumed, [run(300.0, 500.0)] * 2, [1.0, 1.0]) is assumed


def test_pooling_moves_a_one_size_transfer_line_to_the_pooled_per_collective_cpu():
    """A one-size transfer line through the capture's own per-collective CPU (latency_us =
    host_cpu_us) goes through the pooled one instead, with the same time at the clean
    all-reduce's size (cpu_ddp's 4e6 B); a line with another latency is left alone."""
    from stepsim.calibration.gloo_cpu import pool_bucket_cpu
    from stepsim.calibration.sidecar import BucketCPU
    from stepsim.models.ddp import collective_us

    def run(a_us, k_us):
        return [SimpleNamespace(ddp=SimpleNamespace(bucket_cpu=[
            BucketCPU(bytes=b, cpu_us=10 * (a_us + k_us * b / MIB), steps=10)
            for b in (MIB, 7 * MIB)])) for _ in (0, 1)]

    m = cpu_ddp(2)
    m = m.model_copy(update={
        "comm": m.comm.model_copy(update={"host_cpu_us": 300.0, "latency_us": 300.0,
                                          "bus_gbps": 1.0}),
        "meta": m.meta.model_copy(update={"sources": {"comm.host_cpu_us": "measured"}})})
    at = collective_us(4_000_000, 2, 1.0, 300.0)
    got = pool_bucket_cpu(m, [run(300.0, 500.0), run(500.0, 500.0)], [1.0, 1.0])
    assert got.comm.latency_us == pytest.approx(400.0)
    assert collective_us(4_000_000, 2, got.comm.bus_gbps, 400.0) == pytest.approx(at)
    other = m.model_copy(update={"comm": m.comm.model_copy(update={"latency_us": 50.0})})
    got = pool_bucket_cpu(other, [run(300.0, 500.0), run(500.0, 500.0)], [1.0, 1.0])
    assert (got.comm.latency_us, got.comm.bus_gbps) == (50.0, 1.0)
    # a = the workers' 200 µs, the line through the marks' own intercept (300 µs, noted):
    # it moves to the pooled intercept, the CPU stays the workers'
    worker = m.model_copy(update={
        "comm": m.comm.model_copy(update={"host_cpu_us": 200.0}),
        "meta": m.meta.model_copy(update={"notes": {"host_cpu_worker_us": 200.0,
                                                    "transfer_floor_us": 300.0}})})
    got = pool_bucket_cpu(worker, [run(300.0, 500.0), run(500.0, 500.0)], [1.0, 1.0])
    assert (got.comm.latency_us, got.comm.host_cpu_us) == (pytest.approx(400.0), 200.0)
    assert collective_us(4_000_000, 2, got.comm.bus_gbps, 400.0) == pytest.approx(at)


def test_a_rank_at_several_intra_op_threads_is_said_to_count_its_openmp_team_as_gloos():
    """The capture counts every thread but the training thread as the backend's: at 2
    intra-op threads a rank torch's second OpenMP thread (named like the training thread) is
    in the measured gloo CPU, which a warning says with that thread's CPU; at 1, no warning."""
    ranks, sides = zip(*(_rank(r) for r in (0, 1)))
    for s in sides:
        s.ddp.threads.append(ThreadCPU(tid=13, name="python", cpu_us=50_000.0))
        s.torch_num_threads = 2
    warnings: list[str] = []
    host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)), 200.0, 1.0, 2, warnings)
    said = [w for w in warnings if "intra-op threads each" in w]
    assert len(said) == 1 and "OpenMP team (100.0 ms" in said[0]
    assert "torch.set_num_threads(1)" in said[0]
    for s in sides:
        s.torch_num_threads = 1
    warnings = []
    host_cpu_cost(dict(enumerate(ranks)), dict(enumerate(sides)), 200.0, 1.0, 2, warnings)
    assert not [w for w in warnings if "intra-op threads each" in w]
