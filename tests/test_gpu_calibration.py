"""GPU calibration: synthetic Kineto traces written by a tiny scripted "profiler" (one quirk
per test), replayed through the simulator, plus real shared traces when present."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from stepsim.calibration.gpu import calibrate_gpu, categorize
from stepsim.models.simulate import simulate
from stepsim.simcore.errors import InputError

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
MAIN, BWD = 100, 101
NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


class Gen:
    """Writes a consistent Kineto-style trace: a host cursor (µs), streams that run their
    kernels in order, launches linked by ``correlation``."""

    def __init__(self, t0=1_000_000.0, pid=1):
        self.ev: list[dict] = []
        self.t = t0
        self.pid = pid
        self.corr = 1
        self.free: dict[int, float] = {}

    def cpu(self, us):
        self.t += us

    def op(self, name, start, end, cat="cpu_op", tid=MAIN, **args):
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid,
                        "ts": start, "dur": end - start, "args": args})

    def _api(self, name, a, b, tid, cat="cuda_runtime"):
        c = self.corr
        self.corr += 1
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": tid,
                        "ts": a, "dur": b - a, "args": {"correlation": c, "External id": c + 9000}})
        return c

    def _gpu(self, name, start, dur, stream, corr, cat="kernel", **args):
        self.ev.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start,
                        "dur": dur, "args": {"correlation": corr, "stream": stream, "device": 0,
                                             **args}})
        self.free[stream] = start + dur
        return start + dur

    def launch(self, kname, dur, stream=7, tid=MAIN, api="cudaLaunchKernel", api_us=5.0,
               after=(), latency=3.0, arrive_only=False):
        a, b = self.t, self.t + api_us
        c = self._api(api, a, b, tid)
        start = max([b + latency, self.free.get(stream, 0.0)] + list(after))
        self.t = b
        if arrive_only:
            return c, start
        return self._gpu(kname, start, dur, stream, c)

    def copy(self, kind, nbytes, dur, stream=7, tid=MAIN):
        """A pageable copy: the call returns when the copy is done."""
        a = self.t
        c = self._api("cudaMemcpyAsync", a, a + 8, tid)
        start = max(a + 10.0, self.free.get(stream, 0.0))
        name = ("Memcpy HtoD (Pageable -> Device)" if kind == "h2d"
                else "Memcpy DtoH (Device -> Pageable)")
        end = self._gpu(name, start, dur, stream, c, cat="gpu_memcpy", bytes=nbytes)
        self.ev[-2]["dur"] = end + 2.0 - a  # the call blocks until the copy lands
        self.t = end + 2.0
        return end

    def stream_sync(self, stream=7, tid=MAIN):
        a = self.t
        b = max(a + 2.0, self.free.get(stream, 0.0) + 3.0)
        self._api("cudaStreamSynchronize", a, b, tid)
        self.t = b

    def dump(self, path: Path, **top):
        data = json.dumps({"schemaVersion": 1, "traceEvents": self.ev, **top}).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


def part1(g: Gen, n: int, extra_cpu=0.0):
    """Step start to the collective's launch; returns (step start, nccl corr, arrival)."""
    s0 = g.t
    g.op(NEXT, g.t, g.t + 300)
    g.cpu(300 + 20)
    g.copy("h2d", 1 << 20, 100)
    g.cpu(10 + extra_cpu)
    g.launch("volta_sgemm_128x64_nn", 400)
    g.cpu(15)
    g.launch("void at::native::vectorized_elementwise_kernel<4>(int)", 30)
    g.cpu(15)
    g.launch("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>(int)", 50)
    g.cpu(30)
    a = g.t
    g.launch("volta_sgemm_64x64_tn", 600, tid=BWD)
    g.cpu(12)
    last_bwd = g.launch("void at::native::vectorized_elementwise_kernel<2>(int)", 40, tid=BWD)
    g.cpu(10)
    g.op("autograd::engine::evaluate_function: MmBackward0", a, g.t, tid=BWD)
    b = g.t
    c, arrive = g.launch("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", 0,
                         stream=20, tid=BWD, after=(last_bwd,), arrive_only=True)
    g.cpu(5)
    g.op("record_param_comms", b, g.t, tid=BWD, **{"Collective name": "allreduce",
                                                   "In msg nelems": 1000, "Out msg nelems": 1000,
                                                   "Group size": 2, "dtype": "Float"})
    return s0, c, arrive


