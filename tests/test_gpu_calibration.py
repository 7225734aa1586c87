"""GPU calibration: synthetic Kineto traces written by a tiny scripted "profiler"
(``tests/kineto_gen.py``, one quirk per test), replayed through the simulator; the multi-rank
and real shared traces are in ``tests/test_gpu_calibration_ranks.py``."""
from __future__ import annotations

import json

import pytest

from stepsim.calibration.gpu import categorize
from stepsim.fit import calibrate_gpu
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import InputError
from tests.kineto_gen import MAIN, NEXT, Gen, measured_median, one_rank_trace


@pytest.fixture
def single(tmp_path):
    return calibrate_gpu(one_rank_trace(tmp_path / "rank0.pt.trace.json.gz",
                                        distributedInfo={"rank": 0, "world_size": 1}),
                         coarse=False)


def test_steps_and_measured_times(single):
    m = single
    assert m.meta.steps_used == [3, 4, 5, 6]
    assert len(m.meta.measured_step_us) == 4 and min(m.meta.measured_step_us) > 1000


def test_host_sequence_kinds(single):
    kinds = [o.kind for o in single.host.ops]
    assert kinds[0] == "next_batch"
    assert kinds.count("launch") == 9  # 2 copies + 7 kernels
    syncs = [o for o in single.host.ops if o.kind == "sync"]
    names = [o.name for o in syncs]
    assert names.count("cudaMemcpyAsync") == 2 and "cudaStreamSynchronize" in names
    tasks = single.task_map()
    for o in single.host.ops:
        if o.kind in ("launch", "sync") and o.task:
            assert o.task in tasks
    launch_names = {tasks[o.task].name: o.name for o in single.host.ops if o.kind == "launch"}
    assert launch_names["Memcpy HtoD (Pageable -> Device)"] == "cudaMemcpyAsync"
    assert launch_names["volta_sgemm_128x64_nn"] == "cudaLaunchKernel"


def test_launch_cost_is_the_call_duration(single):
    gemm = [o for o in single.host.ops if o.kind == "launch"
            and single.task_map()[o.task].name == "volta_sgemm_128x64_nn"][0]
    assert gemm.dur_us == pytest.approx(5.0)


def test_categories_phases_and_copies(single):
    by_name = {t.name: t for t in single.task_map().values()}
    assert by_name["volta_sgemm_128x64_nn"].category == "gemm"
    assert by_name["volta_sgemm_128x64_nn"].phase == "forward"
    assert by_name["volta_sgemm_64x64_tn"].phase == "backward"
    assert by_name["void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>(int)"].category == "normalization"
    opt = by_name["void at::native::multi_tensor_apply_kernel<SGD>(int)"]
    assert (opt.category, opt.phase) == ("optimizer", "optimizer")
    h2d = by_name["Memcpy HtoD (Pageable -> Device)"]
    assert (h2d.kind, h2d.copy_kind, h2d.pinned, h2d.bytes, h2d.phase) == \
        ("memcpy", "h2d", False, 1 << 20, "data")
    d2h = by_name["Memcpy DtoH (Device -> Pageable)"]
    assert (d2h.copy_kind, d2h.pinned) == ("d2h", False)


def test_collective_from_record_param_comms(single):
    coll = [t for t in single.task_map().values() if t.kind == "collective"]
    assert len(coll) == 1
    c = coll[0]
    assert c.category == "communication" and c.bytes == 4000 and c.stream == "20"
    assert c.dur_us == pytest.approx(120.0)


@pytest.mark.parametrize("name", ["ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)",
                                  "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
                                  "NCCLKERNEL_upper_case", "rcclGenericKernel(int)"])
def test_collective_prefix_any_case(name):
    assert categorize(name, "kernel") == "communication"


def test_cross_stream_wait_is_inferred(single):
    tasks = single.task_map()
    opt = [t for t in tasks.values() if "multi_tensor_apply" in t.name][0]
    assert [tasks[w].kind for w in opt.waits] == ["collective"]
    assert single.meta.notes["inferred_waits"] >= 1


