"""A replicate's host speed is read from steps that measure identical work
(calibration.host_noise.calm_steps): on torch's intra-op threads a step whose main thread waited
for a core held by another process spins at the team's barriers in CPU time, which is not the
host's speed.

The two sidecars are real captures of one user's CNN (2 intra-op threads, num_workers=0, 2
shared cores, 2026-12-05 21:21, h-fresh9): ``calm`` ran alone; in ``waited`` other processes
held a core over its first 14 steps (245 ms of main-thread CPU a step, 220 ms of run-queue wait)
and not over its 30 unprofiled steps after the window (42 ms). Its three fault-free steps were
among the waiting ones, so it read as a host 5.85× slower than the capture."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.host_noise import calm_steps, replicate_speeds
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_fit import after_startup
from stepsim.models.load_bound import LOAD_WARN

DATA = Path(__file__).parent / "data"


def _sidecar(name: str, tmp_path: Path):
    path = tmp_path / name / "sidecar.json"
    path.parent.mkdir()
    with gzip.open(DATA / f"cnn2t_nw0_{name}.sidecar.json.gz", "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path, load_sidecar(path)


def test_core_waits_are_left_out_of_a_replicates_speed(tmp_path):
    """The replicate's speed follows its batches' produce CPU (identical work no team spins
    in: 1.002× the capture's) within 10 %, where the waiting steps had made it 5.85×."""
    cap_path, cap = _sidecar("calm", tmp_path)
    rep_path, rep = _sidecar("waited", tmp_path)
    produce = (np.median([r.work_us for r in after_startup(rep.produce)])
               / np.median([r.work_us for r in after_startup(cap.produce)]))
    assert produce == pytest.approx(1.0, abs=0.01)
    speeds = replicate_speeds(cap_path, cap, [(rep_path, rep)])
    assert speeds[0] == 1.0
    assert speeds[1] == pytest.approx(produce, rel=0.10)


def test_calm_steps_are_those_that_did_not_wait(tmp_path):
    """Each step kept waited for a core at most LOAD_WARN of its CPU outside next(); those
    left out waited more; the calm capture loses one step (1.7 ms of wait on 14.5 ms of CPU)."""
    _, cap = _sidecar("calm", tmp_path)
    _, rep = _sidecar("waited", tmp_path)
    assert len(calm_steps(cap)) == len(cap.steps) - 2
    kept = calm_steps(rep)
    out = [s for s in rep.steps[1:] if s not in kept]
    assert len(out) >= 10 and len(kept) >= 20
    assert all(s.run_wait_us <= LOAD_WARN * (s.cpu_us - s.next_cpu_us) for s in kept)
    assert all(s.run_wait_us > LOAD_WARN * (s.cpu_us - s.next_cpu_us) for s in out)
    # the waiting steps' CPU is the team's spinning: several times the calm steps'
    assert (np.median([s.cpu_us for s in out]) > 3 * np.median([s.cpu_us for s in kept]))


def test_with_workers_every_step_counts(tmp_path):
    """With DataLoader workers the run's own threads wait for cores too (the setting's own
    contention, in every replicate alike): no step is left out."""
    _, rep = _sidecar("waited", tmp_path)
    loader = rep.loader.model_copy(update={"num_workers": 1})
    assert calm_steps(rep.model_copy(update={"loader": loader})) == rep.steps[1:]
