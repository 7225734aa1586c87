"""A gloo collective's wake-ups, each waiting for a core when every core of the host is busy:
closed forms for the simulator and the calibration from the job's per-bucket schedstat."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from stepsim.calibration.gloo_wake import PRIOR, pool_wake, wake_params
from stepsim.calibration.sidecar import BucketCPU
from stepsim.models.cpu import CpuPool
from stepsim.models.device import LaunchQueue, StepEvents, TaskPlan, stream_process
from stepsim.simcore.record import Recorder
from tests.test_ddp_ranks import B, C, F, O, cpu_ddp, step_us

MIB = 2 ** 20
L_US, EPS = 150.0, 1e-3
"""The wait per wake-up on busy cores (µs); a collective's CPU work small enough to leave
the closed forms exact to within it."""


def _chain(n: int, w: int, busy_threads: int, cores: int = 2) -> float:
    """One step of ``n`` collectives of transfer C (EPS of CPU work, ``w`` wake-ups each) on a
    host of ``cores`` cores, ``busy_threads`` of which something else keeps busy all along:
    the time the stream takes (µs)."""
    env = simpy.Environment()
    # an uncontended pool runs work as a timeout: the threads inside it count as busy cores
    pool = CpuPool(env, cores, contended=False)
    for _ in range(busy_threads):
        env.process(pool.work(1e9))
    ids = [f"ar{k}" for k in range(n)]
    plans = [TaskPlan(i, i, "communication", C, (), False, None, True, False) for i in ids]
    events = StepEvents(env)
    proc = env.process(stream_process(
        env, 0, "gloo", plans, events, None, {}, Recorder(), 1, LaunchQueue(env, 8), [],
        lambda s: True, cpu=pool, cpu_us=dict.fromkeys(ids, EPS),
        wake=dict.fromkeys(ids, (w, L_US))))
    env.run(until=proc)
    return env.now


@pytest.mark.parametrize("n,w", [(1, 1), (2, 7), (8, 10)])
def test_n_collectives_on_busy_cores_add_n_w_l(n, w):
    """Every core busy: each of the n·w wake-ups waits L, n·w·L on top of n transfers; one
    core idle: nothing (the processor-shared pool alone gives a woken thread its share at
    once, which is what the wake-ups correct)."""
    assert _chain(n, w, busy_threads=2) == pytest.approx(n * C + n * w * L_US, abs=n * w * EPS)
    assert _chain(n, w, busy_threads=1) == pytest.approx(n * C, abs=n * w * EPS)
    assert _chain(n, w, busy_threads=3) == pytest.approx(n * C + n * w * L_US, abs=n * w * EPS)
    assert _chain(n, w, busy_threads=0) == pytest.approx(n * C, abs=n * w * EPS)


def _wake(m, w0: float, w1: float, wait_us: float):
    return m.model_copy(update={"comm": m.comm.model_copy(update={
        "host_cpu_us": EPS, "wakeups": w0, "wakeups_per_mb": w1, "wakeup_wait_us": wait_us})})


def test_a_collective_after_backward_with_idle_cores_waits_for_none():
    """Two ranks on two cores: after backward both training threads wait, so every wake-up
    finds a core idle: the step stays F + B + C + O; an NCCL-like model (no host CPU work)
    reads no wake-ups at all."""
    m = cpu_ddp(cores=2)
    assert step_us(_wake(m, 7, 3, L_US)) == pytest.approx(F + B + C + O, abs=1.0)
    nccl = m.model_copy(update={"comm": m.comm.model_copy(update={
        "wakeups": 7, "wakeups_per_mb": 3, "wakeup_wait_us": L_US})})
    assert step_us(nccl) == step_us(m)


def _side(marks):
    return SimpleNamespace(ddp=SimpleNamespace(bucket_cpu=marks))


def _marks(w0, w1, wait_us, steps=20, sizes=(MIB, 7 * MIB), idle_wait_us=40.0):
    """A rank's per-bucket marks: ``w0 + w1 × MiB`` timeslices a collective, ``wait_us`` per
    timeslice in the buckets before the last (reduced during backward), ``idle_wait_us`` in
    the last."""
    out = []
    for k, b in enumerate(sizes):
        n = round(steps * (w0 + w1 * b / MIB))
        per = wait_us if k < len(sizes) - 1 else idle_wait_us
        out.append(BucketCPU(bytes=b, cpu_us=1e3, steps=steps, timeslices=n,
                             runqueue_us=n * per))
    return out


def test_wake_ups_and_their_wait_from_the_sidecars_marks():
    """w0 + w1 × MiB by least squares over the marks' timeslices per step; L the run-queue
    wait per timeslice of the buckets reduced during backward (the last bucket's, after
    backward, is left out)."""
    sides = [_side(_marks(7.0, 3.0, 170.0)), _side(_marks(7.0, 3.0, 130.0))]
    vals, src = wake_params(sides)
    assert vals["wakeups"] == pytest.approx(7.0) and vals["wakeups_per_mb"] == pytest.approx(3.0)
    assert vals["wakeup_wait_us"] == pytest.approx(150.0)
    assert set(src.values()) == {"measured"}
    # one bucket a step (none reduced during backward): L is the stated prior
    warnings: list[str] = []
    vals, src = wake_params([_side(_marks(7.0, 3.0, 170.0, sizes=(8 * MIB,)))], warnings)
    assert vals["wakeups"] == pytest.approx(7.0 + 24.0)
    assert vals["wakeup_wait_us"] == PRIOR["wakeup_wait_us"]
    assert src["comm.wakeup_wait_us"] == "assumed" and "assumed" in warnings[0]
    # an older sidecar (marks without timeslices): every value the prior, assumed
    old = [_side([BucketCPU(bytes=MIB, cpu_us=1e3, steps=20)])]
    warnings = []
    vals, src = wake_params(old, warnings)
    assert vals == PRIOR and set(src.values()) == {"assumed"} and warnings


def test_replicates_pool_the_wake_up_fit():
    m = cpu_ddp(2)
    vals, src = wake_params([_side(_marks(7.0, 3.0, 200.0))])
    m = m.model_copy(update={"comm": m.comm.model_copy(update=vals),
                             "meta": m.meta.model_copy(update={"sources": src})})
    got = pool_wake(m, [[_side(_marks(7.0, 3.0, 200.0))], [_side(_marks(9.0, 3.0, 100.0))]])
    assert got.comm.wakeups == pytest.approx(8.0)
    assert got.comm.wakeup_wait_us == pytest.approx((200 * 10 + 100 * 12) / 22, rel=1e-3)
    assert pool_wake(m, [[_side(_marks(7.0, 3.0, 200.0))], [_side([])]]).comm == m.comm


def _sidecar_file(tmp_path, name: str, marks: list[dict]):
    import json

    from stepsim.calibration.sidecar import load_sidecar

    p = tmp_path / name
    # ten profiled steps, as the harness writes them: a mark's steps are bounded by the
    # file's profiled step records (calibration.sidecar_counts)
    steps = [{"wall_us": 10e3, "cpu_us": 9e3, "next_wall_us": 20.0, "next_cpu_us": 10.0,
              "profiled": True} for _ in range(10)]
    p.write_text(json.dumps({"stepsim_sidecar": 1, "loader": {"num_workers": 0},
                             "steps": steps,
                             "ddp": {"world_size": 2, "rank": 0, "backend": "gloo",
                                     "bucket_cpu": marks}}))
    return load_sidecar(p)


def test_wake_ups_from_sidecar_files_old_and_new(tmp_path):
    """A sidecar file with the marks' timeslices and run-queue wait calibrates them
    (measured); one written before they were recorded still reads, and gives the prior."""
    new = [{"bytes": b, "cpu_us": 1e3, "steps": 10, "timeslices": n, "runqueue_us": w}
           for b, n, w in ((MIB, 100, 100 * 160.0), (7 * MIB, 280, 280 * 110.0))]
    vals, src = wake_params([_sidecar_file(tmp_path, "new.json", new)])
    assert (vals["wakeups"], vals["wakeups_per_mb"]) == (pytest.approx(7.0), pytest.approx(3.0))
    assert vals["wakeup_wait_us"] == pytest.approx(160.0) and src["comm.wakeups"] == "measured"
    old = [{"bytes": b, "cpu_us": 1e3, "steps": 10} for b in (MIB, 7 * MIB)]
    vals, src = wake_params([_sidecar_file(tmp_path, "old.json", old)])
    assert vals == PRIOR and src["comm.wakeup_wait_us"] == "assumed"


def test_millions_of_wake_ups_are_simulated_as_a_bounded_few():
    """A 1 TiB all-reduce (or wakeups_per_mb 1e6) gave millions of wake-up events a step: a
    simulation that did not end (breaker, 2026-12-05). Past MAX_WAKE_PIECES each simulated
    wake-up stands for w / 256 of them and waits as long as they would together."""
    from stepsim.models.engine import MAX_WAKE_PIECES, wake_pieces

    assert wake_pieces(82, L_US) == (82, L_US) and wake_pieces(0, L_US) == (1, L_US)
    n, wait = wake_pieces(3_000_000, L_US)
    assert n == MAX_WAKE_PIECES and n * wait == pytest.approx(3_000_000 * L_US)
    m = _wake(cpu_ddp(cores=2), 0, 1e6, L_US)
    assert step_us(m) > 0       # ended (4 MB: 3.8e6 wake-ups a collective, 256 simulated)
