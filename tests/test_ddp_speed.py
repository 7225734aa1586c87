"""The DDP demo's readings of a row's host and backend (:mod:`demo.ddp_speed`): closed forms
on runs built as :mod:`demo.ddp_job` records them."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from stepsim.demo.ddp import speed_line
from stepsim.demo.ddp_speed import (backend_cpu_us, forward_cpu_us, fwd_ratio,
                                    priced_backend_us, row_readings)


def _rank(fwd_cpu_us, backend_us=0.0, steps=3):
    """One rank's run: every step's forward ``fwd_cpu_us`` of thread CPU (phases index 5 to
    6), its backend threads ``backend_us`` of CPU in all."""
    rows = [[0.0] * 5 + [1000.0 * k, 1000.0 * k + v, 0, 0, 0, 0]
            for k, v in enumerate(fwd_cpu_us if isinstance(fwd_cpu_us, list)
                                  else [fwd_cpu_us] * steps)]
    return {"phases": rows, "threads": [{"main": True, "cpu_us": 9e9},
                                        {"main": False, "cpu_us": backend_us * 0.25},
                                        {"main": False, "cpu_us": backend_us * 0.75}]}


def test_forward_cpu_is_each_ranks_median_step_then_the_mean_over_ranks():
    """Rank 0's steps 2900, 3000, 9000 µs (median 3000), rank 1's 3200: 3100 µs."""
    assert forward_cpu_us([_rank([2900.0, 3000.0, 9000.0]), _rank(3200.0)]) == 3100.0
    assert forward_cpu_us([{"phases": []}]) is None


def test_backend_cpu_is_the_non_training_threads_per_rank_step():
    """3 steps; backend threads 9000 and 12000 µs in all on the two ranks: 3000 and 4000 a
    step, 3500 µs a rank-step; the training thread's CPU is not counted."""
    assert backend_cpu_us([_rank(1.0, 9000.0), _rank(1.0, 12000.0)]) == pytest.approx(3500.0)
    assert backend_cpu_us([{"phases": [[0] * 11]}]) is None


def test_fwd_ratio_pairs_each_round_with_the_reference_and_takes_the_median():
    """Rounds 0-2: 2700/3000, 3000/3000, 2400/3000 (0.9, 1.0, 0.8): median 0.9; a round
    missing its reference is left out."""
    runs = {}
    for k, (a, b) in enumerate([(2700.0, 3000.0), (3000.0, 3000.0), (2400.0, 3000.0)]):
        runs[f"b25#{k}"], runs[f"def#{k}"] = [_rank(a)] * 2, [_rank(b)] * 2
    assert fwd_ratio(runs, "b25", "def", 3) == pytest.approx(0.9)
    runs["b25#3"] = [_rank(1.0)] * 2
    assert fwd_ratio(runs, "b25", "def", 4) == pytest.approx(0.9)
    assert fwd_ratio(runs, "b1", "def", 3) is None


def _model(sizes, a=100.0, k=450.0, barrier=False):
    tasks = [SimpleNamespace(id=f"ar{i}", kind="collective", bytes=b)
             for i, b in enumerate(sizes)]
    if barrier:      # a barrier: a collective of no bytes
        tasks.append(SimpleNamespace(id="barrier", kind="collective", bytes=0))
    tasks.append(SimpleNamespace(id="c", kind="compute", bytes=123))
    return SimpleNamespace(comm=SimpleNamespace(host_cpu_us=a, host_cpu_us_per_mb=k,
                                                comm_stream="gloo"),
                           host=SimpleNamespace(uses_core=True),
                           device=SimpleNamespace(streams={"gloo": tasks}))


def test_the_priced_backend_cpu_is_the_simulators_per_collective_line():
    """1 + 7 MiB: 2 x 100 + 450 x 8 = 3800 µs; one 8 MiB: 100 + 3600 = 3700 µs; a barrier
    (no bytes) is charged its fixed 100 µs, as the simulator charges it, a compute task
    nothing; where collectives take no host core, nothing is priced."""
    assert priced_backend_us(_model([2 ** 20, 7 * 2 ** 20])) == pytest.approx(3800.0)
    assert priced_backend_us(_model([8 * 2 ** 20])) == pytest.approx(3700.0)
    assert priced_backend_us(_model([8 * 2 ** 20], barrier=True)) == pytest.approx(3800.0)
    off = _model([8 * 2 ** 20])
    off.host.uses_core = False
    assert priced_backend_us(off) == 0.0


def test_a_straggler_row_gets_no_host_reading_and_the_note_names_the_others():
    """The straggler's forward is not identical work: no ratio; the note lists the scored
    rows' ratios and every row's measured / priced backend CPU."""
    runs = {f"{s}#0": [_rank(f, 6000.0)] * 2 for s, f in (("def", 3000.0), ("b25", 2700.0),
                                                           ("strag", 9000.0))}
    strag = row_readings(runs, "strag", "def", 1, _model([8 * 2 ** 20]), straggler=True)
    b25 = row_readings(runs, "b25", "def", 1, _model([8 * 2 ** 20]), straggler=False)
    assert strag["host_fwd_ratio"] is None and b25["host_fwd_ratio"] == pytest.approx(0.9)
    assert b25["backend_cpu_ms"] == pytest.approx(2.0) and b25["backend_priced_ms"] == \
        pytest.approx(3.7)
    line = speed_line([{"setting": "b25", "in_sample": False, **b25},
                       {"setting": "strag", "in_sample": False, **strag}])
    assert "b25 x0.900" in line and "strag x" not in line
    assert "b25 2.00/3.70" in line and "strag 2.00/3.70" in line
