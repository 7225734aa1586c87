"""The capture harness when the loop ends before the profiler completed its active steps: a
warning at the end of Capture.steps, calibrate naming the steps the schedule needed; a second
Capture.steps on one Capture is refused instead of overwriting the first capture."""
from __future__ import annotations

import pytest
import torch

from stepsim.calibration.capture import Capture
from stepsim.simcore.errors import InputError


def _loader(cap, n=40):
    return cap.dataloader(torch.utils.data.TensorDataset(torch.zeros(n, 4)), batch_size=4)


def test_an_early_break_warns_and_calibrate_says_why(tmp_path):
    cap = Capture(tmp_path / "c")
    with pytest.warns(UserWarning, match="the profiler never completed its active steps"):
        for i, _ in enumerate(cap.steps(_loader(cap), active=4)):
            if i == 3:
                break
    assert not (tmp_path / "c" / "trace.json.gz").exists()
    from stepsim.api import calibrate

    # the sidecar's schedule names the steps it needed (before: "no trace files" and the
    # sidecar's warnings, which said neither the steps run nor the setting to raise)
    with pytest.raises(InputError, match=r"c: its profiled window holds no complete step: "
                                         r"training ended after 3 step\(s\), before the first "
                                         r"profiled step \(step 7\); its schedule needs 10 = "):
        calibrate(tmp_path / "c")


def test_a_second_steps_call_is_refused(tmp_path):
    cap = Capture(tmp_path / "c")
    loader = _loader(cap)
    for _ in cap.steps(loader, active=2, wait=0, warmup=0, skip_first=0):
        pass
    first = (tmp_path / "c" / "trace.json.gz").read_bytes()
    with pytest.raises(RuntimeError, match="already called on this Capture"):
        for _ in cap.steps(loader, active=2, wait=0, warmup=0, skip_first=0):
            pass
    assert (tmp_path / "c" / "trace.json.gz").read_bytes() == first
