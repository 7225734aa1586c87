"""The faster calibration computes what the slower one did (issue 11, the 54 MB row).

* coarsening's probe simulates with ``keep="runs"`` (no span): the same task runs and host
  waits as ``keep="all"``, on real traces;
* a coarsened model is no longer dumped and validated again: validating it again changes
  nothing (the same JSON), and its cross-references are still checked;
* the replay-length check names its places only when it raises (the same messages);
* calibration pauses the garbage collector and restores it, also when it refuses a trace.

The whole-corpus check (every shared trace's model byte-identical before and after a change)
is ``bench/calibrate_outputs.py``.
"""
from __future__ import annotations

import gc

import pytest
from pydantic import ValidationError

from tests.conftest import shared_traces
from stepsim.fit import calibrate, calibrate_gpu
from stepsim.models.coarsen import coarsen
from stepsim.models.params import (DeviceParams, DeviceTask, HostOp, HostParams, ReplayWindow,
                                   StepModel)
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import InputError

TRACES = ["kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0/worker0.pt.trace.json.gz",
          "tracelens/mi300/resnet_act_checkpoint.json.gz",
          "param/linear_kineto.json.gz"]


@pytest.fixture(scope="module", params=TRACES)
def fine(request):
    return calibrate_gpu(shared_traces() / request.param, coarse=False)


def test_probe_runs_without_spans_are_the_same(fine):
    a = simulate(fine, steps=2, warmup=3)
    b = simulate(fine, steps=2, warmup=3, keep="runs")
    assert b.spans == [] and len(b.runs) > 0
    assert b.runs == a.runs
    assert b.host_waits == a.host_waits
    assert (b.step_us == a.step_us).all()


def test_coarsened_model_validates_to_itself(fine):
    c = coarsen(fine)
    again = StepModel.model_validate(c.model_dump())
    assert again.model_dump_json() == c.model_dump_json()
    assert c.meta.notes["coarsened_tasks"].split(" -> ")[0] != c.meta.notes[
        "coarsened_tasks"].split(" -> ")[1]


def _tiny(**task_kw) -> StepModel:
    t = DeviceTask(id="t0", stream="7", name="k", dur_us=10.0, **task_kw)
    return StepModel(host=HostParams(ops=[HostOp(kind="launch", name="l", dur_us=1.0, task="t0",
                                                 replay_us=[1.0, 1.0])]),
                     device=DeviceParams(streams={"7": [t]}),
                     replay=ReplayWindow(steps=[0, 1], calibrated=[True, True],
                                         measured_step_us=[20.0, 20.0]))


def test_replay_length_messages_name_the_place():
    _tiny(replay_us=[10.0, 10.0], replay_gap_us=[0.0, 0.0])
    with pytest.raises(ValidationError, match=r"task 't0': 3 replay values for a window of 2 steps"):
        _tiny(replay_us=[10.0, 10.0, 10.0], replay_gap_us=[0.0, 0.0])


def test_coarsen_still_checks_references():
    m = _tiny(replay_us=[10.0, 10.0], replay_gap_us=[0.0, 0.0])
    bad = m.model_copy(update={"host": m.host.model_copy(update={"ops": [
        m.host.ops[0].model_copy(update={"task": "nowhere"})]})})
    with pytest.raises(ValueError, match="names unknown task 'nowhere'"):
        bad._check_refs()


def test_calibrate_restores_the_collector(tmp_path):
    assert gc.isenabled()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError):
        calibrate(bad)
    assert gc.isenabled()
    gc.disable()
    try:
        with pytest.raises(InputError):
            calibrate(bad)
        assert not gc.isenabled()
    finally:
        gc.enable()
