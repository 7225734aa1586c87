"""A run's host speed is read from batches that measure identical work
(calibration.calm.calm_produce): at num_workers=0 a batch made on the main thread's intra-op
team while another process held a core spins at the team's barriers in CPU time.

``cnn2t_nw0_loaded_tail`` is a real capture of a user's CNN (2 intra-op threads, the dataset's
per-item work on them, num_workers=0, 2 shared cores, 2026-12-06 03:32, h-fresh11): batches
3-4 and 34-53 of its 54 waited for a core, 34-38 as long as they ran, at 700-730 ms of CPU
against 16-19 ms for the batches that did not wait."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.calm import calm_produce
from stepsim.calibration.host_noise import MAX_WINDOW_SPEED, window_speed
from stepsim.calibration.sidecar import load_sidecar
from stepsim.calibration.sidecar_cross import step_window
from stepsim.calibration.sidecar_fit import after_startup
from stepsim.models.load_bound import LOAD_WARN

DATA = Path(__file__).parent / "data"


@pytest.fixture
def loaded(tmp_path):
    path = tmp_path / "c" / "sidecar.json"
    path.parent.mkdir()
    with gzip.open(DATA / "cnn2t_nw0_loaded_tail.sidecar.json.gz", "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path, load_sidecar(path)


def test_batches_that_waited_for_a_core_are_left_out(loaded):
    _, side = loaded
    recs = after_startup(side.produce)
    kept = calm_produce(side, recs)
    out = [r for r in recs if r not in kept]
    assert len(out) >= 6 and len(kept) >= 30
    assert all(r.run_wait_us <= LOAD_WARN * r.cpu_us for r in kept)
    assert all(r.run_wait_us > LOAD_WARN * r.cpu_us for r in out)
    # the waiting batches' CPU is the team's spinning: six at 10x the calm ones or more,
    # while no calm batch passes 3x their median
    med = np.median([r.cpu_us for r in kept])
    assert sum(r.cpu_us > 10 * med for r in out) >= 6
    assert all(r.cpu_us < 3 * med for r in kept)


def test_window_speed_is_the_calm_batches_ratio(loaded):
    """The window's batches against the run's calm ones: about 1.0 (the mean of every batch
    made it 0.196, past MAX_WINDOW_SPEED's bound, and calibration called the records wrong)."""
    _, side = loaded
    lo, hi = step_window(side.steps)
    kept = calm_produce(side, after_startup(side.produce))
    want = (np.mean([r.work_us for r in kept if lo <= r.t_end_us <= hi])
            / np.mean([r.work_us for r in kept]))
    assert window_speed(side) == pytest.approx(want)
    assert 0.9 < want < 1.1
    every = after_startup(side.produce)
    raw = (np.mean([r.work_us for r in every if lo <= r.t_end_us <= hi])
           / np.mean([r.work_us for r in every]))
    assert raw < 1 / MAX_WINDOW_SPEED     # the records, all counted, read as impossible


def test_with_workers_every_batch_counts(loaded):
    """With DataLoader workers the run's own threads wait for cores too, in every run of the
    setting alike: no batch is left out."""
    _, side = loaded
    loader = side.loader.model_copy(update={"num_workers": 1})
    other = side.model_copy(update={"loader": loader})
    assert calm_produce(other, side.produce) == list(side.produce)


def test_too_few_calm_batches_keep_them_all(loaded):
    _, side = loaded
    recs = [r for r in side.produce if r.run_wait_us > LOAD_WARN * r.cpu_us]
    assert 0 < len(recs) and calm_produce(side, recs) == recs


def test_profiled_drift_reads_the_calm_steps(loaded):
    """The 8 profiled steps (58 ms) against the unprofiled steps after them: 20 calm at about
    59 ms, 20 under outside load at 120-1900 ms. All counted, the window ran 0.17x its run
    and every validation said so; the calm ones drift less than DRIFT_WARN."""
    from stepsim.calibration.calm import calm_among
    from stepsim.calibration.run_drift import (DRIFT_WARN, drift_ratio, profiled_drift,
                                               settled_after)

    _, side = loaded
    prof = [s.wall_us for s in side.steps if s.profiled]
    every = settled_after(side).steps
    assert np.mean(prof) / np.mean([s.wall_us for s in every]) < 0.25
    calm = calm_among(side, every)
    assert 15 <= len(calm) < len(every)
    assert abs(np.mean(prof) / np.mean([s.wall_us for s in calm]) - 1) <= DRIFT_WARN
    assert drift_ratio(side) is None and profiled_drift(side) is None
    # the same steps at num_workers=1 count whole: the drift is said
    other = side.model_copy(update={"loader": side.loader.model_copy(update={"num_workers": 1})})
    assert calm_among(other, every) == list(every)


def test_team_overhead_note_reads_the_calm_steps(loaded):
    """On 2 intra-op threads calibrate says the unprofiled ÷ profiled wall outside next() where
    it is off 1 by more than 2 %: all steps counted, the loaded ones made it ×2.045 ("slower
    unprofiled"); of the calm ones, within 2 % (nothing said)."""
    from stepsim.calibration.profiler_overhead import overhead_factor, team_overhead_note

    _, side = loaded
    every = overhead_factor(side)
    calm = overhead_factor(side, cores=True)
    assert every.unprofiled_wall_us / every.profiled_wall_us > 1.5
    assert abs(calm.unprofiled_wall_us / calm.profiled_wall_us - 1) <= 0.02
    assert calm.n_unprofiled < every.n_unprofiled and team_overhead_note(side) is None


def test_a_spin_through_next_says_it_may_be_the_batchs_own_work(loaded):
    """The capture's dataset runs torch ops per item on the intra-op team at 0 workers (each
    batch's process CPU about twice its thread's), so next()'s process CPU beyond the main
    thread is that work as much as the team's spin: the warning says both, not 'a floor'."""
    from stepsim.calibration.team_stall import team_spin_from_sidecar

    _, side = loaded
    kept = calm_produce(side, side.produce)
    assert np.median([r.proc_cpu_us / r.cpu_us for r in kept]) > 1.7
    fields, sources, warn = team_spin_from_sidecar(side)
    assert sources["host.team_spin_us"] == "measured" and len(warn) == 1
    assert "the batch's own work on the team's threads" in warn[0]


def test_a_loaded_profiled_window_is_said(tmp_path):
    """``cnn2t_nw0_loaded_window``: the same CNN (2026-12-06 03:56, load 3.6), 3 of its 8
    profiled steps at 325-962 ms under outside load, the steps after the window 66 ms. The
    model is of every profiled step (a window of 271 ms), so the drift counts them all and is
    said: every prediction from that model was 3.7-4.2x the re-measured runs."""
    from stepsim.calibration.run_drift import drift_ratio, profiled_drift

    path = tmp_path / "w" / "sidecar.json"
    path.parent.mkdir()
    with gzip.open(DATA / "cnn2t_nw0_loaded_window.sidecar.json.gz", "rb") as src, \
            open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    side = load_sidecar(path)
    prof = [s.wall_us for s in side.steps if s.profiled]
    assert len(prof) == 8 and np.mean(prof) > 3 * np.median(prof)
    assert drift_ratio(side) > 3
    assert "the 8 profiled steps" in profiled_drift(side)
