"""A DataLoader worker's library threads (numpy's OpenBLAS team, which spins) counted from the
worker's process CPU against its own thread's, which the wall cannot show beside more runnable
threads than cores (fresh7's audio job, 2026-12-07: 363 ms of process CPU a batch, 180 ms of
its thread, 359 ms of wall at 1 worker on 2 cores)."""
from __future__ import annotations

import pytest

from stepsim.calibration.sidecar import ProduceRecord
from stepsim.calibration.sidecar_fit import fit_produce


def _recs(wall_us: float, cpu_us: float, proc_us: float | None, n: int = 6):
    return [ProduceRecord(worker=0, pid=7, seq=i + 1, wall_us=wall_us * (1 + 0.01 * i),
                          cpu_us=cpu_us, proc_cpu_us=proc_us) for i in range(n)]


def test_a_contended_workers_second_thread_counts():
    spec, tpw, basis = fit_produce(_recs(359_000.0, 180_000.0, 363_000.0), 1, 2, 2)
    assert tpw == 2 and basis == "cpu_time"
    assert spec.mean_us == pytest.approx(363_000.0)     # the process's CPU, on 2 threads


@pytest.mark.parametrize("wall,cpu,proc,want", [
    (200_000.0, 190_000.0, 195_000.0, 1),      # one thread, contended or not
    (100_000.0, 100_000.0, 200_000.0, 2),      # two threads with a core each: both ratios 2
    (300_000.0, 100_000.0, None, 1),           # no process CPU: the wall's ratio, as before
    (100_000.0, 100_000.0, 120_000.0, 1)])     # library threads a fifth of the time: 1
def test_threads_per_worker(wall, cpu, proc, want):
    assert fit_produce(_recs(wall, cpu, proc), 1, 8)[1] == want
