"""A replicate's host speed compares the two runs' training steps at one CPU cost per page
fault, pooled over the capture and its replicates (calibration.work_gauge.pooled_per_fault):
each run's own fit of that cost is noisy, and a user's two runs of one
setting (2-thread CNN, 1 worker, 2026-12-05, about 6,000 faults a step) fitted 4.64 and 2.50 µs,
which read as a host 1.371x slower where one cost per fault gives 1.07-1.09x."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.host_noise import identical_work_us, per_fault_us, replicate_speeds
from stepsim.calibration.work_gauge import at_one_fault_cost, pooled_per_fault
from stepsim.calibration.sidecar import Sidecar

FREE_US, C_US = 40_000.0, 3.0                     # fault-free step CPU, CPU µs per fault
FAULTS = [2000, 9000, 4000, 7000, 3000, 10000, 5000, 8000, 6000, 6000, 2500, 9500]


def _side(t0_us: float, tilt: float) -> Sidecar:
    """One run: a start-up step, unprofiled steps of FREE_US + C_US × faults of CPU plus
    ``tilt`` × (faults − their median) (noise that follows the faults: it moves this run's own
    fit of the cost per fault, not its median step), then 4 profiled ones; 1 worker's
    batches of 10 ms CPU each, instants from ``t0_us``."""
    mid = float(np.median(FAULTS))

    def row(k, flt, profiled):
        cpu = FREE_US + C_US * flt + tilt * (flt - mid) + 1e3
        return {"t_start_us": t0_us + 1e5 * k, "wall_us": cpu + 5e3, "cpu_us": cpu,
                "next_wall_us": 1e3, "next_cpu_us": 1e3, "profiled": profiled,
                "profiler_on": profiled, "minflt": flt, "next_minflt": 1}
    steps = ([row(0, 30000, False)] + [row(1 + k, f, False) for k, f in enumerate(FAULTS)]
             + [row(1 + len(FAULTS) + k, 6000, True) for k in range(4)])
    produce = [{"worker": 0, "pid": 7, "seq": 1 + k, "wall_us": 12e3, "cpu_us": 10e3,
                "proc_cpu_us": 10e3, "t_end_us": t0_us + 1e5 * k + 50.0} for k in range(17)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "loader": {"num_workers": 1},
                                   "host_cores": 2, "steps": steps, "produce": produce})


def test_runs_of_the_same_work_compare_at_one_cost_per_fault():
    cap, rep = _side(1e6, 0.0), _side(9e6, 1.5)
    assert per_fault_us(cap) == pytest.approx(C_US, rel=0.01)
    assert per_fault_us(rep) == pytest.approx(C_US + 1.5, rel=0.01)   # its own fit: noise
    own = identical_work_us(rep) / identical_work_us(cap)
    assert own < 0.85          # what each run's own fit made of the same work
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap, [(Path("rep/sidecar.json"), rep)])
    assert speeds[0] == 1.0 and speeds[1] == pytest.approx(1.0, abs=1e-9)


def test_a_replicate_truly_slower_still_reads_slower():
    cap, rep = _side(1e6, 0.0), _side(9e6, 0.0)
    slow = rep.model_copy(deep=True)
    for s in slow.steps:
        s.cpu_us = 1e3 + 1.2 * (s.cpu_us - 1e3)        # every step's work 1.2x, faults too
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap, [(Path("rep/sidecar.json"), slow)])
    m = float(np.median(FAULTS))
    # its faults are priced at the capture's cost × its own speed k (a slower host's faults
    # cost more too): train part 1.2 × (free + C × m) − k × C × m, produce 10 ms, so
    # k × (10 ms + free) = 10 ms + 1.2 × free + (1.2 − k) × C × m
    want = (10e3 + 1.2 * (FREE_US + C_US * m)) / (10e3 + FREE_US + C_US * m)
    assert speeds[1] == pytest.approx(want, rel=1e-6)
    # a run that is the capture at 1.2x, its batches too, reads 1.2 exactly (at the
    # capture's cost per fault it read 1.2 + 0.2 × the faults' share)
    both = slow.model_copy(deep=True)
    for r in both.produce:
        r.cpu_us, r.proc_cpu_us = 1.2 * r.cpu_us, 1.2 * r.proc_cpu_us
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap, [(Path("rep/sidecar.json"), both)])
    assert speeds[1] == pytest.approx(1.2, rel=1e-9)


def _at(side: Sidecar, k: float) -> Sidecar:
    """``side`` on a host ``k``× slower: every CPU time ``k``×, its faults' too."""
    out = side.model_copy(deep=True)
    for s in out.steps:
        s.cpu_us, s.next_cpu_us = k * s.cpu_us, k * s.next_cpu_us
    for r in out.produce:
        r.cpu_us, r.proc_cpu_us = k * r.cpu_us, k * r.proc_cpu_us
    return out


