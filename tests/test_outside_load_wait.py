"""The outside-load check counts a thread as runnable only for its CPU time plus its run-queue
wait (the sidecar's ``run_wait_us``), and only inside the profiled window: the demo's quiet
2-core machine read as loaded (held 0.83-0.93 at 2-8 workers) when batches that began before
the window, beside an unprofiled step it did not count, were counted whole."""
from __future__ import annotations

import pytest

from stepsim.calibration.outside_load import LOAD_WARN, outside_load
from stepsim.calibration.sidecar import Sidecar

MS = 1000.0
BOUND = 1 / (1 + LOAD_WARN)


def _side(batches, steps, cores=2, workers=1) -> Sidecar:
    """Worker batches ``(worker, start, end, cpu, wait)`` and training steps ``(start, end,
    cpu, wait, profiled)`` outside ``next()`` (ms; ``wait``: the thread's run-queue wait)."""
    produce = [{"worker": w, "pid": 100 + w, "seq": 1 + i, "wall_us": (b - a) * MS,
                "cpu_us": c * MS, "proc_cpu_us": c * MS, "t_end_us": b * MS,
                "run_wait_us": q * MS} for i, (w, a, b, c, q) in enumerate(batches)]
    rows = [{"t_start_us": a * MS, "wall_us": (b - a) * MS, "cpu_us": c * MS,
             "proc_cpu_us": c * MS, "next_wall_us": 0.0, "next_cpu_us": 0.0,
             "next_proc_cpu_us": 0.0, "vcsw": 0, "ivcsw": 10, "run_wait_us": q * MS,
             "next_run_wait_us": 0.0, "profiled": p} for a, b, c, q, p in steps]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "host_cores": cores,
                                   "torch_num_threads": 1, "produce": produce, "steps": rows,
                                   "loader": {"num_workers": workers}})


def _one_worker(cpu, wait, n=4, wall=100.0):
    """One worker and the main thread, each interval ``wall`` ms with ``cpu`` and ``wait``."""
    return _side([(0, k * wall, (k + 1) * wall, cpu, wait) for k in range(n)],
                 [(k * wall, (k + 1) * wall, cpu, wait, True) for k in range(n)])


def test_intervals_that_block_on_a_quiet_machine_are_not_load():
    # each thread computes 40 ms of every 100, never waits for a core, blocks the rest (I/O,
    # a queue): 0.8 of a core runnable on 2 cores, and it held all of it. The old check took
    # both threads as runnable throughout: held 80 / 200 = 0.4, "2.5x slower"
    o = outside_load(_one_worker(40, 0), 1, 1, 1)
    assert o.held == pytest.approx(1.0) and o.warning() is None
    assert o.mean_threads == pytest.approx(0.8)


def test_a_co_runner_burning_a_core_is_still_load():
    # a spinner beside one worker and the main thread: 3 runnable threads share 2 cores, each
    # gets 2/3 of one and waits the rest: the run's 2 runnable threads held 4/3 of 2 cores
    o = outside_load(_one_worker(200 / 3, 100 / 3), 1, 1, 1)
    assert o.held == pytest.approx(2 / 3) and o.warning() is not None
    # the same with blocking: 40 ms of CPU, 20 of waiting, 40 blocked per 100 ms
    o = outside_load(_one_worker(40, 20), 1, 1, 1)
    assert o.held == pytest.approx(40 / 60) and o.warning() is not None


def test_batches_begun_before_the_window_are_counted_inside_it_only():
    # two workers and the main thread always runnable on 2 cores, quiet: each gets 2/3 of a
    # core. Steps of 90 ms (60 of CPU), the first two unprofiled (the window is 180-540 ms);
    # batches of 135 ms (90 of CPU). The old check counted the batches that end in the window
    # whole, from 67.5 ms on, beside no step: 780 ms of CPU against 877.5 it could hold
    # (0.889, past the bound); inside the window the three threads held both cores.
    batches = [(0, a, a + 135, 90, 45) for a in (0, 135, 270, 405)]
    batches += [(1, a, a + 135, 90, 45) for a in (-67.5, 67.5, 202.5, 337.5, 472.5)]
    steps = [(90 * k, 90 * (k + 1), 60, 30, k >= 2) for k in range(6)]
    o = outside_load(_side(batches, steps, workers=2), 2, 1, 1)
    assert o.held == pytest.approx(1.0) and o.warning() is None
    assert o.could_us == pytest.approx(2 * 360 * MS) and o.steps == 4
    # the same run with a spinner beside it (4 threads on 2 cores, 1/2 a core each) is load
    batches = [(w, a, b, (b - a) / 2, (b - a) / 2) for w, a, b, _, _ in batches]
    steps = [(a, b, 45, 45, p) for a, b, _, _, p in steps]
    o = outside_load(_side(batches, steps, workers=2), 2, 1, 1)
    assert o.held == pytest.approx(0.75) and o.held < BOUND