def part2(g: Gen, n: int, s0: float, c: int, arrive: float, end: float):
    name = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    g._gpu(name, arrive, end - arrive, 20, c)
    g.cpu(20)
    a = g.t
    g.launch("void at::native::multi_tensor_apply_kernel<SGD>(int)", 80, after=(end,))
    g.op("Optimizer.step#SGD.step", a, g.t + 5, cat="user_annotation")
    g.cpu(10)
    g.copy("d2h", 4, 2)   # loss.item(): a pageable copy ...
    g.stream_sync()       # ... and a stream sync
    g.cpu(50)
    g.op(f"ProfilerStep#{n}", s0, g.t, cat="user_annotation")


def one_rank_trace(path: Path, steps=(3, 4, 5, 6), change=None, **top) -> Path:
    """The standard trace; ``change(events)``, if given, mutates its events before writing."""
    g = Gen()
    for n in steps:
        s0, c, arrive = part1(g, n)
        part2(g, n, s0, c, arrive, arrive + 120)
    if change:
        change(g.ev)
    return g.dump(path, **top)


def measured_median(model):
    return float(np.median(model.meta.measured_step_us))


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
    assert {f"comm.{k}" for k in CommParams.model_fields} <= set(src)
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
    assert "dropped 2 of" in w and f"negative dur -50 µs (on kernel" in w
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
    assert any("have 'args' that is not an object" in w for w in m.meta.warnings)


def test_zero_length_profiler_steps_are_named_in_the_error(tmp_path):
    def zero(ev):
        for e in ev:
            if e["name"].startswith("ProfilerStep#"):
                e["dur"] = 0
    with pytest.raises(InputError, match="no training step found: dropped 4 step.* of zero length"):
        calibrate_gpu(one_rank_trace(tmp_path / "step_zero.json", change=zero))


# ----------------------------------------------------------------------------- ranks
def two_rank_dir(tmp_path: Path, late_us=400.0, clock_shift_us=5000.0) -> Path:
    """Rank 1 arrives ``late_us`` late at each all-reduce; its clock reads ``clock_shift_us``
    ahead. The all-reduce ends on both ranks ``transfer`` after the last arrival."""
    d = tmp_path / "ranks"
    d.mkdir()
    g0, g1 = Gen(t0=1_000_000.0), Gen(t0=1_000_000.0)
    transfer = 150.0
    for n in (7, 8, 9):
        start = max(g0.t, g1.t)
        g0.t = g1.t = start
        s0a, c0, arr0 = part1(g0, n)
        s1a, c1, arr1 = part1(g1, n, extra_cpu=late_us)
        end = max(arr0, arr1) + transfer
        part2(g0, n, s0a, c0, arr0, end)
        part2(g1, n, s1a, c1, arr1, end)
    for e in g1.ev:
        e["ts"] += clock_shift_us
    g0.dump(d / "trace_r0.json", distributedInfo={"backend": "nccl", "rank": 0, "world_size": 2})
    g1.dump(d / "trace_r1.json.gz", distributedInfo="{'backend': 'nccl', 'rank': 1, 'world_size': 2}")
    return d


