"""calibrate says a replicate ran under other load where its sidecar cannot say how loaded
(fresh11, 2026-12-07: an HF capture at 0 workers records no batch, so the outside-load reading
gives nothing; the capture was warned of, "preempted in 98 % of its context switches", its
replicate at the same load was not): the capture's own reading, off-core share × preempted
share of the profiled steps past 0.15, with the numbers in closed form."""
from __future__ import annotations

import pytest

from stepsim.calibration.replicate_load import preempted_replicates
from stepsim.calibration.sidecar import Sidecar


def _side(wall_us: float, cpu_us: float, vcsw: int, ivcsw: int, workers=0, threads=1,
          cores=2) -> Sidecar:
    steps = [{"t_start_us": 2e6 * k, "wall_us": wall_us, "cpu_us": cpu_us, "next_wall_us": 0.0,
              "next_cpu_us": 0.0, "vcsw": vcsw, "ivcsw": ivcsw, "profiled": True}
             for k in range(4)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "steps": steps, "host_cores": cores,
                                   "torch_num_threads": threads,
                                   "loader": {"num_workers": workers, "batch_size": 8}})


def test_a_preempted_replicate_is_said():
    # 1 thread: 1000 ms wall, 600 ms CPU: 0.4 off-core; 90 of 100 switches involuntary: 0.36
    said = preempted_replicates([("runs/b/sidecar.json", _side(1e6, 6e5, 10, 90))])
    assert said.startswith("1 of 1 replicate(s) ran under other load (b: preempted in 90 % of "
                           "its context switches, 1000.0 ms wall against 600.0 ms CPU a step)")
    assert said.endswith("re-capture them on a quiet machine")


@pytest.mark.parametrize("side", [
    _side(1e6, 6e5, 70, 30),                 # off-core, but it blocked: 0.4 × 0.3 = 0.12
    _side(1e6, 9.5e5, 0, 100),               # preempted, but hardly off-core: 0.05
    _side(1e6, 6e5, 10, 90, workers=2),      # 3 own threads on 2 cores: their own waits
])
def test_quiet_blocked_or_self_contended_replicates_are_not(side):
    assert preempted_replicates([("runs/b", side)]) is None


def _both(prof_wall, unprof_wall, cpu=6e5):
    """Four profiled steps at ``prof_wall`` µs wall and four unprofiled (profiler off) at
    ``unprof_wall``, each ``cpu`` µs CPU and every switch involuntary, 1 thread, 0 workers."""
    steps = [{"t_start_us": 2e6 * k, "wall_us": prof_wall if k < 4 else unprof_wall,
              "cpu_us": cpu, "next_wall_us": 0.0, "next_cpu_us": 0.0, "vcsw": 0, "ivcsw": 10,
              "profiled": k < 4, "profiler_on": k < 4} for k in range(8)]
    return Sidecar.model_validate({"stepsim_sidecar": 1, "steps": steps, "host_cores": 2,
                                   "torch_num_threads": 1,
                                   "loader": {"num_workers": 0, "batch_size": 8}})


def test_the_unprofiled_steps_are_read():
    """Off-core 0.4 only in the profiled window (its profiler's threads beside the run): not
    said; off-core 0.4 in the unprofiled steps: said, with their wall."""
    assert preempted_replicates([("runs/b", _both(1e6, 6.1e5))]) is None
    said = preempted_replicates([("runs/b", _both(6.1e5, 1e6))])
    assert "1000.0 ms wall against 600.0 ms CPU a step" in said


@pytest.mark.parametrize("name", ["fresh13_demo_nw1_r0", "fresh13_demo_nw1_r3"])
def test_fresh13_quiet_demo_replicates_are_not_flagged(name, tmp_path):
    """fresh13's locked, quiet demo (2026-12-07 14:30, load 0.04): these two replicates at 1
    worker on 2 cores were said "preempted in 100 %" from their profiled steps' run-queue wait
    (9.4 and 10.0 ms a step); their unprofiled steps waited 5.6 and 0.2 ms."""
    import gzip
    from pathlib import Path

    from stepsim.calibration.sidecar import load_sidecar

    p = tmp_path / "sidecar.json"
    p.write_text(gzip.open(Path(__file__).parent / "data" / f"{name}.sidecar.json.gz",
                           "rt").read())
    assert preempted_replicates([(p, load_sidecar(p))]) is None