def test_a_sidecar_without_run_queue_waits_reads_as_before():
    # sidecars written before run_wait_us: every interval runnable throughout, as before
    side = _one_worker(40, 0)
    for r in side.produce:
        r.run_wait_us = None
    for s in side.steps:
        s.run_wait_us = None
    assert outside_load(side, 1, 1, 1).held == pytest.approx(0.4)


def test_a_workers_work_between_its_batches_holds_the_core_too():
    # two workers on one core, the main thread blocked in next(): while one makes a batch
    # (50 ms of CPU in 100, waiting the rest), the other hands its last batch to its queue
    # (its feeder thread pickles it: the sidecar's gap_*, the same 50 ms and wait). The core
    # was full; counted without the gaps the batches held half of it, "2x slower".
    produce = []
    for k in range(7):
        w = k % 2
        rec = {"worker": w, "pid": 100 + w, "seq": 1 + k // 2, "wall_us": 100 * MS,
               "cpu_us": 50 * MS, "proc_cpu_us": 50 * MS, "t_end_us": (k + 1) * 100 * MS,
               "run_wait_us": 50 * MS}
        if k >= 1:
            rec.update(gap_wall_us=100 * MS, gap_cpu_us=50 * MS, gap_run_wait_us=50 * MS)
        produce.append(rec)
    steps = [{"t_start_us": k * 100 * MS, "wall_us": 100 * MS, "cpu_us": 0.0,
              "next_wall_us": 100 * MS, "next_cpu_us": 0.0, "next_run_wait_us": 0.0,
              "run_wait_us": 0.0, "profiled": k >= 1} for k in range(6)]
    side = Sidecar.model_validate({"stepsim_sidecar": 1, "host_cores": 1, "produce": produce,
                                   "steps": steps, "loader": {"num_workers": 2}})
    o = outside_load(side, 2, 1, 1)
    assert o.held == pytest.approx(1.0) and o.warning() is None
    for r in side.produce:
        r.gap_cpu_us = None
    assert outside_load(side, 2, 1, 1).held == pytest.approx(0.5)


def test_the_capture_records_each_threads_run_queue_wait(cpu_run_nw1):
    # where the kernel says (Linux schedstat): per batch and per step; a thread cannot wait
    # for a core longer than it was not running; a worker's later batches carry its gap
    import json
    from pathlib import Path

    if not Path("/proc/thread-self/schedstat").is_file():
        pytest.skip("no per-thread schedstat on this OS")
    side = Sidecar.model_validate(json.loads((cpu_run_nw1 / "sidecar.json").read_text()))
    # µs: the clocks are read one after another. A step's wall clock is read within
    # BRACKET_US after its run-queue reads (calibration.window.clocks), so its wait exceeds its
    # wall less its CPU by at most 2 x 500 µs; read wall-first, a preemption the CPU-clock read
    # brought put 5-14 ms of wait into the step on a loaded machine (2 spinners, 2 cores)
    slack = 2000.0
    for r in side.produce:
        assert r.run_wait_us is not None and r.run_wait_us <= r.wall_us - r.cpu_us + slack
        if r.gap_run_wait_us is not None:       # the gap's wall brackets its two wait reads
            assert r.gap_run_wait_us <= r.gap_wall_us + slack
    assert any(r.gap_cpu_us is not None for r in side.produce)
    for s in side.steps:
        assert s.run_wait_us is not None and s.next_run_wait_us is not None
        assert s.run_wait_us <= (s.wall_us - s.next_wall_us) - (s.cpu_us - s.next_cpu_us) + slack
