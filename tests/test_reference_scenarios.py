"""The hand-written reference scenarios reproduce the seed article's figures."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepsim.models.metrics import summarize
from stepsim.models.params import StepModel, load_model
from stepsim.models.simulate import simulate
from tests.conftest import run_cli

REF = Path(__file__).resolve().parents[1] / "scenarios" / "reference"
MS = 1000.0


def run(name: str, steps: int = 20, warmup: int = 20, **kw):
    model = load_model(REF / f"{name}.yaml")
    return model, summarize(simulate(model, steps=steps, warmup=warmup, **kw))


def scale_phase(model: StepModel, phase: str, factor: float) -> StepModel:
    """The phase made faster on the host and on the device (durations times ``factor``)."""
    d = model.model_dump()
    for tasks in d["device"]["streams"].values():
        for t in tasks:
            if t["phase"] == phase:
                t["dur_us"] *= factor
                t["breakdown_us"] = {k: v * factor for k, v in t["breakdown_us"].items()}
    for op in d["host"]["ops"]:
        if op["phase"] == phase:
            op["dur_us"] *= factor
    return StepModel.model_validate(d)


def test_unhealthy_step():
    model, s = run("unhealthy_step")
    assert s.mean_step_us == pytest.approx(120 * MS)
    assert s.compute_busy_us == pytest.approx(64 * MS)
    first = s.holes[0]
    assert (first.start_us, first.dur_us) == (0.0, pytest.approx(22 * MS))
    assert first.causes == pytest.approx({"input": 20 * MS, "h2d": 2 * MS})
    assert s.comm_busy_us == pytest.approx(44 * MS)
    assert s.exposed_comm_us == pytest.approx(16 * MS)
    assert s.hidden_comm_us == pytest.approx(28 * MS)
    assert s.bottleneck == "input"
    assert {lane.split(".", 1)[1] for lane in s.lane_busy} == {
        "worker0", "pin_memory", "host", "stream:h2d", "stream:compute", "stream:comm"}
    faster = simulate(scale_phase(model, "forward", 0.8), steps=5, warmup=5).mean_step_us
    gain = s.mean_step_us - faster
    assert gain == pytest.approx(10 * MS, abs=0.5 * MS)
    assert gain / s.mean_step_us == pytest.approx(0.08, abs=0.01)


def test_input_pipeline_a_b_c():
    _, a = run("input_pipeline_a")
    _, b = run("input_pipeline_b")
    _, c = run("input_pipeline_c")
    assert a.mean_step_us == pytest.approx(96 * MS)
    assert a.host_split_us["wait:input"] == pytest.approx(16 * MS)
    assert a.critical_path_us["input"] / a.mean_step_us == pytest.approx(0.167, abs=0.001)
    assert a.queue_mean < 0.05 and a.bottleneck == "input"
    assert b.mean_step_us == pytest.approx(80 * MS)
    assert "wait:input" not in b.host_split_us
    assert b.queue_mean >= 0.8 * b.queue_cap
    assert c.mean_step_us == pytest.approx(b.mean_step_us, rel=1e-3)
    assert b.loader_cores_busy - c.loader_cores_busy == pytest.approx(8.0, abs=0.15)


def test_straggler_and_barrier():
    _, s = run("straggler", steps=5, warmup=2)
    _, sb = run("straggler_barrier", steps=5, warmup=2)
    assert list(s.rank_step_us.values()) == pytest.approx([109 * MS] * 4)
    assert s.straggler_rank == 2 and sb.straggler_rank == 2
    (ar,) = s.collectives
    assert ar.observed_us == pytest.approx(24 * MS)      # looks long on rank 0
    assert ar.skew_us == pytest.approx(18 * MS) and ar.transfer_us == pytest.approx(6 * MS)
    assert ar.apparent_busbw_gbps == pytest.approx(25.0) and ar.busbw_gbps == pytest.approx(100.0)
    barrier, ar_b = sb.collectives
    assert barrier.name == "barrier" and barrier.skew_us == pytest.approx(18 * MS)
    assert ar_b.observed_us == pytest.approx(6 * MS)
    assert ar_b.apparent_busbw_gbps == pytest.approx(100.0)   # link peak
    assert sb.mean_step_us == pytest.approx(s.mean_step_us)
    assert s.arrival_skew_us == pytest.approx(18 * MS)
    assert s.critical_path_us["arrival_skew"] == pytest.approx(18 * MS)


def test_cli_prints_the_unhealthy_step_and_writes_a_chrome_trace(tmp_path):
    trace = tmp_path / "sim.json"
    r = run_cli("simulate", str(REF / "unhealthy_step.yaml"), "--chrome-trace", str(trace))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "step time mean 120.00 ms" in out and "bottleneck: input pipeline" in out
    assert "at 0.00: 22.00 = input pipeline (DataLoader) 20.00, host-to-device copy 2.00" in out
    assert "busy 44.00 ms/step, exposed 16.00, hidden 28.00" in out
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") in ("thread_name", "process_name")}
    # named as the PyTorch profiler names them: the host's main thread, one thread per stream
    assert {"thread 100000 (python)", "pt_data_worker_0"} <= names
    assert {"stream 1000 (comm) ", "stream 1001 (compute) ", "stream 1002 (h2d) "} <= names
    assert any(e["ph"] == "C" for e in events)
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
