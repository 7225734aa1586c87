"""Each prediction says which host speed it is at, so a number of one output can be matched
with another's: a replay (calibrate's, the demo's) runs at the capture's own speed, every
prediction of the next run at the runs' mean (``host.cpu_scale``, moved by replicates or by the
profiled window's speed against its whole run). A fresh user read 162.5 ms in ``whatif``
against 165.9 in the demo's table and could not tell why (it was the demo's 120 steps)."""
from __future__ import annotations

from stepsim.models.host_speed import CAPTURE_SPEED, at_capture_speed, speed_phrase
from stepsim.models.params import DurationSpec, HostOp, HostParams, LoaderParams, StepModel
from stepsim.report.planner import print_whatif
from stepsim.scenarios.predict import predict
from stepsim.scenarios.op_text import parse_set


def _model(speed_runs=(), cpu_scale=1.0) -> StepModel:
    return StepModel(
        loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=3000.0), host_cores=1),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=2000.0)],
                        speed_runs=list(speed_runs), cpu_scale=cpu_scale))


def test_a_model_at_its_capture_speed_says_so():
    assert speed_phrase(_model()) == CAPTURE_SPEED


def test_replicates_put_predictions_at_the_runs_mean_speed():
    m = _model(speed_runs=[1.0, 0.8836], cpu_scale=0.94)     # geometric mean 0.94
    text = speed_phrase(m)
    assert "mean host speed of the capture's 2 runs" in text and "x0.940" in text
    assert speed_phrase(at_capture_speed(m)) == CAPTURE_SPEED


def test_the_window_speed_alone_says_the_whole_run():
    m = _model(cpu_scale=1 / 1.02)
    m.meta.notes["window_speed"] = 1.02
    assert "the capture's whole run (CPU time x0.980" in speed_phrase(m)


def test_whatif_prints_the_speed_of_its_numbers(capsys):
    m = _model(speed_runs=[1.0, 0.8836], cpu_scale=0.94)
    base = predict(m, [], steps=20, warmup=5)
    pred = predict(m, [parse_set("loader.produce.mean_us=2000")], steps=20, warmup=5)
    print_whatif(base, pred)
    out = " ".join(capsys.readouterr().out.split())
    assert "times at the mean host speed of the capture's 2 runs (CPU time x0.940" in out
    assert base.to_dict()["host_speed"] == speed_phrase(m)
