"""A gloo thread that woke takes a core from a training thread (Linux's wake-up preemption), and
the capture's backward gives back the time its training thread lost so: closed forms for the
pool and for the calibration's deduction."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from stepsim.calibration.gloo_preempt import deduct_preemption, overlap_cpu_us, own_enqueue_us
from stepsim.calibration.sidecar import BucketCPU
from stepsim.models.cpu import CpuPool
from stepsim.models.params import HostOp

MIB = 2 ** 20
WORK, START, PIECE, N = 8000.0, 1000.0, 175.0, 5
"""Two training threads' backward (µs of CPU each), when the woken thread starts, its pieces
(µs of CPU each) and their number."""


def _run(threads: int, cores: int = 2):
    """``threads`` training threads of WORK µs from 0 and one woken thread running N pieces of
    PIECE µs from START, each after it woke (``preempt``): the instants each ended (µs)."""
    env = simpy.Environment()
    pool = CpuPool(env, cores, contended=True)
    ends = {}

    def train(i):
        yield from pool.work(WORK)
        ends[i] = env.now

    def woken():
        yield env.timeout(START)
        for _ in range(N):
            yield from pool.work(PIECE, preempt=True)
        ends["gloo"] = env.now

    for i in range(threads):
        env.process(train(i))
    env.process(woken())
    env.run()
    return ends


def test_a_woken_thread_on_busy_cores_runs_at_once_and_the_holders_absorb_it():
    """Both cores held by training threads: the woken thread's N pieces run back to back from
    START (no wait for a 2 ms quantum to end), and the training threads end later by its CPU
    in all, N × PIECE: the cores' time adds up. (The FIFO pool made each piece wait for a
    quantum: the woken thread ended near the training threads, 7.9 ms late, and they lost
    525 µs each, not 875 µs together.)"""
    ends = _run(2)
    assert ends["gloo"] == pytest.approx(START + N * PIECE)
    assert ends[0] + ends[1] - 2 * WORK == pytest.approx(N * PIECE)
    assert max(ends[0], ends[1]) - WORK <= N * PIECE / 2 + PIECE + 1e-6  # shared, not on one


def test_a_woken_thread_with_an_idle_core_takes_it_and_nobody_waits():
    """One training thread on 2 cores: the woken thread takes the idle core; nothing is owed."""
    ends = _run(1)
    assert ends["gloo"] == pytest.approx(START + N * PIECE)
    assert ends[0] == pytest.approx(WORK)


def _side(overlap_us: float, steps: int = 2):
    """A rank's capture sidecar with bucket marks: a 1 MiB bucket reduced during backward
    (``overlap_us`` of backend CPU a step) and the 7 MiB last one."""
    marks = [BucketCPU(bytes=MIB, cpu_us=overlap_us * steps, steps=steps),
             BucketCPU(bytes=7 * MIB, cpu_us=3000.0 * steps, steps=steps)]
    return SimpleNamespace(ddp=SimpleNamespace(bucket_cpu=marks))


OPS = [HostOp(kind="cpu", name="forward", dur_us=3000.0, phase="forward"),
       HostOp(kind="cpu", name="backward", dur_us=1000.0, phase="backward"),
       HostOp(kind="launch", name="enqueue", dur_us=100.0, task="ar0", phase="backward"),
       HostOp(kind="cpu", name="backward", dur_us=6000.0, samples_us=[5000.0, 7000.0],
              phase="backward"),
       HostOp(kind="launch", name="enqueue", dur_us=100.0, task="ar1", phase="backward"),
       HostOp(kind="cpu", name="backward", dur_us=10.0, phase="backward"),
       HostOp(kind="sync", name="wait", task="ar1", phase="backward")]


def test_backward_between_the_enqueues_gives_back_the_ranks_mean_overlap_cpu():
    """Two ranks on one 2-core host, 800 and 900 µs of gloo CPU a step between their first and
    last bucket marks: 850 µs comes out of the backward between the enqueues (6000 µs, and each
    step's sample in proportion); nothing else changes."""
    sides = {0: _side(800.0), 1: _side(900.0)}
    assert overlap_cpu_us(sides[0]) == pytest.approx(800.0)
    warns: list[str] = []
    ops, lost = deduct_preemption(OPS, {"ar0", "ar1"}, {0: "h", 1: "h"}, sides, cores=2,
                                  team=1, ref=0, warnings=warns)
    assert lost == pytest.approx(850.0)
    assert ops[3].dur_us == pytest.approx(6000.0 - 850.0)
    f = 1 - 850.0 / 6000.0
    assert ops[3].samples_us == pytest.approx([5000.0 * f, 7000.0 * f])
    assert [o.dur_us for j, o in enumerate(ops) if j != 3] == [o.dur_us for j, o in
                                                              enumerate(OPS) if j != 3]
    assert not warns


@pytest.mark.parametrize("cores,hosts,sides", [
    (4, {0: "h", 1: "h"}, {0: _side(800.0), 1: _side(900.0)}),      # a core to spare
    (2, {0: "h", 1: "h"}, {0: _side(800.0), 1: None}),              # a rank without marks
    (1, {0: "a", 1: "b"}, {0: _side(800.0), 1: _side(900.0)}),      # hosts apart: 1 on 1 core
])
def test_nothing_is_taken_out_without_busy_cores_or_marks(cores, hosts, sides):
    ops, lost = deduct_preemption(OPS, {"ar0", "ar1"}, hosts, sides, cores=cores, team=1,
                                  ref=0, warnings=[])
    if cores == 1:      # one training thread on its one core: its own gloo CPU preempts it
        assert lost == pytest.approx(800.0)
    else:
        assert lost == 0.0 and ops == OPS


def test_the_profiler_factor_scales_what_is_taken_out():
    """Host durations already scaled by the profiler factor 0.9 held the wait scaled alike:
    0.9 × 850 µs comes out."""
    sides = {0: _side(800.0), 1: _side(900.0)}
    ops, lost = deduct_preemption(OPS, {"ar0", "ar1"}, {0: "h", 1: "h"}, sides, cores=2,
                                  team=1, ref=0, warnings=[], scale=0.9)
    assert lost == pytest.approx(0.9 * 850.0)
    assert ops[3].dur_us == pytest.approx(6000.0 - 0.9 * 850.0)


def test_an_enqueues_own_cost_is_each_steps_cheapest_enqueue_median_over_steps():
    """Per step the cheapest enqueue (50, 60, 40 µs), the median over the steps: 50 µs; a step
    holding no enqueue is skipped; none at all gives None."""
    assert own_enqueue_us([[300.0, 50.0], [60.0, 900.0], [55.0, 40.0], []]) == 50.0
    assert own_enqueue_us([[], []]) is None


def _ops_with_enqueues(first_us: float, last_us: float) -> list[HostOp]:
    ops = list(OPS)
    ops[2] = ops[2].model_copy(update={"dur_us": first_us})
    ops[4] = ops[4].model_copy(update={"dur_us": last_us})
    return ops


def test_a_wait_in_the_first_enqueue_counts_against_the_gloo_cpu_taken_out_of_backward():
    """The first enqueue's wall 400 µs of which its own cost is 100: 300 µs of the 850 µs of
    gloo CPU was waited there, so 550 comes out of the backward between the enqueues; the
    captured time between the first and the last enqueue (400 + 6000) loses 850 in all, as
    before; the last enqueue (250) is priced at 100 too, its wait past the marks' span (the
    host waits for the all-reduces next) taken out without counting against the 850."""
    sides = {0: _side(800.0), 1: _side(900.0)}
    ops0 = _ops_with_enqueues(400.0, 250.0)
    ops, taken = deduct_preemption(ops0, {"ar0", "ar1"}, {0: "h", 1: "h"}, sides, cores=2,
                                   team=1, ref=0, warnings=[], enqueue_us=100.0)
    assert ops[2].dur_us == 100.0 and ops[4].dur_us == 100.0
    assert ops[3].dur_us == pytest.approx(6000.0 - 550.0)
    assert (ops0[2].dur_us + ops0[3].dur_us) - (ops[2].dur_us + ops[3].dur_us) == \
        pytest.approx(850.0)
    assert taken == pytest.approx(850.0 + 150.0)
    assert [o.dur_us for j, o in enumerate(ops) if j not in (2, 3, 4)] == \
        [o.dur_us for j, o in enumerate(ops0) if j not in (2, 3, 4)]


def test_an_enqueue_that_waited_more_than_the_gloo_cpu_leaves_the_backward_whole():
    """The first enqueue's wall 2000 µs (its own cost 100): more than the 850 µs of gloo CPU
    was waited there (other threads' too), so nothing comes out of the backward; the enqueue
    is priced at its own cost; an enqueue already below it keeps its wall."""
    sides = {0: _side(800.0), 1: _side(900.0)}
    ops, taken = deduct_preemption(_ops_with_enqueues(2000.0, 60.0), {"ar0", "ar1"},
                                   {0: "h", 1: "h"}, sides, cores=2, team=1, ref=0,
                                   warnings=[], enqueue_us=100.0)
    assert ops[2].dur_us == 100.0 and ops[4].dur_us == 60.0
    assert ops[3].dur_us == 6000.0
    assert taken == pytest.approx(1900.0)


def test_with_a_core_to_spare_the_enqueues_keep_their_walls():
    """4 cores for 2 training threads: a woken gloo thread takes an idle core, so an enqueue's
    wall is no wait for one and nothing changes."""
    sides = {0: _side(800.0), 1: _side(900.0)}
    ops0 = _ops_with_enqueues(400.0, 250.0)
    ops, taken = deduct_preemption(ops0, {"ar0", "ar1"}, {0: "h", 1: "h"}, sides, cores=4,
                                   team=1, ref=0, warnings=[], enqueue_us=100.0)
    assert ops == ops0 and taken == 0.0
