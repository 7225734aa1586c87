"""Window replay: a calibrated trace's captured steps re-run in order, each with its own
durations, from the device backlog the capture started with, measured as calibration measures
them (``simulate(model, replay=True)``); and the launch queue's depth inferred from a trace."""
from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from stepsim.fit import calibrate_gpu
from stepsim.models.coarsen import coarsen
from stepsim.models.params import LAUNCH_QUEUE_DEPTH, StepModel, load_model, save_model
from stepsim.models.simulate import simulate, window_replay
from stepsim.scenarios.select import Selector
from stepsim.scenarios.transforms import ScaleOp, apply_ops
from stepsim.simcore.errors import ModelError
from tests.conftest import REPO, shared_traces
from tests.kineto_gen import Gen

BACKLOG_US, KERNEL_US, HOST_STEP_US = 20_000.0, 15_000.0, 10_000.0
REFERENCE = REPO / "scenarios" / "reference"


def backlogged_trace(path):
    """A host that never waits, 10 ms a step, launching 15 ms of GPU work a step, behind 20 ms
    of work launched before the first step: steps of 10, 10 and (the last, GPU-inclusive)
    about 45 ms, while a long run pays the device's 15 ms."""
    g = Gen()
    g.launch("volta_sgemm_128x64_nn", BACKLOG_US)
    for n in (1, 2, 3):
        s0 = g.t
        g.cpu(100)
        g.launch("volta_sgemm_64x64_tn", KERNEL_US)
        g.cpu(HOST_STEP_US - 105)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    return g.dump(path)


@pytest.fixture
def backlogged(tmp_path):
    return calibrate_gpu(backlogged_trace(tmp_path / "backlog.json"), coarse=False)


def test_the_window_starts_with_the_captured_backlog(backlogged):
    w = backlogged.replay
    assert w.steps == [1, 2, 3] and all(w.calibrated) and w.last_gpu_inclusive
    # launched 5 us before step 1 (the call), started 3 us after the call returned
    assert w.stream_busy_us == {"7": pytest.approx(BACKLOG_US + 3.0)}
    assert w.measured_step_us[:2] == pytest.approx([HOST_STEP_US] * 2)


def test_window_replay_reproduces_the_transient_and_steady_state_pays_the_device(backlogged):
    w = window_replay(backlogged)
    assert w.replayed_us == pytest.approx(w.measured_us, rel=1e-3)
    assert w.measured_us[2] == pytest.approx(BACKLOG_US + 3 * KERNEL_US - 2 * HOST_STEP_US,
                                             rel=1e-3)
    assert w.median_error == pytest.approx(0.0, abs=1e-3)
    steady = simulate(backlogged, steps=10, warmup=5)
    assert steady.median_step_us == pytest.approx(KERNEL_US, rel=1e-3)


def test_coarsening_keeps_the_window(backlogged):
    c = coarsen(backlogged)
    assert window_replay(c).replayed_us == pytest.approx(window_replay(backlogged).replayed_us)


def varying_kernel_model(path, kernels: list[float]):
    """One GEMM per step, of the given µs in each step, then a stream sync: calibrated."""
    g = Gen()
    for n, k in enumerate(kernels, start=1):
        s0 = g.t
        g.cpu(50)
        g.launch("volta_sgemm_128x64_nn", k)
        g.stream_sync()
        g.cpu(30)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    return calibrate_gpu(g.dump(path), coarse=False)


def test_each_step_replays_its_own_durations(tmp_path):
    kernels = [400.0, 900.0, 600.0, 500.0]
    m = varying_kernel_model(tmp_path / "t.json", kernels)
    gemm = next(t for t in m.task_map().values() if t.name == "volta_sgemm_128x64_nn")
    assert gemm.replay_us == pytest.approx(kernels)
    assert gemm.dur_us == pytest.approx(float(np.median(kernels[:3])))   # the last ends with a wait
    w = window_replay(m)
    assert w.replayed_us == pytest.approx(w.measured_us, rel=1e-3)
    # the steady state repeats the representative step: its first three steps are not equal
    assert not np.allclose(w.measured_us[:3], w.measured_us[0], rtol=0.05)


def queue_filling_trace(path, tiny_launches=1100):
    """Each step launches a 50 ms kernel, then ``tiny_launches`` 1 µs kernels queued behind it,
    and the host never blocks: more launches pending than CUDA's 1024."""
    g = Gen()
    for n in (1, 2, 3):
        s0 = g.t
        g.launch("volta_sgemm_128x64_nn", 50_000.0)
        for _ in range(tiny_launches):
            g.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 1.0, api_us=4.0)
            g.cpu(1)
        g.cpu(20_000.0 - (g.t - s0))
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    return g.dump(path)


def test_a_trace_with_more_launches_pending_raises_the_queue_depth(tmp_path):
    m = calibrate_gpu(queue_filling_trace(tmp_path / "q.json"), coarse=False)
    assert m.meta.notes["launch_queue_peak_pending"] > 1101
    assert m.device.launch_queue_depth == m.meta.notes["launch_queue_peak_pending"]
    assert m.meta.sources["device.launch_queue_depth"] == "inferred"
    w = window_replay(m)
    assert w.replayed_us[:2] == pytest.approx([20_000.0] * 2, rel=1e-3)
    # with CUDA's usual 1024 entries the replayed host would have blocked on the queue
    capped = m.model_copy(update={"device": m.device.model_copy(
        update={"launch_queue_depth": LAUNCH_QUEUE_DEPTH})})
    assert window_replay(capped).replayed_us[1] > 1.5 * 20_000.0


def test_a_trace_within_the_usual_depth_keeps_it_assumed(backlogged):
    assert backlogged.device.launch_queue_depth == LAUNCH_QUEUE_DEPTH
    assert backlogged.meta.sources["device.launch_queue_depth"] == "assumed"