def test_multi_rank_alignment_transfer_and_skew(tmp_path):
    m = calibrate_gpu(two_rank_dir(tmp_path))
    assert [r.rank for r in m.ranks] == [0, 1]
    n = m.meta.notes
    assert n["reference_rank"] == 0
    off = dict(kv.split(":") for kv in n["clock_offsets_us"].split(","))
    assert float(off["1"]) == pytest.approx(5000.0, abs=1.0)
    coll = [t for t in m.task_map().values() if t.kind == "collective"][0]
    assert coll.dur_us == pytest.approx(150.0)  # transfer, from the last rank to arrive
    late = [r for r in m.ranks if r.rank == 1][0]
    assert late.delay_us > 0
    assert m.comm.world_size == 2
    assert m.meta.sources["ranks.1.delay_us"] == "inferred"
    assert m.meta.sources["ranks.0.delay_us"] == "measured"
    r = simulate(m, steps=4, warmup=2)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_rank_from_file_name_and_missing_rank(tmp_path):
    d = tmp_path / "byname"
    d.mkdir()
    one_rank_trace(d / "worker3.pt.trace.json")
    m = calibrate_gpu(d / "worker3.pt.trace.json")
    assert m.ranks[0].rank == 3 and any("file name" in w for w in m.meta.warnings)
    p = one_rank_trace(tmp_path / "anonymous.json")
    m = calibrate_gpu(p)
    assert m.ranks[0].rank == 0 and any("taken as rank 0" in w for w in m.meta.warnings)


def test_two_files_with_the_same_rank_are_two_captures(tmp_path):
    d = tmp_path / "captures"
    d.mkdir()
    one_rank_trace(d / "a.json", distributedInfo={"rank": 2, "world_size": 4})
    one_rank_trace(d / "b.json", distributedInfo={"rank": 2, "world_size": 4})
    m = calibrate_gpu(d)
    assert [r.rank for r in m.ranks] == [2]
    w = [w for w in m.meta.warnings if "both claim rank 2" in w]
    assert len(w) == 1 and "separate captures" in w[0] and "using a.json" in w[0] \
        and "ignoring b.json" in w[0]


# ------------------------------------------------------------------------- shared traces
def _shared(rel: str) -> Path:
    p = SHARED / rel
    if not p.exists():
        pytest.skip(f"shared trace {rel} not present under {SHARED}")
    return p


def test_shared_dlrm_rank_replays():
    m = calibrate_gpu(_shared("param/dlrm_kineto/worker2_step_12.1694128201554.pt.trace.json"))
    assert m.ranks[0].rank == 2 and m.comm.world_size == 8
    r = simulate(m, steps=3, warmup=1)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_dlrm_all_ranks_replay():
    m = calibrate_gpu(_shared("param/dlrm_kineto"))
    assert [r.rank for r in m.ranks] == list(range(8))
    assert m.meta.notes["collectives_matched"] == 8
    r = simulate(m, steps=3, warmup=1)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_old_dialect_resnet_replays():
    m = calibrate_gpu(_shared("kineto/be239c04_rec2021-06-08/resnet50_num_workers_0/"
                              "worker0.1623143566756.pt.trace.json.gz"))
    r = simulate(m, steps=3, warmup=2)
    assert r.median_step_us == pytest.approx(measured_median(m), rel=0.03)


def test_shared_recsys_trace_replays_busy_and_exposed_comm():
    # up to 145 ms per step of device idle that the trace does not explain: as gaps (not busy
    # time) the replay shows the step's measured GPU busy and exposed communication
    from stepsim.models.metrics import summarize

    m = calibrate_gpu(_shared("hta/negative_queue_length_values_check/rank0.json.gz"))
    s = summarize(simulate(m, steps=4, warmup=2))
    n = m.meta.notes
    assert s.median_step_us == pytest.approx(n["measured_median_step_us"], rel=0.01)
    assert 100 * s.device_busy_us / s.mean_step_us == pytest.approx(n["step_gpu_busy_pct"], abs=2)
    assert s.exposed_comm_us == pytest.approx(n["step_exposed_comm_us"], rel=0.05)


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