def test_loader_from_next_calls(single):
    assert single.loader.num_workers == 0
    assert single.loader.produce.mean_us == pytest.approx(300.0)
    # _SingleProcessDataLoaderIter: the trace itself says num_workers=0
    assert single.meta.sources["loader.num_workers"] == "measured"
    assert not any("DataLoader worker count" in w for w in single.meta.warnings)


def _multi_process_model(tmp_path):
    """The one-rank trace with its DataLoader's next() named as a multi-process loader's,
    calibrated at kernel level."""
    multi = NEXT.replace("_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter")

    def rename(events):
        for e in events:
            if e["name"] == NEXT:
                e["name"] = multi

    return calibrate_gpu(one_rank_trace(tmp_path / "t.json", change=rename), coarse=False)


def test_a_multi_process_loader_is_said_to_be_unknown(tmp_path):
    m = _multi_process_model(tmp_path)
    assert m.meta.sources["loader.num_workers"] == "assumed"
    assert any("multi-process DataLoader but not its num_workers" in w for w in m.meta.warnings)


def test_unexplained_idle_is_a_gap_not_busy_time(tmp_path):
    # k2 starts 500 us after k1 ended and its launch returned: nothing in the trace explains it
    g = Gen()
    for n in (1, 2, 3):
        s0 = g.t
        g.launch("volta_sgemm_128x64_nn", 300)
        g.cpu(10)
        c, _ = g.launch("volta_sgemm_64x64_tn", 200, arrive_only=True)
        g._gpu("volta_sgemm_64x64_tn", g.free[7] + 500.0, 200, 7, c)
        g.stream_sync()
        g.cpu(20)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    m = calibrate_gpu(g.dump(tmp_path / "gap.json"), coarse=False)
    k2 = [t for t in m.task_map().values() if t.name == "volta_sgemm_64x64_tn"][0]
    assert (k2.dur_us, k2.gap_us, k2.breakdown_us) == (200.0, pytest.approx(500.0), {})
    assert m.meta.sources["device.gap_scale"] == "inferred"
    from stepsim.models.metrics import summarize
    s = summarize(simulate(m, steps=3, warmup=1))
    assert s.median_step_us == pytest.approx(measured_median(m), rel=1e-6)
    assert 100 * s.device_busy_us / s.mean_step_us == pytest.approx(
        m.meta.notes["step_gpu_busy_pct"], rel=1e-6)
    assert s.gap_us["device_idle"] == pytest.approx(k2.gap_us + sum(
        t.gap_us for t in m.task_map().values() if t is not k2))


def test_a_copy_waiting_for_its_engine_has_no_gap(tmp_path):
    # two H2D copies on two streams, launched together: the second runs when the engine frees
    g = Gen()
    for n in (1, 2):
        s0 = g.t
        c1, _ = g.launch("", 0, stream=7, api="cudaMemcpyAsync", arrive_only=True)
        c2, _ = g.launch("", 0, stream=9, api="cudaMemcpyAsync", arrive_only=True)
        a = g.t + 3
        name = "Memcpy HtoD (Pinned -> Device)"
        e1 = g._gpu(name, a, 100, 7, c1, cat="gpu_memcpy", bytes=1 << 20)
        g._gpu(name, e1, 100, 9, c2, cat="gpu_memcpy", bytes=1 << 20)
        g.t = e1 + 100
        g._api("cudaDeviceSynchronize", g.t, g.t + 5, MAIN)
        g.cpu(5)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    m = calibrate_gpu(g.dump(tmp_path / "engine.json"), coarse=False)
    second = m.device.streams["9"][0]
    assert second.gap_us == 0 and not second.waits


def test_cpu_ops_keep_their_phase_when_two_middle_steps_are_combined(single):
    assert single.meta.notes["median_of_steps"].count(",") == 1   # 4 steps: the middle two
    phases = {o.phase for o in single.host.ops if o.kind == "cpu"}
    assert {"forward", "backward", "optimizer"} <= phases