def test_a_whatif_drops_the_window(backlogged):
    out = apply_ops(backlogged, [ScaleOp(select=Selector(category=("gemm",)), factor=0.5)])
    assert out.replay is None
    assert all(t.replay_us is None for t in out.task_map().values())
    with pytest.raises(ModelError, match="no captured window"):
        simulate(out, replay=True)


def test_the_window_round_trips_and_is_validated(backlogged, tmp_path):
    p = tmp_path / "m.json"
    save_model(backlogged, p)
    back = load_model(p)
    assert back.replay == backlogged.replay
    assert window_replay(back).replayed_us == pytest.approx(window_replay(backlogged).replayed_us)
    data = backlogged.model_dump()
    data["host"]["ops"][0]["replay_us"] = [1.0]
    with pytest.raises(ValidationError, match="replay values for a window of 3 steps"):
        StepModel.model_validate(data)
    data = backlogged.model_dump()
    data["replay"] = None      # deleted by hand: the window is dropped, with a warning
    m = StepModel.model_validate(data)
    assert m.replay is None and all(op.replay_us is None for op in m.host.ops)
    assert any("captured window dropped" in w for w in m.meta.warnings)
    assert data["host"]["ops"][0]["replay_us"] is not None, "the caller's dict is untouched"


@pytest.mark.parametrize("rel", [
    "tracelens/mi300/resnet_act_checkpoint.json.gz",   # the device lags a host that never waits
    "param/resnet_kineto.json.gz",                     # half the steps stall on the DataLoader
    "hta/trace_diff/test/test.json.gz",                # syncs wait on different tasks per step
])
def test_shared_trace_window_replay_within_3_percent(rel):
    p = shared_traces() / rel
    m = calibrate_gpu(p)
    w = window_replay(m)
    assert w.compared.sum() >= len(w.steps) - 1
    assert abs(w.median_error) < 0.03


def test_simulate_window_on_the_command_line(tmp_path):
    import json

    from tests.conftest import run_cli

    model, chrome = tmp_path / "m.json", tmp_path / "window.json"
    r = run_cli("calibrate", str(backlogged_trace(tmp_path / "t.json")), "-o", str(model))
    assert r.returncode == 0, r.stderr
    assert "replay of the captured window (3 steps" in r.stdout
    r = run_cli("simulate", str(model), "--window", "--json", "--chrome-trace", str(chrome))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["step"] for s in doc["steps"]] == [1, 2, 3]
    assert abs(doc["median_error_pct"]) < 0.1
    assert json.loads(chrome.read_text())["traceEvents"]
    r = run_cli("simulate", str(REFERENCE / "input_pipeline_a.yaml"), "--window")
    assert r.returncode == 2 and "no captured window" in r.stderr


def cross_step_trace(path, a_us=3000.0):
    """Each step first runs B on stream 20, which waits (an event) for A, the last kernel the
    previous step ran on stream 7; the host syncs on B, then launches A and moves on."""
    g = Gen()
    a_end = 0.0
    for n in range(1, 6):
        s0 = g.t
        g.cpu(50)
        g.launch("volta_sgemm_64x64_tn", 500, stream=20, after=(a_end,) if n > 1 else ())
        g.cpu(50)
        g.stream_sync(stream=20)
        g.cpu(50)
        a_end = g.launch("volta_sgemm_128x64_nn", a_us, stream=7)
        g.cpu(100)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    return g.dump(path)


def test_a_wait_on_the_previous_steps_work_is_modelled(tmp_path):
    m = calibrate_gpu(cross_step_trace(tmp_path / "x.json"), coarse=False)
    by_name = {t.name: t for t in m.task_map().values()}
    b, a = by_name["volta_sgemm_64x64_tn"], by_name["volta_sgemm_128x64_nn"]
    assert b.prev_waits == [a.id] and b.gap_us < 10
    assert m.meta.notes["inferred_prev_step_waits"] == 1
    base = simulate(m, steps=6, warmup=3).median_step_us
    assert base == pytest.approx(float(np.median(m.meta.measured_step_us)), rel=0.02)
    # the dependency carries a what-if across steps: A twice as fast shortens every step
    faster = apply_ops(m, [ScaleOp(select=Selector(name=("volta_sgemm_128x64_nn",)), factor=0.5)])
    assert simulate(faster, steps=6, warmup=3).median_step_us == \
        pytest.approx(base - 1500, rel=0.02)
    assert window_replay(m).median_error == pytest.approx(0.0, abs=0.01)
    assert coarsen(m).task_map()[b.id].prev_waits == [a.id]


def test_intervals_bootstrap_the_captured_steps(tmp_path):
    from stepsim.scenarios.predict import bootstrap_measured, predict

    m = varying_kernel_model(tmp_path / "t.json", [400.0, 900.0, 600.0, 500.0, 700.0])
    gemm = next(t.id for t in m.task_map().values() if t.name == "volta_sgemm_128x64_nn")
    point = m.task_map()[gemm].dur_us           # the median step's: 600 µs
    assert point == 600.0
    draws = [bootstrap_measured(m, np.random.default_rng(s)).task_map()[gemm].dur_us
             for s in range(400)]
    # each draw is the point times (its resample's mean / the window's mean, 620 µs), so the
    # draws lie in 600 × [400, 900] / 620 and are centred on the point, not on the op mean
    assert len(set(draws)) > 1
    assert all(600 * 400 / 620 - 1e-9 <= d <= 600 * 900 / 620 + 1e-9 for d in draws)
    assert np.mean(draws) == pytest.approx(600.0, rel=0.01)
    p = predict(m, steps=6, warmup=2, intervals=8)
    assert p.p90_step_us > p.p10_step_us
