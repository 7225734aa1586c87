"""The diagnosis tree on small synthetic traces, one per leaf, each checked against what the
trace was written to contain (hand-derived), through the command line as a user runs it; and
on a CPU capture of a real torch loop."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.kineto_gen import NEXT, Gen, two_rank_dir

GiB = 2**30
A100 = [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 40 * GiB}]
EW = "void at::native::vectorized_elementwise_kernel<4>(int)"
FAST = ("--draws", "0", "--steps", "8", "--warmup", "4", "--json")


def _diagnose(path: Path, *extra: str) -> dict:
    r = run_cli("diagnose", str(path), *FAST, *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _leaves(d: dict, stage: str = "gaps") -> dict[str, dict]:
    return {f["key"]: f for f in d["findings"] if f["stage"] == stage and f["key"]}


def _write(g: Gen, path: Path, starts: list[float], **top) -> tuple[Path, float]:
    """Dump the trace; return it with the window's length (first step start to the end)."""
    return g.dump(path, **top), g.t - starts[0]


def _steps(g: Gen, body, n: int = 5) -> list[float]:
    starts = []
    for k in range(3, 3 + n):
        s0 = g.t
        starts.append(s0)
        body(g, k)
        g.op(f"ProfilerStep#{k}", s0, g.t, cat="user_annotation")
    return starts


def test_input_bound_trace(tmp_path):
    def body(g, k):
        g.op(NEXT, g.t, g.t + 5000)
        g.cpu(5010)
        for _ in range(3):
            g.launch(EW, 100.0)
        g.stream_sync()
        g.cpu(50)

    g = Gen()
    starts = _steps(g, body)
    path, window = _write(g, tmp_path / "input.json", starts)
    d = _diagnose(path)
    assert d["kernel_ratio"] == pytest.approx(5 * 300 / window, rel=1e-6)
    assert "gaps set the pace" in d["findings"][0]["verdict"]
    leaf = _leaves(d)["input"]
    assert leaf["whatifs"][0]["fix"].startswith("more_workers")
    assert leaf["whatifs"][0]["step_us"] < d["baseline_step_us"]
    assert next(iter(_leaves(d))) == "input"       # the largest cause comes first


def _launch_bound(g, k, sync):
    for _ in range(100):
        g.launch(EW, 2.0, api_us=20.0)
        g.cpu(5)
    if sync:
        g.stream_sync()
    g.cpu(20)


def test_launch_bound_trace_with_a_sync_says_what_blocks_cuda_graphs(tmp_path):
    g = Gen()
    starts = _steps(g, lambda g, k: _launch_bound(g, k, sync=True))
    path, window = _write(g, tmp_path / "launch.json", starts)
    d = _diagnose(path)
    assert d["kernel_ratio"] == pytest.approx(5 * 100 * 2.0 / window, rel=1e-6)
    w = _leaves(d)["launch"]["whatifs"][0]
    assert w["fix"] == "cuda_graphs" and w["step_us"] is None
    assert "synchronises with the host 1 time(s)" in w["note"]


def test_launch_bound_trace(tmp_path):
    g = Gen()
    starts = _steps(g, lambda g, k: _launch_bound(g, k, sync=False))
    path, window = _write(g, tmp_path / "launch.json", starts, deviceProperties=A100)
    d = _diagnose(path)
    assert d["kernel_ratio"] == pytest.approx(5 * 100 * 2.0 / window, rel=1e-6)
    leaves = _leaves(d)
    assert "launch" in leaves
    assert leaves["launch"]["whatifs"][0]["fix"] == "cuda_graphs"
    assert leaves["launch"]["whatifs"][0]["step_us"] < 0.5 * d["baseline_step_us"]
    # no shapes: the roofline says so; the host paces, so CUDA graphs are named there too
    roof = [f for f in d["findings"] if f["stage"] == "roofline"]
    assert "no kernel has op shapes" in roof[0]["verdict"]
    assert any(f["key"] == "launch" for f in roof)


