"""Trace-loading benchmark.

For the largest shared trace (``../shared/traces``, by decompressed size) and a synthetic
Kineto-like trace of about 100 MB written to a temporary folder, prints:

* load time of :func:`calibration.trace_io.load_trace` as a ratio to a bare ``orjson.loads``
  of the same (decompressed) bytes, and the same for load + :func:`calibration.events.build_table`;
* peak memory (resident set high-water mark above the interpreter's baseline) of each, as a
  ratio to the file size and to the JSON size.

Each measurement runs in a fresh subprocess, so peaks do not mix. Run from the repository
root: ``python bench/load_bench.py [--mb 100]``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"

_CHILD = r"""
import gzip, json, sys, time
def rss_kb(key):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return int(line.split()[1])
import orjson
from stepsim.calibration.trace_io import load_trace
from stepsim.calibration.events import build_table
path, what = {path!r}, {what!r}
raw = open(path, 'rb').read()
if raw[:2] == b'\x1f\x8b':
    raw = gzip.decompress(raw)
nbytes = len(raw)
if what != 'orjson':
    del raw
base = rss_kb('VmRSS')
t = time.perf_counter()
if what == 'orjson':
    obj = orjson.loads(raw)
elif what == 'load':
    obj = load_trace(path)
else:
    obj = build_table(load_trace(path))
dt = time.perf_counter() - t
peak = rss_kb('VmHWM')
print(json.dumps({{'s': dt, 'peak_kb': max(0, peak - base), 'json_bytes': nbytes}}))
"""


def _measure(path: Path, what: str, repeat: int) -> dict:
    best = None
    for _ in range(repeat):
        code = _CHILD.format(path=str(path), what=what)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        if best is None or r["s"] < best["s"]:
            best = r
    return best


def synthetic_trace(path: Path, target_mb: float) -> int:
    """Write a Kineto-like trace (new dialect: cpu_op, cuda_runtime, kernel, ac2g flows,
    ProfilerStep annotations) of about ``target_mb`` MB to ``path``, a step at a time (so a
    trace of several GB is written in little memory); returns its size."""
    import orjson

    head = [{"name": "process_name", "ph": "M", "ts": 1700000000000000.0, "pid": 100,
             "tid": 0, "args": {"name": "python"}}]
    ts = 1700000000000000.125
    corr = 1
    step = 0
    per_step = 2000
    size = 0
    target = target_mb * 1e6
    with open(path, "wb") as f:
        def put(events: list, first: bool) -> None:
            nonlocal size
            text = orjson.dumps(events)[1:-1]
            f.write(text if first else b"," + text)
            size += len(text) + (0 if first else 1)

        f.write(b'{"schemaVersion":1,"traceEvents":[')
        put(head, True)
        while size < target:
            step_start = ts
            body = []
            for k in range(per_step):
                ext = corr
                body.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 100,
                             "tid": 100, "ts": ts, "dur": 9.5,
                             "args": {"External id": ext, "Sequence number": k, "Ev Idx": k}})
                body.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                             "pid": 100, "tid": 100, "ts": ts + 2.25, "dur": 4.5,
                             "args": {"External id": ext, "cbid": 211, "correlation": corr}})
                body.append({"ph": "s", "id": corr, "pid": 100, "tid": 100, "ts": ts + 2.25,
                             "cat": "ac2g", "name": "ac2g"})
                body.append({"ph": "X", "cat": "kernel",
                             "name": "void at::native::vectorized_elementwise_kernel<4>(int)",
                             "pid": 0, "tid": 7, "ts": ts + 8.125, "dur": 6.0,
                             "args": {"External id": ext, "queued": 0, "device": 0,
                                      "context": 1, "stream": 7, "correlation": corr,
                                      "registers per thread": 16, "shared memory": 0,
                                      "grid": [128, 1, 1], "block": [128, 1, 1]}})
                body.append({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts + 8.125,
                             "cat": "ac2g", "name": "ac2g", "bp": "e"})
                corr += 1
                ts += 10.0
            put([{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                  "pid": 100, "tid": 100, "ts": step_start, "dur": ts - step_start,
                  "args": {"External id": 0}}] + body, False)
            step += 1
        f.write(b'],"displayTimeUnit":"ms"}')
    return path.stat().st_size


def _largest_shared() -> Path | None:
    if not TRACES.is_dir():
        return None
    best, best_size = None, -1
    for p in TRACES.rglob("*.json*"):
        raw = p.read_bytes()
        size = len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)
        if size > best_size:
            best, best_size = p, size
    return best


def _report(label: str, path: Path, repeat: int) -> None:
    fsize = path.stat().st_size
    base = _measure(path, "orjson", repeat)
    load = _measure(path, "load", repeat)
    table = _measure(path, "table", repeat)
    jb = base["json_bytes"]
    print(f"{label}: {path.name}  file {fsize / 1e6:.1f} MB, JSON {jb / 1e6:.1f} MB")
    print(f"  orjson.loads          {base['s']:6.2f} s   peak {base['peak_kb'] / 1e3:7.1f} MB")
    for name, r in (("load_trace", load), ("load_trace+table", table)):
        print(f"  {name:20s}  {r['s']:6.2f} s   x{r['s'] / base['s']:.2f} of orjson.loads   "
              f"peak {r['peak_kb'] / 1e3:7.1f} MB = x{r['peak_kb'] * 1e3 / fsize:.1f} file, "
              f"x{r['peak_kb'] * 1e3 / jb:.1f} JSON")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=100.0, help="synthetic trace size (MB)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (best kept)")
    a = ap.parse_args(argv)
    big = _largest_shared()
    if big is None:
        print(f"shared traces not found at {TRACES}; skipping the real trace")
    else:
        _report("largest shared trace", big, a.repeat)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "synthetic.pt.trace.json"
        t = time.perf_counter()
        synthetic_trace(p, a.mb)
        print(f"(synthetic trace written in {time.perf_counter() - t:.1f} s)")
        _report("synthetic trace", p, a.repeat)


if __name__ == "__main__":
    main()
