"""Shapes of real traces a user brings (issue 15), one small synthetic fixture each, built here
(no binary files): no step marker, memsets the profiler did not record, CUDA graph captures
and replays, stray work after the last step, folders, a truncated last step. The same shapes
in ``../shared/traces`` are checked by ``bench/calibrate_corpus.py``."""
from __future__ import annotations

import json

import pytest

from stepsim.fit import calibrate, calibrate_gpu
from stepsim.simcore.errors import InputError
from tests.kineto_gen import Gen


def ann(g: Gen, name, a, b, tid=100):
    g.op(name, a, b, cat="user_annotation", tid=tid)


def steps_trace(path, n=3, memset=False, capture=False, graph_kernels=True, marker=True):
    """``n`` ProfilerSteps of two kernels each, optionally with an unrecorded memset call, the
    launches made inside a graph capture, or a graph replay (with or without its kernels)."""
    g = Gen()
    for k in range(n):
        s0 = g.t
        if capture:
            g._api("cudaStreamBeginCapture", g.t, g.t + 2, 100)
            g.cpu(2)
            for _ in range(2):
                g._api("cudaLaunchKernel", g.t, g.t + 5, 100)   # recorded into the graph
                g.cpu(5)
            g._api("cudaStreamEndCapture", g.t, g.t + 3, 100)
            g.cpu(3)
        g.launch("volta_sgemm_128x64_nn", 200)
        g.cpu(10)
        if memset:
            g._api("cudaMemsetAsync", g.t, g.t + 4, 100)         # no GPU memset record
            g.cpu(4)
        if graph_kernels is not None and not graph_kernels:
            g._api("cudaGraphLaunch", g.t, g.t + 6, 100)         # its kernels were not recorded
            g.cpu(6)
        g.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 30)
        g.cpu(300)
        if marker:
            ann(g, f"ProfilerStep#{k}", s0, g.t)
    return g.dump(path)


# ------------------------------------------------------------------------- no step marker
def test_gpu_trace_without_marker_is_one_window(tmp_path):
    m = calibrate(steps_trace(tmp_path / "t.json", n=1, marker=False))
    assert m.meta.steps_used == [0] and len(m.meta.measured_step_us) == 1
    w = " ".join(m.meta.warnings)
    assert "taken to be the whole capture" in w and "schedule" in w and "prof.step()" in w


def cpu_trace(path, steps=None, ann_name=None, n=4):
    ev = []
    t = 0
    for k in range(n):
        if steps == "zero":
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}",
                       "pid": 1, "tid": 1, "ts": t, "dur": 0})
        if ann_name:
            ev.append({"ph": "X", "cat": "user_annotation", "name": ann_name, "pid": 1, "tid": 1,
                       "ts": t, "dur": 400})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                   "ts": t + 10, "dur": 300 + 10 * k})
        t += 1000
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_cpu_trace_without_marker_is_one_window_with_the_same_warning(tmp_path):
    m = calibrate(cpu_trace(tmp_path / "cpu.json"))
    assert len(m.meta.measured_step_us) == 1
    assert m.meta.measured_step_us[0] == pytest.approx(3000.0 + 330.0)
    assert any("taken to be the whole capture" in w and "prof.step()" in w
               for w in m.meta.warnings)


def test_cpu_trace_with_a_repeated_annotation_steps_on_it(tmp_path):
    m = calibrate(cpu_trace(tmp_path / "cpu.json", ann_name="## forward ##"))
    assert m.meta.measured_step_us == [pytest.approx(1000.0)] * 3
    assert any("'## forward ##' (4 occurrences" in w for w in m.meta.warnings)


