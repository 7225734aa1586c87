"""How many unprofiled steps after the window a score needs: at least ``SCORE_AFTER_STEPS``
(20) past the ``num_workers × prefetch_factor`` the first of them can drain (a user's 12
after-steps at 4 workers gave mean and median errors of opposite sign, −7.9 % against
+7.1 %). The demo captures that many, and a validation of fewer says so."""
from __future__ import annotations

import time

import torch

from stepsim.calibration.capture import Capture
from stepsim.calibration.measure import measured_steps
from stepsim.calibration.run_drift import SCORE_AFTER_STEPS
from stepsim.demo.workload import AFTER_STEPS, after_steps


def _capture(out, after: int) -> None:
    """A loop of 2 ms steps (sleep), 3 profiled, then ``after`` unprofiled."""
    cap = Capture(out)
    loader = cap.dataloader(torch.utils.data.TensorDataset(torch.zeros(160, 4)), batch_size=4)
    for _ in cap.steps(loader, active=3, wait=1, warmup=1, skip_first=1, after=after):
        time.sleep(0.002)


def test_the_demo_captures_the_advised_after_steps():
    assert SCORE_AFTER_STEPS == AFTER_STEPS == 20
    assert [after_steps(nw, 2) for nw in (0, 1, 2, 4)] == [20, 22, 24, 28]
    assert after_steps(4, 4) == 36


def test_a_validation_of_few_after_steps_says_so(tmp_path):
    _capture(tmp_path / "few", 4)
    m = measured_steps(tmp_path / "few" / "trace.json.gz")
    said = [w for w in m.warnings if "fewer than 20" in w]
    assert len(said) == 1 and said[0].startswith("scored 4 unprofiled steps")
    assert "num_workers × prefetch_factor + 20" in said[0]
    _capture(tmp_path / "enough", 21)
    m = measured_steps(tmp_path / "enough" / "trace.json.gz")
    assert len(m.step_us) == 21 and not any("fewer than 20" in w for w in m.warnings)


def test_a_validation_of_the_profiled_window_says_so(tmp_path):
    """A capture without after-steps is scored on its profiled steps, and the note says so
    (a fresh user's Lightning re-measurements were scored so without a word, 2026-12-05)."""
    _capture(tmp_path / "none", 0)
    m = measured_steps(tmp_path / "none" / "trace.json.gz")
    said = [w for w in m.warnings if "profiled steps (the profiler's own cost" in w]
    assert len(m.step_us) == 3 and len(said) == 1, m.warnings
    assert said[0].startswith("scored the trace's 3 profiled steps") and "0 unprofiled" in said[0]
    _capture(tmp_path / "one", 1)
    m = measured_steps(tmp_path / "one" / "trace.json.gz")
    assert any("has 1 unprofiled step(s)" in w for w in m.warnings), m.warnings
    _capture(tmp_path / "two", 2)
    m = measured_steps(tmp_path / "two" / "trace.json.gz")
    assert not any("profiler's own cost is in them" in w for w in m.warnings), m.warnings
