"""A re-measured DDP job's outside load is read over every rank together
(calibration.job_load): a user's 2-rank gloo job on 2 cores, torch's default 2 intra-op
threads a rank, alone on the machine (fresh8's runs/b100-1, 2026-12-07; its sidecars'
/proc/stat: other processes busy 0 % of the cores). Read rank by rank each rank held 51 % and
validate called the run "about 2.0x slower than the machine alone", leaving it out of the
ledger's score; the other rank's threads are the job's own."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np

from stepsim.calibration.job_load import job_load
from stepsim.calibration.measure import measured_steps
from stepsim.calibration.run_load import remeasured_load
from stepsim.calibration.outside_load import STEP, _others_busy, held_over
from stepsim.calibration.sidecar import load_sidecar
from stepsim.models.load_bound import LOAD_WARN

DATA = Path(__file__).parent / "data" / "fresh8_b100_job"
"""Each rank's sidecar (gzipped) and its trace cut to its ProfilerStep and metadata events."""


def _job(tmp_path: Path) -> Path:
    for r in ("rank0", "rank1"):
        (tmp_path / r).mkdir()
        shutil.copy(DATA / r / "trace.json.gz", tmp_path / r / "trace.json.gz")
        (tmp_path / r / "sidecar.json").write_bytes(gzip.open(DATA / r / "sidecar.json.gz").read())
    return tmp_path


def test_each_rank_alone_counts_the_other_as_load_the_job_does_not(tmp_path):
    """Alone, each rank held about half its cores (the other rank held the rest); together
    they held 98.7 %, as the machine record says (others 0-4 % of the cores)."""
    job_dir = _job(tmp_path)
    sides = [load_sidecar(job_dir / r / "sidecar.json") for r in ("rank0", "rank1")]
    alone = [remeasured_load(s).held for s in sides]
    assert all(0.45 < h < 0.56 for h in alone), alone
    job = job_load(sides)
    assert job.held > 1 / (1 + LOAD_WARN) and job.held > 0.95, job
    assert "2 ranks' threads together" in job.where and "40 unprofiled steps" in job.where
    assert _others_busy(dict(enumerate(sides))) <= LOAD_WARN   # calibrate's reading agrees


def test_validate_reads_the_job_as_alone(tmp_path):
    """The run validate scores (a folder of rank folders): no outside-load slowdown past
    LOAD_WARN and no note of it, so its ledger record stays in the score."""
    m = measured_steps(_job(tmp_path))
    assert m.world_size == 2 and len(m.step_us) == 40
    assert m.outside_load_slowdown is not None and m.outside_load_slowdown < LOAD_WARN
    assert not any("under outside load" in w for w in m.warnings), m.warnings


def test_held_over_sums_the_ranks_runnable_threads():
    """Closed form: two ranks of 2 runnable threads each on 2 cores, each 100 ms busy with
    100 ms of CPU over the same span: swept alone a rank could hold 2 cores (held 0.5),
    together 2 cores between them (held 1)."""
    rank = np.array([[0.0, 1e5, 2.0, 1e5, STEP]])
    assert np.isclose(held_over(rank, 2).held, 0.5)
    both = held_over(np.concatenate([rank, rank]), 2)
    assert np.isclose(both.held, 1.0) and np.isclose(both.mean_threads, 4.0)