def test_input_stalls_are_noted(tmp_path):
    g = Gen()
    for n in range(1, 7):
        s0 = g.t
        wait = 5000.0 if n in (3, 5) else 20.0
        g.op(NEXT, g.t, g.t + wait)
        g.cpu(wait + 10)
        g.launch("volta_sgemm_128x64_nn", 300)
        g.stream_sync()
        g.cpu(1000)
        g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")
    m = calibrate_gpu(g.dump(tmp_path / "stalls.json"), coarse=False)
    assert m.meta.notes["input_stalled_steps"] == 2
    assert m.meta.notes["input_stall_mean_us"] == pytest.approx(5000.0)
    assert any("could not keep up" in w for w in m.meta.warnings)


def test_every_source_is_a_parameter_path(single):
    from stepsim.models.params import CommParams, LoaderParams
    from stepsim.scenarios.paths import get_value

    src = single.meta.sources
    for path in src:
        get_value(single, path)   # raises for a path the planner cannot resolve
    assert {f"loader.{k}" for k in LoaderParams.model_fields} <= set(src)
    # comm.line_bytes is no calibrated figure: DDP's bucket rebuild sets it (models.ddp);
    # comm.cold_resume only the gloo harness's probe (a GPU model writes what it wrote),
    # comm.grad_copy_us_per_mb only a gloo trace's copies on the training thread
    assert {f"comm.{k}" for k in CommParams.model_fields
            if k not in ("line_bytes", "cold_resume", "cold_resume_opt",
                         "barrier_exit", "grad_copy_us_per_mb")} <= set(src)
    assert "comm.cold_resume" not in src and "comm.cold_resume_opt" not in src
    assert src["loader.produce"] == "inferred" and src["loader.num_workers"] == "measured"
    assert src["ranks.0.delay_us"] == "measured" and src["comm.world_size"] == "measured"


def test_host_cores_are_assumed_for_a_gpu_server(single):
    assert single.loader.host_cores == 8
    assert single.meta.sources["loader.host_cores"] == "assumed"
    assert any("host CPU cores" in w for w in single.meta.warnings)


def test_default_model_is_coarsened_and_replays_alike(tmp_path, single):
    m = calibrate_gpu(one_rank_trace(tmp_path / "r.json", distributedInfo={"rank": 0}))
    assert "coarsened_tasks" in m.meta.notes and "coarsened_tasks" not in single.meta.notes
    assert simulate(m, steps=4, warmup=2).median_step_us == pytest.approx(
        simulate(single, steps=4, warmup=2).median_step_us, rel=1e-9)


def test_meta_notes(single):
    n = single.meta.notes
    for k in ("gpu_busy_pct", "kernel_sum_over_step_wall", "exposed_comm_us",
              "representative_step", "measured_median_step_us"):
        assert k in n
    assert 0 < n["gpu_busy_pct"] <= 100
    assert single.meta.sources["host.ops"] == "measured"


def test_replay_matches_measured_median(single):
    r = simulate(single, steps=5, warmup=2)
    assert r.median_step_us == pytest.approx(measured_median(single), rel=0.005)


def test_model_round_trips_json(single, tmp_path):
    from stepsim.models.params import StepModel, load_model, save_model

    save_model(single, tmp_path / "m.json")
    assert load_model(tmp_path / "m.json") == single
    assert StepModel.model_validate_json(single.model_dump_json()) == single


def test_trace_without_gpu_activity_is_rejected(tmp_path):
    p = tmp_path / "cpu_only.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 10}]}))
    with pytest.raises(InputError, match="no GPU activity"):
        calibrate_gpu(p)


def test_trace_without_steps_is_one_window_with_a_warning(tmp_path):
    g = Gen()
    g.launch("k", 10)     # host call 1_000_000-1_000_005 µs, kernel 1_000_008-1_000_018
    p = g.dump(tmp_path / "nosteps.json")
    m = calibrate_gpu(p, coarse=False)
    assert m.meta.measured_step_us == [pytest.approx(18.0)]
    assert [t.name for ts in m.device.streams.values() for t in ts] == ["k"]
    assert any("taken to be the whole capture" in w and "prof.step()" in w
               for w in m.meta.warnings)


