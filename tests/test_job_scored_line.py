"""A job's ranks' notes of what validate scored (steps drained after the window, unprofiled
against profiled mean) are one line per run, each rank's words kept in the run's detail
(``validate --json``'s ``per_run``): fresh12's 2-run validate of 2 ranks printed 8 such lines.
On ``tests/data/gloo_loader_job``, a real 2-rank gloo capture with 30 unprofiled steps."""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.measure import measured_steps

JOB = Path(__file__).parent / "data" / "gloo_loader_job"


def test_one_line_for_the_job_each_rank_in_the_detail():
    r = measured_steps(JOB)
    said = [w for w in r.warnings if "unprofiled steps after the profiled window" in w]
    assert len(said) == 1, r.warnings
    assert said[0].startswith("measured: the 30 unprofiled steps after the profiled window on "
                              "each of 2 ranks (sidecar)")
    assert "(each rank's detail: --json)" in said[0]
    assert [d.split(":")[0] for d in r.detail] == ["rank0", "rank1"]
    assert all("measured: the 30 unprofiled steps" in d for d in r.detail)