def _more_faults(side: Sidecar, d: int) -> Sidecar:
    """``side`` whose every step faulted ``d`` more pages, at C_US each."""
    out = side.model_copy(deep=True)
    for s in out.steps:
        s.minflt, s.cpu_us = s.minflt + d, s.cpu_us + C_US * d
    return out


def test_one_cost_per_fault_pooled_over_the_runs():
    """Three runs of one work at speeds 1, 1.1 and 0.9 (each step k × (free + C × faults)),
    the capture's own fit noisy (C + 1.5 µs a fault: noise that follows its faults, not its
    mean step): the cost is the median of the runs' fits each ÷ its speed, C, and the speeds
    are recovered exactly (the capture's mean step holds no tilt: its faults' mean is their
    median). The replicates fault 3,000 and 1,000 pages a step more than the capture (a
    process's heap): at the capture's own fit, as before, they read 1.1 and 0.9 off."""
    cap = _side(1e6, 1.5)
    reps = [_at(_more_faults(_side(t0, 0.0), d), k)
            for t0, k, d in ((9e6, 1.1, 3000), (17e6, 0.9, 1000))]
    assert per_fault_us(cap) == pytest.approx(C_US + 1.5, rel=0.01)      # its own fit
    assert pooled_per_fault(cap, reps) == pytest.approx(C_US, rel=1e-9)
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap,
                              [(Path(f"r{i}/sidecar.json"), r) for i, r in enumerate(reps)])
    assert speeds == pytest.approx([1.0, 1.1, 0.9], rel=1e-9)
    own = [at_one_fault_cost(cap, r, per_fault_us(cap))[1:3] for r in reps]
    assert abs(own[0][0] / own[0][1] - 1.1) > 0.01 and abs(own[1][0] / own[1][1] - 0.9) > 0.01


def test_a_copy_at_k_reads_k_and_leaves_the_cost():
    """Scale-equivariance: a replicate that is the capture at 1.2× (its faults' cost 1.2× too)
    reads 1.2000 whatever the capture's fit, and pooling it leaves the capture's cost; two
    runs that disagree pool to their fits' mean, each ÷ its speed (median of two)."""
    cap = _side(1e6, 1.5)
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap,
                              [(Path("rep/sidecar.json"), _at(_side(9e6, 1.5), 1.2))])
    assert speeds[1] == pytest.approx(1.2, rel=1e-9)
    assert pooled_per_fault(cap, [_at(_side(9e6, 1.5), 1.2)]) == pytest.approx(
        per_fault_us(cap), rel=1e-9)
    rep = _at(_side(9e6, 0.0), 1.1)
    c = pooled_per_fault(cap, [rep])
    k = at_one_fault_cost(cap, rep, c)
    assert c == pytest.approx((per_fault_us(cap) + per_fault_us(rep) / (k[1] / k[2])) / 2,
                              rel=1e-9)


def test_a_runs_slow_stretch_counts_in_its_speed():
    """A run's speed is its mean CPU per identical work, not its median's: a replicate whose
    last third of batches took 1.5x the capture's (the host slowed mid-run) and whose steps
    did not change reads ``(P·(2/3 + 1.5/3) + T) / (P + T)``, the factor on its mean step's
    work, where a median read 1.0. No faults: no cost per fault to fit."""
    cap, rep = _side(1e6, 0.0), _side(9e6, 0.0)
    for side in (cap, rep):
        for s in side.steps:
            s.cpu_us, s.minflt = FREE_US + 1e3, 0
    n = len(rep.produce)                      # (seq from 1: no start-up batch to leave out)
    for r in rep.produce[2 * n // 3:]:
        r.cpu_us = r.proc_cpu_us = 1.5 * r.cpu_us
    slow = (n - 2 * n // 3) / n
    speeds = replicate_speeds(Path("cap/sidecar.json"), cap, [(Path("rep/sidecar.json"), rep)])
    p = 10e3
    assert speeds[1] == pytest.approx((p * (1 + 0.5 * slow) + FREE_US) / (p + FREE_US), rel=1e-9)
    assert speeds[1] > 1.03          # the median: 1.0