def test_a_few_negative_kernel_durs_are_dropped_and_their_steps_excluded(tmp_path):
    def neg(ev):
        ks = [i for i, e in enumerate(ev) if e["cat"] == "kernel"]
        ev[ks[0]]["dur"], ev[ks[-1]]["dur"] = -50, -1
        neg.i = ks[0]
    m = calibrate_gpu(one_rank_trace(tmp_path / "kernel_neg.json", change=neg))
    (w,) = [w for w in m.meta.warnings if "dur cannot be right" in w]
    assert "dropped 2 of" in w and "negative dur -50 µs (on kernel" in w
    assert f"at event {neg.i})" in w
    assert m.meta.steps_used == [4, 5]   # the first and last steps lost a kernel
    assert measured_median(m) == pytest.approx(
        measured_median(calibrate_gpu(one_rank_trace(tmp_path / "whole.json"))))


def test_non_object_args_warning_reaches_the_model(tmp_path):
    def listify(ev):
        for e in ev:
            if e["cat"] == "cpu_op":
                e["args"] = ["not", "an", "object"]
    m = calibrate_gpu(one_rank_trace(tmp_path / "args_list.json", change=listify))
    assert any("whose args, pid or tid cannot be right (first: args is an array" in w
               for w in m.meta.warnings)


def test_zero_length_profiler_steps_are_named_in_the_error(tmp_path):
    def zero(ev):
        for e in ev:
            if e["name"].startswith("ProfilerStep#"):
                e["dur"] = 0
    with pytest.raises(InputError, match="no training step found: dropped 4 step.* of zero length"):
        calibrate_gpu(one_rank_trace(tmp_path / "step_zero.json", change=zero))


def test_a_gpu_trace_gets_the_host_noise_prior(single):
    """One trace cannot measure the host's run-to-run speed: the stated prior is in the model,
    and an interval of a what-if draws it (a host-bound step's interval is wider with it)."""
    from stepsim.models.host_speed import HOST_NOISE_PRIOR
    from stepsim.scenarios.predict import predict

    assert single.meta.sources["host.cpu_scale"] == "assumed"
    assert tuple(single.meta.ranges["host.cpu_scale"]) == HOST_NOISE_PRIOR
    without = single.model_copy(update={"meta": single.meta.model_copy(
        update={"ranges": {}, "sources": {k: v for k, v in single.meta.sources.items()
                                          if k != "host.cpu_scale"}})})
    with_prior = predict(single, steps=8, warmup=2, intervals=32)
    alone = predict(without, steps=8, warmup=2, intervals=32)
    assert "host.cpu_scale" in with_prior.uncertain and "host.cpu_scale" not in alone.uncertain
    assert (with_prior.p90_step_us - with_prior.p10_step_us
            > alone.p90_step_us - alone.p10_step_us)


def test_a_sidecar_answers_the_loader_and_cores_warnings(tmp_path, cpu_run_nw1):
    """With a sidecar applied, the trace-only warnings that ask for one (the loader's
    num_workers, the host's cores) are gone and its values are in the model."""
    from stepsim.calibration.calibrate import apply_sidecar
    from stepsim.calibration.gpu_notes import ASK_CORES, ASK_LOADER
    from stepsim.calibration.sidecar import load_sidecar

    m = _multi_process_model(tmp_path)
    assert any(w.endswith(ASK_LOADER) for w in m.meta.warnings)
    assert any(w.endswith(ASK_CORES) for w in m.meta.warnings)
    side = load_sidecar(cpu_run_nw1 / "sidecar.json")
    with_side = apply_sidecar(m, side)
    assert not any(w.endswith((ASK_LOADER, ASK_CORES)) for w in with_side.meta.warnings)
    assert with_side.loader.num_workers == side.loader.num_workers == 1
    assert with_side.loader.host_cores == side.host_cores
