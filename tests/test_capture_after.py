"""Steps timed after the profiled window with the profiler stopped (``Capture.steps(...,
after=N)``): the sidecar's rows after the recorded ones are unprofiled, the trace holds only
the ``active`` steps, and a validation scores the unprofiled steps (the steps as the user pays
them), the profiled steps' mean said beside."""
from __future__ import annotations

import time

import numpy as np
import orjson
import pytest
import torch

from stepsim.calibration.capture import Capture
from stepsim.calibration.measure import measured_steps
from stepsim.calibration.steps import find_steps
from stepsim.calibration.events import build_table
from stepsim.calibration.trace_io import load_trace

ACTIVE, AFTER = 3, 4


def _capture(out, after: int, profiled_ms: float = 0.0) -> None:
    """A loop whose step takes 5 ms of sleep, plus ``profiled_ms`` of sleep while the
    profiler records (a profiler cost the unprofiled steps do not pay)."""
    cap = Capture(out)
    loader = cap.dataloader(torch.utils.data.TensorDataset(torch.zeros(64, 4)), batch_size=4)
    for i, _ in enumerate(cap.steps(loader, active=ACTIVE, wait=1, warmup=1, skip_first=1,
                                    after=after)):
        time.sleep(0.005)
        if 3 <= i < 3 + ACTIVE:      # skip_first + wait + warmup = 3: the recorded steps
            time.sleep(profiled_ms / 1e3)


def test_after_steps_are_unprofiled_rows_and_the_trace_keeps_the_active_steps(tmp_path):
    _capture(tmp_path / "c", AFTER)
    side = orjson.loads((tmp_path / "c" / "sidecar.json").read_bytes())
    rows = side["steps"]
    assert len(rows) == 3 + ACTIVE + AFTER
    assert [r["profiled"] for r in rows] == [False] * 3 + [True] * ACTIVE + [False] * AFTER
    assert [r["profiler_on"] for r in rows] == ([False, False, True] + [True] * ACTIVE
                                                + [False] * AFTER)
    assert side["schedule"]["after"] == AFTER
    table = build_table(load_trace(tmp_path / "c" / "trace.json.gz"))
    assert len(find_steps(table)) == ACTIVE


def test_validation_scores_the_unprofiled_steps_after_the_window(tmp_path):
    _capture(tmp_path / "c", AFTER, profiled_ms=40.0)
    side = orjson.loads((tmp_path / "c" / "sidecar.json").read_bytes())
    m = measured_steps(tmp_path / "c" / "trace.json.gz")
    after = [r["wall_us"] for r in side["steps"][-AFTER:]]
    assert m.step_us == pytest.approx(after)
    # the profiled steps slept 40 ms more: the measured mean is the unprofiled steps' (~5 ms)
    assert np.mean(m.step_us) < 30e3
    assert any("unprofiled steps after the profiled window" in w for w in m.warnings)


def test_without_after_steps_the_trace_steps_are_scored(tmp_path):
    _capture(tmp_path / "c", 0, profiled_ms=40.0)
    m = measured_steps(tmp_path / "c" / "trace.json.gz")
    assert len(m.step_us) == ACTIVE and np.mean(m.step_us) > 40e3
    assert "after" not in orjson.loads((tmp_path / "c" / "sidecar.json").read_bytes())["schedule"]


def test_calibration_says_when_the_profiled_steps_differ_from_the_unprofiled_ones(tmp_path):
    """Profiled steps 40 ms longer than the unprofiled ones after them: the model is of steps
    the run did not keep taking, and calibration says so (not only validation)."""
    from stepsim.fit import calibrate

    _capture(tmp_path / "c", AFTER, profiled_ms=40.0)
    said = [w for w in calibrate(tmp_path / "c").meta.warnings
            if "unprofiled steps right after them" in w]
    assert len(said) == 1 and "re-capture on a quiet machine" in said[0]
    # the percentage says which way: the profiled steps longer (it had read "(+40 %)" beside
    # the unprofiled mean, and "(-83 %)" for unprofiled steps 6x the profiled ones')
    assert "(the profiled ones +" in said[0] and " % against them)" in said[0]
    # the same steps, with the unprofiled ones as long as the profiled ones: nothing said
    from stepsim.calibration.run_drift import profiled_drift
    from stepsim.calibration.sidecar import load_sidecar

    side = load_sidecar(tmp_path / "c" / "sidecar.json")
    prof = float(np.mean([r.wall_us for r in side.steps if r.profiled]))
    assert profiled_drift(side) is not None
    for r in side.steps[-AFTER:]:
        r.wall_us = prof * 1.05
    assert profiled_drift(side) is None
