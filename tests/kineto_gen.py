"""A tiny scripted "profiler" for the GPU calibration tests: :class:`Gen` writes a consistent
Kineto-style trace (a host cursor in µs, streams that run their kernels in order, launches
linked by ``correlation``); :func:`one_rank_trace` the standard one-rank trace and
:func:`two_rank_dir` a two-rank job with a late rank and a shifted clock."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

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