def test_one_refusal_for_gpu_and_cpu_traces(tmp_path):
    cpu = cpu_trace(tmp_path / "cpu.json", steps="zero")
    gpu = tmp_path / "gpu.json"
    ev = json.loads(cpu.read_text())
    ev["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                              "ts": 5, "dur": 5, "args": {"stream": 7, "correlation": 1}})
    gpu.write_text(json.dumps(ev))
    msgs = []
    for p in (cpu, gpu):
        with pytest.raises(InputError) as ei:
            calibrate(p)
        msgs.append(ei.value.problem)
    assert msgs[0] == msgs[1] and msgs[0].startswith("no training step found: dropped 4 step(s)")


# ------------------------------------------------------------------------------- memsets
def test_unrecorded_memsets_do_not_make_steps_incomplete(tmp_path):
    m = calibrate_gpu(steps_trace(tmp_path / "t.json", memset=True), coarse=False)
    assert m.meta.steps_used == [0, 1, 2]
    assert any("3 memset call(s)" in w and "does not always record memsets" in w
               for w in m.meta.warnings)


# ---------------------------------------------------------------------------- CUDA graphs
def test_launches_inside_a_graph_capture_do_not_make_steps_incomplete(tmp_path):
    m = calibrate_gpu(steps_trace(tmp_path / "t.json", capture=True), coarse=False)
    assert m.meta.steps_used == [0, 1, 2]
    assert any("6 launch call(s)" in w and "graph was being captured" in w
               for w in m.meta.warnings)


def test_graph_replays_without_kernels_are_named_as_such(tmp_path):
    with pytest.raises(InputError) as ei:
        calibrate_gpu(steps_trace(tmp_path / "t.json", graph_kernels=False))
    msg = ei.value.problem
    assert "replays CUDA/HIP graphs" in msg and "3 of its 3 cudaGraphLaunch" in msg
    assert "truncated" not in msg


# ------------------------------------------------------------------------- stray activity
def stray_trace(path, lone_gap_us=52_000.0, tail_us=10.0):
    """Two ProfilerSteps; the last launches, at its end, a kernel that runs only after the
    device sat idle ``lone_gap_us`` (it waited on something outside the step), then a
    trailing kernel after the last step that no step launched."""
    g = Gen()
    for k in range(2):
        s0 = g.t
        g.launch("volta_sgemm_128x64_nn", 1000)
        g.cpu(1200)
        if k == 1:
            c = g._api("cudaLaunchKernel", g.t, g.t + 5, 100)
            g._gpu("void lone_kernel(int)", g.free[7] + lone_gap_us, tail_us, 7, c)
            g.cpu(5)
        ann(g, f"ProfilerStep#{k}", s0, g.t)
    g.cpu(100)
    g.launch("void after_the_steps(int)", 20, stream=9)
    return g.dump(path)


def test_a_stray_kernel_is_reported_not_folded_into_the_last_step(tmp_path):
    m = calibrate_gpu(stray_trace(tmp_path / "t.json"), coarse=False)
    # the last step ends with its host part and its sgemm, not 52 ms later
    assert m.meta.measured_step_us[-1] < 1300
    w = " ".join(m.meta.warnings)
    assert "1 GPU activity launched in the last step (1)" in w and "stray" in w
    assert "run after the last step and belong to no step" in w


def test_work_after_an_idle_that_fills_the_device_is_the_steps(tmp_path):
    # the same shape with a long kernel after the idle: part of the step's work, kept
    m = calibrate_gpu(stray_trace(tmp_path / "t.json", tail_us=20_000.0), coarse=False)
    assert m.meta.measured_step_us[-1] > 52_000 + 20_000
    assert not any("stray" in w for w in m.meta.warnings)


# ---------------------------------------------------------------------- two-step captures
def two_step_trace(path, cut=True, drop_kernel=False):
    """ProfilerStep#0 complete (three launches, 715 µs); ProfilerStep#1 cut by the profiler's
    stop after its first launch (``cut``), or complete with a kernel record the profiler lost
    (``drop_kernel``)."""
    g = Gen()
    for k in range(2):
        s0 = g.t
        for j in range(1 if (cut and k == 1) else 3):
            if drop_kernel and k == 1 and j == 2:
                g._api("cudaLaunchKernel", g.t, g.t + 5, 100)
                g.cpu(5)
                continue
            g.launch(f"volta_sgemm_{j}_nn", 300)
            g.cpu(100)
        g.cpu(10 if cut and k == 1 else 400)
        ann(g, f"ProfilerStep#{k}", s0, g.t)
    return g.dump(path)


def test_a_truncated_last_step_is_left_out_and_said(tmp_path):
    m = calibrate_gpu(two_step_trace(tmp_path / "t.json"), coarse=False)
    assert m.meta.steps_used == [0] and len(m.meta.measured_step_us) == 1
    assert m.meta.measured_step_us[0] == pytest.approx(715.0)
    assert any("the last step (1) is truncated" in w and "1 of 2 step(s) are complete" in w
               for w in m.meta.warnings)


def test_a_complete_last_step_is_kept(tmp_path):
    m = calibrate_gpu(two_step_trace(tmp_path / "t.json", cut=False), coarse=False)
    assert m.meta.steps_used == [0, 1]
    assert not any("truncated" in w for w in m.meta.warnings)


def test_a_last_step_that_lost_kernels_is_excluded_and_counted(tmp_path):
    m = calibrate_gpu(two_step_trace(tmp_path / "t.json", cut=False, drop_kernel=True),
                      coarse=False)
    assert m.meta.steps_used == [0]
    assert any("excluded 1 of 2 steps ([1])" in w for w in m.meta.warnings)


# -------------------------------------------------------------------------------- folders
def rank_file(path, rank, world=2):
    g = Gen()
    for k in range(3):
        s0 = g.t
        g.launch("volta_sgemm_128x64_nn", 200)
        g.cpu(300)
        ann(g, f"ProfilerStep#{k}", s0, g.t)
    return g.dump(path, distributedInfo={"rank": rank, "world_size": world})


def test_a_folder_calibrates_what_it_can_and_names_what_it_skipped(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    rank_file(d / "rank0.json", 0)
    rank_file(d / "rank1.json", 1)
    (d / "rank2.json").write_text("{not json")
    steps_trace(d / "rank3.json", graph_kernels=False)      # every step incomplete
    cpu_trace(d / "rank4.json")                              # host-only among GPU ranks
    m = calibrate(d)
    assert sorted(r.rank for r in m.ranks) == [0, 1]
    note = next(w for w in m.meta.warnings if "skipped 3 of 5 trace files" in w)
    assert "rank2.json:" in note and "rank3.json: no complete step" in note
    assert "rank4.json: host-only trace" in note


def test_a_folder_where_nothing_calibrates_is_refused_naming_each_file(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "a.json").write_text("[1, 2")
    steps_trace(d / "b.json", graph_kernels=False)
    with pytest.raises(InputError) as ei:
        calibrate(d)
    assert "a.json:" in ei.value.problem and "b.json: no complete step" in ei.value.problem


def test_a_folder_of_cpu_traces_works_as_each_file_alone(tmp_path):
    d = tmp_path / "cpu"
    d.mkdir()
    for k in range(2):
        cpu_trace(d / f"worker{k}.json", ann_name="## forward ##")
    alone = calibrate(d / "worker0.json")
    m = calibrate(d)
    assert m.meta.measured_step_us == alone.meta.measured_step_us
    assert any("2 host-only traces" in w and "not from worker1.json" in w
               for w in m.meta.warnings)


def test_a_folder_of_two_runs_of_one_rank_says_they_are_not_one_job(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    rank_file(d / "run_a.json", 0)
    rank_file(d / "run_b.json", 0)
    m = calibrate(d)
    assert len(m.ranks) == 1
    assert any("not ranks of one job" in w and "rank 0" in w for w in m.meta.warnings)


def test_a_folder_of_two_jobs_uses_the_first(tmp_path):
    d = tmp_path / "jobs"
    d.mkdir()
    rank_file(d / "a_rank0.json", 0, world=2)
    rank_file(d / "b_rank1.json", 1, world=8)
    m = calibrate(d)
    assert len(m.ranks) == 1 and m.meta.traces == [str(d / "a_rank0.json")]
    assert any("world sizes differ: 2, 8" in w and "b_rank1.json (world size 8)" in w
               for w in m.meta.warnings)


# ------------------------------------------------------ the same shapes in the real traces
def test_real_trace_with_unrecorded_memsets_keeps_its_steps():
    from stepsim.calibration.events import build_table
    from stepsim.calibration.linking import link
    from stepsim.calibration.steps import find_steps
    from stepsim.calibration.trace_io import load_trace
    from stepsim.calibration.truncated import usable_steps
    from tests.conftest import shared_traces

    t = build_table(load_trace(shared_traces() / "param" / "resnet_kineto.json.gz"))
    steps = find_steps(t)
    kept, w = usable_steps(t, link(t), steps)
    # two of its 29 steps hold a memset call the profiler did not record: kept, and said
    assert len(kept) == len(steps) == 29
    assert any("3 memset call(s)" in x for x in w) and not any("excluded" in x for x in w)


def test_real_trace_with_an_unmarked_last_iteration_reports_it():
    from stepsim.calibration.events import build_table
    from stepsim.calibration.steps import find_steps
    from stepsim.calibration.trace_io import load_trace
    from tests.conftest import shared_traces

    p = shared_traces() / "kineto" / "02522842_rec2021-01-11_autograd_api" / \
        "resnet50_autograd_api_num_workers_0" / "worker0.pt.trace.json.gz"
    st = find_steps(build_table(load_trace(p)))
    assert len(st) == 5
    assert any("2057 GPU activities" in w and "belong to no step" in w for w in st.warnings)


def test_real_folder_of_two_runs_of_one_rank_says_so():
    from stepsim.calibration.folders import one_job, read_folder
    from tests.conftest import shared_traces

    fold = read_folder(shared_traces() / "kineto" / "be239c04_rec2021-06-08" /
                       "resnet50_num_workers_0")
    tables, notes = one_job(fold.gpu)
    assert len(tables) == 2 and not fold.skipped
    assert any("not ranks of one job" in n and "rank 0" in n for n in notes)


def test_a_capture_of_runtime_calls_only_is_refused_naming_what_is_missing(tmp_path):
    # the shape of a real RL-rollout capture: one 10 s cudaMemGetInfo, nothing else
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemGetInfo", "pid": 9, "tid": 9,
         "ts": 0, "dur": 10_000_000, "args": {"correlation": 5}}]}))
    with pytest.raises(InputError) as ei:
        calibrate(p)
    assert "no CPU op and no GPU activity" in ei.value.problem
