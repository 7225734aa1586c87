"""validate refuses a re-measured 2-rank gloo run of another setting than the predicted model:
torch's intra-op threads a rank, DDP's first bucket (an explicit ``bucket_cap_mb=25`` against
DDP's default 25 MiB with a 1 MiB first bucket), a barrier each step; and accepts the what-if
that matches. A new user's job (fresh14, 2026-12-07) had each scored against the wrong
setting (+479.7 % for the threads). The runs are this module's own small gloo job."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.test_quirks import cli, one_line_error

WIDTH, DEPTH = 512, 4
"""4 layers of 512² float32 weights (1 MiB each): DDP's default first bucket (1 MiB) holds the
last layer and a second bucket the rest, ``bucket_cap_mb=25`` makes one bucket."""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    from stepsim.api import calibrate
    from stepsim.demo.ddp_job import Run, run_plan

    d = tmp_path_factory.mktemp("vddp")
    run_plan([Run("cal", bucket_cap_mb=None, steps=4, warmup=2, profile_dir=str(d / "cal")),
              Run("cap25", bucket_cap_mb=25.0, steps=4, warmup=2, profile_dir=str(d / "cap25")),
              Run("bar", bucket_cap_mb=None, barrier=True, straggler_ms=0.0, steps=4, warmup=2,
                  profile_dir=str(d / "bar"))],
             width=WIDTH, depth=DEPTH, timeout_s=300)
    calibrate(str(d / "cal"), output=str(d / "model.json"))
    return d


def _threads_copy(src, dst, threads: int):
    """The run with each rank's sidecar stating ``threads`` intra-op threads."""
    shutil.copytree(src, dst)
    for f in dst.rglob("*sidecar.json"):
        side = json.loads(f.read_text())
        side["torch_num_threads"] = threads
        f.write_text(json.dumps(side))
    return dst


def test_a_run_at_other_intra_op_threads_is_refused(job, tmp_path):
    """A model from the capture whose sidecars state 2 intra-op threads a rank against the
    real run at 1 (fresh14's +479.7 %: the model's ops all run one thread, so the ops' count
    read 1 = 1 and the run was scored): refused, naming ``--fix intra_op_threads``; and the
    1-thread model against a run stating 2, refused naming both counts."""
    from stepsim.api import calibrate

    two = _threads_copy(job / "cal", tmp_path / "t2", 2)
    calibrate(str(two), output=str(tmp_path / "model2t.json"))
    rc, err, _ = cli("validate", tmp_path / "model2t.json", job / "cal")
    one_line_error(rc, err, "not a run of the predicted setting",
                   "intra-op threads are 1 a rank in the capture, 2 in the prediction",
                   "--fix intra_op_threads would match")
    rc, err, _ = cli("validate", job / "model.json", two)
    one_line_error(rc, err, "intra-op threads are 2 a rank in the capture, 1 in the prediction")


def test_an_explicit_cap_of_25_is_not_the_default(job):
    """``bucket_cap_mb=25`` caps the first bucket too (1 bucket of this job's 4 MiB, the
    default 2): refused against the default model, and the default run against the model
    ``--set comm.bucket_cap_mb=25``; the --set it names matches."""
    model = job / "model.json"
    rc, err, _ = cli("validate", model, job / "cap25")
    line = one_line_error(rc, err, "first bucket is capped at 25 MiB in the capture",
                          "1 MiB in the prediction", "1 bucket(s) against 2",
                          "--set comm.bucket_cap_mb=25 would match")
    rc, err, _ = cli("validate", model, job / "cal", "--set", "comm.bucket_cap_mb=25")
    one_line_error(rc, err, "first bucket is capped at 1 MiB in the capture",
                   "25 MiB in the prediction", "--set comm.first_bucket_cap_mb=1")
    rc, err, out = cli("validate", model, job / "cap25", "--set", "comm.bucket_cap_mb=25",
                       "--draws", "8", "--steps", "40")
    assert rc == 0 and "not a run of" not in err, (line, err)


def test_a_barrier_in_the_run_or_the_prediction_alone_is_refused(job):
    """The run with ``dist.barrier()`` before backward holds gloo:barrier spans: refused
    without ``--fix barrier``, scored with it, and the split it measured is said; the run
    without a barrier is refused against ``--fix barrier``."""
    model = job / "model.json"
    rc, err, _ = cli("validate", model, job / "bar")
    one_line_error(rc, err, "the capture entered a barrier", "--fix barrier would match")
    rc, err, _ = cli("validate", model, job / "cal", "--fix", "barrier")
    one_line_error(rc, err, "the prediction enters a barrier each step, the capture none")
    rc, err, out = cli("validate", model, job / "bar", "--fix", "barrier", "--draws", "8",
                       "--steps", "40")
    assert rc == 0 and "not a run of" not in err, err
    assert "measured time in the barrier (gloo:barrier" in err + out
    assert "rank0" in err + out and "rank1" in err + out
