"""The DataLoader's batch on the gloo path at the run's speed after the profiled window
(calibration.gloo_loader.loader_drift): the workers' own batches after the window against
those in it; closed forms, and the checked-in 2-rank job whose window ran at a slow phase of
the host (ddpload12's capture A, 2026-12-06 14:07)."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.calibration.gloo_loader import at_loader_drift, loader_drift
from stepsim.calibration.sidecar import ProduceRecord, StepRecord
from stepsim.models.params import DurationSpec, LoaderParams

WINDOW = [1_700.0, 1_800.0] * 4
"""8 batches finished inside the profiled window (CPU µs): mean 1,750."""
AFTER = [1_400.0, 1_500.0] * 10
"""20 batches finished after it: mean 1,450."""


def _side(window=WINDOW, after=AFTER, first=9_000.0, instants=True):
    """A rank's sidecar at one worker: 8 profiled steps of 40 ms from t = 0.1 s (the window
    0.1-0.42 s), the worker's first batch (``first`` µs, start-up) before it, ``window``'s
    batches inside it, ``after``'s after it."""
    steps = [StepRecord(t_start_us=1e5 + i * 4e4, wall_us=4e4, cpu_us=2e4, next_wall_us=0.0,
                        next_cpu_us=0.0, profiled=True, profiler_on=True) for i in range(8)]
    ends = [5e4] + [1.1e5 + i * 3e4 for i in range(len(window))] \
        + [5e5 + i * 3e4 for i in range(len(after))]
    produce = [ProduceRecord(worker=0, pid=7, seq=k, wall_us=c, cpu_us=c,
                             t_end_us=t if instants else None)
               for k, (c, t) in enumerate(zip([first, *window, *after], ends))]
    return SimpleNamespace(steps=steps, produce=produce, loader=SimpleNamespace(num_workers=1))


def test_the_loaders_drift_is_its_later_batches_cpu_over_the_windows():
    """ratio = 1,450 / 1,750 = 0.8286 (the worker's first batch, 9 ms of start-up, left out);
    noise = 2 √(s²_a/20 + s²_w/8) / 1,450; none without instants or with one batch after."""
    ratio, noise, n_win, n_after = loader_drift(_side())
    assert (n_win, n_after) == (8, 20) and ratio == pytest.approx(1_450 / 1_750)
    var = np.var(AFTER, ddof=1) / 20 + np.var(WINDOW, ddof=1) / 8
    assert noise == pytest.approx(2 * math.sqrt(var) / 1_450)
    assert loader_drift(_side(instants=False)) is None
    assert loader_drift(_side(after=[1_400.0])) is None
    assert loader_drift(None) is None


def test_the_batch_price_takes_the_drift_and_says_it():
    """Every produce sample × 0.8286, the factor and its source in the notes; a ratio past
    MAX_WINDOW_SPEED (here 0.1: 175 against 1,750 µs) is no host's speed: unchanged."""
    lp = LoaderParams(num_workers=1, produce=DurationSpec.from_samples(WINDOW))
    notes: dict = {}
    got = at_loader_drift(lp, _side(), notes, [])
    assert got.produce.samples_us == pytest.approx([v * 1_450 / 1_750 for v in WINDOW])
    assert notes["loader_drift"] == pytest.approx(0.8286)
    assert "20 batches after the profiled window / its 8 in it" in notes["loader_drift_source"]
    wild: dict = {}
    assert at_loader_drift(lp, _side(after=[175.0] * 20), wild, said := []) is lp and wild == {}
    assert len(said) == 1 and "×0.1 the CPU of its 8" in said[0]


JOB = Path(__file__).parent / "data" / "gloo_loader_job"


def test_a_real_jobs_batches_are_priced_at_their_run():
    """Capture A's reference rank: its worker's 8 batches in the window averaged 1,764 µs of
    CPU, its 66 after it 1,443 (×0.818, where the training threads' d read 0.729 / 0.806):
    the model's batch is the later one's, within 1 %."""
    from stepsim.calibration.gloo_dispatch import gloo_dir

    model = gloo_dir(JOB)
    notes = model.meta.notes
    assert notes["loader_drift"] == pytest.approx(0.818, abs=0.005)
    assert model.loader.produce.build().mean_us == pytest.approx(1_443.0, rel=0.01)
