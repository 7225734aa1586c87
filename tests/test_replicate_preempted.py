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
