"""Bad input to what landed in session 3 (break14): the DDP capture API, the sidecar's DDP
records, replicates of a DDP job and what-if values. Each break: one line naming what is
wrong (an exception naming the argument for the Python API; exit 2 naming the file at the
CLI), no traceback, inputs unchanged."""
import pytest

from stepsim.calibration.capture import Capture


def test_capture_ddp_refuses_what_is_not_a_module(tmp_path):
    """``Capture.ddp(optimizer)`` (the wrong object) read its parameters inside a process
    group: an AttributeError from deep in ddp_info."""
    cap = Capture(tmp_path / "c")
    with pytest.raises(TypeError, match=r"Capture.ddp\(model\): expected the "
                                        r"DistributedDataParallel module .*got a str"):
        cap.ddp("model")


@pytest.mark.parametrize("bad", ["no", 1, None])
def test_cold_probe_is_a_bool(tmp_path, bad):
    """``cold_probe="no"`` is truthy: it asked for 36 steps of the probe."""
    cap = Capture(tmp_path / "c")
    with pytest.raises(ValueError, match=r"cold_probe=.*: expected True or False"):
        next(cap.steps([1, 2, 3], cold_probe=bad))