def test_device_bound_trace_goes_to_the_roofline(tmp_path):
    n = 2048
    flops = 2.0 * n ** 3

    def body(g, k):
        for _ in range(4):
            a = g.t
            g.launch("ampere_sgemm_128x64_nn", 1200.0, api_us=5.0)
            g.op("aten::mm", a - 1, g.t + 1, **{"Input Dims": [[n, n], [n, n]],
                                                "Input type": ["float", "float"]})
            g.cpu(5)
        g.stream_sync()
        g.cpu(10)

    g = Gen()
    starts = _steps(g, body)
    path, window = _write(g, tmp_path / "gemm.json", starts, deviceProperties=A100)
    d = _diagnose(path)
    assert d["kernel_ratio"] == pytest.approx(5 * 4 * 1200.0 / window, rel=1e-6)
    assert d["kernel_ratio"] > 0.8 and "device-bound" in d["findings"][0]["verdict"]
    (c,) = d["roofline"]["classes"]
    assert c["klass"] == "gemm" and c["verdict"] == "compute bound"
    assert c["flops"] == pytest.approx(4 * flops)            # per step
    assert c["attained"] == pytest.approx(flops / 19.5e12 / 1200e-6)  # 0.73 of FP32
    mp = _leaves(d, "roofline")["mixed_precision"]["whatifs"][0]
    assert mp["fix"].startswith("mixed_precision:factor=")
    factor = float(mp["fix"].split("=")[1].split(",")[0])
    assert factor == pytest.approx(19.5 / 312, abs=5e-4)      # FP32 roof -> BF16 roof
    assert mp["step_us"] < 0.3 * d["baseline_step_us"]
    assert mp["floor_us"] == pytest.approx(4 * flops / 312e12 * 1e6)


def test_elementwise_chain_is_fused_with_its_bytes(tmp_path):
    n = 1 << 24

    def body(g, k):
        for _ in range(3):
            a = g.t
            g.launch(EW, 160.0)
            g.op("aten::add", a - 1, g.t + 1, **{"Input Dims": [[n], [n], []],
                                                 "Input type": ["float", "float", "Scalar"]})
            g.cpu(3)
            a = g.t
            g.launch(EW, 110.0)
            g.op("aten::relu", a - 1, g.t + 1, **{"Input Dims": [[n]], "Input type": ["float"]})
            g.cpu(3)
        g.stream_sync()

    g = Gen()
    starts = _steps(g, body)
    path, _ = _write(g, tmp_path / "chain.json", starts, deviceProperties=A100)
    d = _diagnose(path)
    c = next(c for c in d["roofline"]["classes"] if c["klass"] == "elementwise")
    assert c["verdict"] == "bandwidth bound"
    assert c["bytes"] == pytest.approx(3 * 20.0 * n)
    fused = _leaves(d, "roofline")["fused_elementwise"]["whatifs"][0]
    # 5 links per step (add -> relu 3, relu -> next add 2; none across the step's sync),
    # each saving the 4n-byte intermediate written and read: 60n -> 60n - 5 x 8n
    assert fused["fix"] == f"fused_elementwise:factor={1 - 5 * 8 / 60:.4g}"


def test_pageable_copy_trace(tmp_path):
    def body(g, k):
        g.copy("h2d", 64 << 20, 3000.0)
        g.cpu(10)
        for _ in range(2):
            g.launch(EW, 250.0)
        g.stream_sync()
        g.cpu(10)

    g = Gen()
    starts = _steps(g, body)
    path, window = _write(g, tmp_path / "h2d.json", starts)
    d = _diagnose(path)
    leaf = _leaves(d)["h2d"]
    assert leaf["whatifs"][0]["fix"] == "pin_memory"
    assert leaf["whatifs"][0]["step_us"] < d["baseline_step_us"]
    ev = next(f for f in d["findings"] if f["stage"] == "gaps" and not f["key"])["evidence"]
    assert any("pageable host-to-device copies per step: 1 (3.00 ms" in e for e in ev)
    # the pageable copy blocks the host (a sync on it) and so does cudaStreamSynchronize,
    # which waits for the two 250 us kernels
    assert any("host syncs per step: 2, host waiting on them 0.50 ms" in e for e in ev)


def test_arrival_skew_leaf_names_the_straggler_fix(tmp_path):
    d = _diagnose(two_rank_dir(tmp_path, late_us=3000.0))
    leaf = _leaves(d)["arrival_skew"]
    assert leaf["whatifs"][0]["fix"] == "remove_straggler"
    assert leaf["whatifs"][0]["step_us"] < d["baseline_step_us"]


def _memory_events(g: Gen, s0: float, start: float, peak: float, reserved: float):
    """Allocations from ``start`` up to ``peak`` and back inside one step (bytes)."""
    def ev(t, b, total):
        g.ev.append({"ph": "i", "s": "t", "name": "[memory]", "pid": g.pid, "tid": 100,
                     "ts": t, "args": {"Device Type": 1, "Device Id": 0, "Bytes": b,
                                       "Total Allocated": total, "Total Reserved": reserved}})
    half = (peak - start) / 2
    ev(s0 + 1, half, start + half)
    ev(s0 + 2, half, peak)
    ev(s0 + 3, -2 * half, start)


