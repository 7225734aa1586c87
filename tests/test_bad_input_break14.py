"""Bad input to what landed in session 3 (break14): the DDP capture API, the sidecar's DDP
records, replicates of a DDP job and what-if values. Each break: one line naming what is
wrong (an exception naming the argument for the Python API; exit 2 naming the file at the
CLI), no traceback, inputs unchanged."""
import pytest

from stepsim.calibration.capture import Capture
from tests.test_gloo import gloo_run  # noqa: F401  (a real 2-rank job)


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


def test_a_replicates_impossible_wakeups_are_refused(gloo_run, tmp_path):  # noqa: F811
    """A replicate whose buckets' records say 2^62 wake-ups a step: pooled over the runs
    (model_copy, which checks no bound), the model held ``comm.wakeups`` 4.6e18 past its bound
    of 1e6, was written (exit 0) and every verb that loaded it failed; it is refused when
    calibrated, one line naming the capture, as the capture's own are."""
    import json

    from stepsim.fit import calibrate
    from stepsim.simcore.errors import InputError
    from tests.test_ddp_replicate_load import _runs

    cap, rep = _runs(gloo_run[0], tmp_path, [0.0, 0.0])
    before = {f: f.read_bytes() for f in sorted(cap.glob("*"))}
    for f in sorted(rep.glob("rank*.sidecar.json")):
        data = json.loads(f.read_text())
        for b in data["ddp"]["bucket_cpu"]:
            b["timeslices"] = 2 ** 62
        f.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"impossible model \(CommParams\.wakeups"):
        calibrate(cap, replicates=[rep])
    assert {f: f.read_bytes() for f in sorted(cap.glob("*"))} == before
