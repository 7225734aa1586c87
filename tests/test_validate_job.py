"""validate refuses a re-measured run of another job than the predicted model: another world
size, other torch intra-op threads (when the model's were measured), another DDP bucket cap."""
from __future__ import annotations

from pathlib import Path

import pytest

from stepsim.calibration.measure import MeasuredSteps
from stepsim.models.params import StepModel
from stepsim.scenarios.validate import job_mismatch, same_job
from stepsim.simcore.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def _model(threads: int = 2, world: int = 1, measured: bool = True) -> StepModel:
    from stepsim.api import load_model

    m = load_model(str(REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"))
    i = next(i for i, op in enumerate(m.host.ops) if op.kind == "cpu")
    ops = [op.model_copy(update={"threads": threads}) if j == i else op
           for j, op in enumerate(m.host.ops)]
    src = {**m.meta.sources, **({f"host.ops[{i}].threads": "measured"} if measured else {})}
    return m.model_copy(update={
        "host": m.host.model_copy(update={"ops": ops}),
        "comm": m.comm.model_copy(update={"world_size": world, "bucket_cap_mb": 25.0}),
        "meta": m.meta.model_copy(update={"sources": src})})


def _run(world=1, threads=None, cap=None) -> MeasuredSteps:
    return MeasuredSteps(Path("runs/x"), [1.0], [0.0], "compute", world_size=world,
                         torch_threads=threads, bucket_cap_mb=cap)


def test_world_size_threads_and_bucket_cap_must_match():
    assert job_mismatch(_model(), _run(threads=2)) is None
    assert "world size is 2 in the capture, 1 in the prediction" in job_mismatch(
        _model(), _run(world=2, threads=2))
    why = job_mismatch(_model(), _run(threads=1))
    assert "intra-op threads are 1 in the capture, 2 in the prediction" in why
    assert "--set host.ops." in why and ".threads=1 would match" in why
    # threads the model never measured (a GPU model's ops) are not compared
    assert job_mismatch(_model(threads=1, measured=False), _run(threads=8)) is None
    ddp = _model(threads=1, world=2)
    assert job_mismatch(ddp, _run(world=2, cap=25.0)) is None
    assert job_mismatch(ddp, _run(world=2)) is None            # the run does not state it
    assert "comm.bucket_cap_mb is 0.02 in the capture, 25 in the prediction" in job_mismatch(
        ddp, _run(world=2, cap=0.02))


def test_same_job_names_the_run_and_a_whatif_that_sets_it_matches():
    with pytest.raises(InputError, match=r"^runs/x: not a run of the predicted setting: "
                                         r"comm.bucket_cap_mb is 1"):
        same_job(_model(threads=1, world=2), [_run(world=2, cap=1.0)])
    m = _model(threads=1, world=2)
    same_job(m.model_copy(update={"comm": m.comm.model_copy(update={"bucket_cap_mb": 1.0})}),
             [_run(world=2, cap=1.0)])


def test_a_run_read_from_rank_traces_states_its_world_size(tmp_path):
    """A capture folder of per-rank traces is measured as a job of that many ranks."""
    import json

    for r in (0, 1):
        ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1,
               "tid": 1, "ts": 1000.0 * n, "dur": 900.0} for n in range(1, 5)]
        doc = {"traceEvents": ev, "distributedInfo": {"rank": r, "world_size": 2}}
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    from stepsim.calibration.measure import measured_steps

    assert measured_steps(tmp_path).world_size == 2
    assert measured_steps(tmp_path / "rank0.json").world_size == 2


def test_a_ddp_model_compares_its_captures_threads_not_its_ops():
    """A multi-rank model's host ops all run one thread: the capture's intra-op threads a rank
    are its note (``meta.notes['intra_op_threads']``), which a run must match (fresh14: a
    2-thread model scored a 1-thread run at +479.7 %)."""
    m = _model(threads=1, world=2, measured=False)
    two = m.model_copy(update={"meta": m.meta.model_copy(
        update={"notes": {**m.meta.notes, "intra_op_threads": 2}})})
    why = job_mismatch(two, _run(world=2, threads=1))
    assert "intra-op threads are 1 a rank in the capture, 2 in the prediction" in why
    assert "--fix intra_op_threads would match" in why
    assert job_mismatch(two, _run(world=2, threads=2)) is None