def test_memory_headroom_and_batch_what_if(tmp_path):
    def body(g, k):
        s0 = g.t
        a = g.t
        g.launch(EW, 100.0)
        g.op("aten::relu", a - 1, g.t + 1, **{"Input Dims": [[1 << 20]], "Input type": ["float"]})
        _memory_events(g, s0, 4 * GiB, 10 * GiB, 12 * GiB)
        g.stream_sync()
        g.cpu(20)

    g = Gen()
    starts = _steps(g, body)
    path, _ = _write(g, tmp_path / "mem.json", starts, deviceProperties=A100)
    mem = _diagnose(path)["memory"]
    assert mem["persistent"] == 4 * GiB and mem["activations"] == 6 * GiB
    assert mem["fragmentation"] == 2 * GiB
    assert mem["max_batch_factor"] == pytest.approx((40 - 4 - 2) / 6)
    assert mem["fits"]["4.0"] == [True, True]            # 4 + 4 x 6 = 28 GiB (+2) <= 40
    assert "x5.67" in next(f for f in _diagnose(path)["findings"]
                           if f["stage"] == "memory")["verdict"]


def test_text_output_and_plot(tmp_path):
    n = 1024

    def body(g, k):
        a = g.t
        g.launch("ampere_sgemm_128x64_nn", 300.0)
        g.op("aten::mm", a - 1, g.t + 1, **{"Input Dims": [[n, n], [n, n]],
                                            "Input type": ["float", "float"]})
        g.stream_sync()
        g.cpu(200)

    g = Gen()
    starts = _steps(g, body)
    path, _ = _write(g, tmp_path / "t.json", starts, deviceProperties=A100)
    plot = tmp_path / "roof.png"
    r = run_cli("diagnose", str(path), "--draws", "2", "--steps", "8", "--warmup", "4",
                "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    for stage in ("1. kernel-sum / step-wall", "2. gaps", "3. roofline", "4. memory"):
        assert stage in r.stdout
    assert "P10-P90" in r.stdout and plot.stat().st_size > 10_000


def test_unknown_gpu_asks_for_peaks_and_takes_them(tmp_path):
    def body(g, k):
        a = g.t
        g.launch(EW, 100.0)
        g.op("aten::relu", a - 1, g.t + 1, **{"Input Dims": [[1 << 22]], "Input type": ["float"]})
        g.stream_sync()

    g = Gen()
    starts = _steps(g, body)
    path, _ = _write(g, tmp_path / "u.json", starts,
                     deviceProperties=[{"id": 0, "name": "Mystery X1"}])
    d = _diagnose(path)
    assert "--peak" in next(f for f in d["findings"] if f["stage"] == "roofline")["verdict"]
    d = _diagnose(path, "--peak", "fp32=10e12,bw=500e9")
    c = d["roofline"]["classes"][0]
    assert c["bw_bytes_s"] == 500e9
    assert c["attained"] == pytest.approx(2 * 4 * (1 << 22) / 500e9 / 100e-6)


def test_bad_peak_is_one_line(tmp_path):
    g = Gen()
    starts = _steps(g, lambda g, k: (g.launch(EW, 10.0), g.stream_sync()))
    path, _ = _write(g, tmp_path / "b.json", starts)
    r = run_cli("diagnose", str(path), "--peak", "fp99=1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "fp99" in r.stderr


def test_cpu_capture(cpu_run_nw0):
    d = _diagnose(cpu_run_nw0)
    assert d["kernel_ratio"] == 0.0
    assert "no device kernels" in d["findings"][0]["verdict"]
    roof = next(f for f in d["findings"] if f["stage"] == "roofline")
    assert "no device kernels" in roof["verdict"]
    leaves = _leaves(d)
    assert leaves and all(f["verdict"] for f in leaves.values())
    # a CPU run has no device: the host lane's time is not "not in device compute" (a fresh
    # user's CNN read "45.44 ms of 45.44 ms per step not in device compute", 2026-12-05)
    gaps = next(f for f in d["findings"] if f["stage"] == "gaps" and not f["key"])
    lane = next(e for e in gaps["evidence"] if e.startswith("scarce lane:"))
    assert "device compute" not in lane and "(a CPU run: no device)" in lane, lane


def test_a_model_file_is_diagnosed_from_its_simulation(tmp_path):
    def body(g, k):
        g.op(NEXT, g.t, g.t + 2000)
        g.cpu(2010)
        g.launch(EW, 500.0)
        g.stream_sync()

    g = Gen()
    starts = _steps(g, body)
    path, _ = _write(g, tmp_path / "m.json", starts)
    model = tmp_path / "model.json"
    assert run_cli("calibrate", str(path), "-o", str(model)).returncode == 0
    d = _diagnose(model)
    assert "simulated baseline" in d["kernel_ratio_source"]
    assert d["kernel_ratio"] == pytest.approx(500.0 / d["baseline_step_us"], rel=0.02)
    assert "input" in _leaves(d)
    assert "no kernel shapes" in next(f for f in d["findings"]
                                      if f["stage"] == "roofline")["verdict"]
