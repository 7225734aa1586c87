"""``bench/issue11.py``'s calibrate rows: ``stepsim calibrate`` in a fresh process against a
bare ``orjson.loads`` of the same bytes (:func:`row_calibrate`, on synthetic traces written to
/tmp on demand: :func:`synthetic_row`), and of the DLRM job's rank files copied to N ranks
(:func:`row_ranks`)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from installed import installed_env  # noqa: E402
from issue11_env import CACHE, DLRM, PY  # noqa: E402
from load_bench import synthetic_trace  # noqa: E402


_CHILD = r"""
import gzip, json, resource, sys, time, subprocess
what, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if what == 'orjson':
    import orjson
    raw = open(path, 'rb').read()
    if raw[:2] == b'\x1f\x8b':
        raw = gzip.decompress(raw)
    t = time.perf_counter(); orjson.loads(raw); dt = time.perf_counter() - t
    print(json.dumps({'s': dt, 'json_bytes': len(raw)}))
    sys.exit(0)
else:
    from stepsim.cli import main
    t = time.perf_counter(); c0 = time.process_time()
    try:
        main(['calibrate', path, '-o', out, *sys.argv[4:]])
    except SystemExit:
        pass
    dt = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF); rc = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({'s': dt, 'peak_mb': max(ru.ru_maxrss, rc.ru_maxrss) / 1e3,
                  'cpu_s': ru.ru_utime + ru.ru_stime + rc.ru_utime + rc.ru_stime}))
"""


def child(what: str, path: Path, timeout: float, extra: tuple = ()) -> dict:
    """``what`` (``orjson`` or ``calibrate``) of ``path`` in a fresh process, with stepsim's
    bytecode compiled once, as an installed copy has it (``bench/installed.py``): the modules
    ``calibrate`` imports inside the timed call are not compiled again in every run."""
    out = CACHE / "calibrated.json"
    CACHE.mkdir(exist_ok=True)
    try:
        p = subprocess.run([PY, "-c", _CHILD, what, str(path), str(out), *extra],
                           capture_output=True, text=True, timeout=timeout,
                           env=installed_env(CACHE))
    except subprocess.TimeoutExpired:
        return {"s": float("inf"), "peak_mb": float("nan"), "cpu_s": float("nan"),
                "error": f"did not finish in {timeout:.0f} s"}
    if p.returncode != 0 or not p.stdout.strip():
        return {"s": float("nan"), "peak_mb": float("nan"), "cpu_s": float("nan"),
                "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def row_calibrate(label: str, path: Path, timeout: float, steps: str | None = None) -> None:
    """``stepsim calibrate`` of ``path`` against a bare ``orjson.loads`` of it; with ``steps``
    (``A:B``) the trace is streamed (``--steps``) and, when its JSON is too large to load
    whole here, the reference is left out."""
    size = path.stat().st_size
    ref = (child("orjson", path, timeout) if steps is None or size < 600e6 else
           {"s": float("nan"), "json_bytes": size})
    cal = child("calibrate", path, timeout, ("--steps", steps) if steps else ())
    size = ref.get("json_bytes", size)
    how = f" --steps {steps}" if steps else ""
    print(f"{label} ({size / 1e6:.0f} MB of JSON): calibrate{how} {cal['s']:.1f} s "
          f"{cal.get('error', '')} = {cal['s'] / ref['s']:.1f}x orjson.loads ({ref['s']:.2f} s) "
          f"(goal <= 2x); peak {cal['peak_mb']:.0f} MB = {cal['peak_mb'] * 1e6 / size:.2f}x "
          f"the JSON (goal <= 3x the file)")


def synthetic(mb: float) -> Path:
    CACHE.mkdir(exist_ok=True)
    p = CACHE / f"synthetic-{mb:g}MB.pt.trace.json"
    synthetic_trace(p, mb)
    return p


def rank_folder(n: int) -> Path:
    """The DLRM job's rank files copied to ``n`` ranks (``distributedInfo`` rewritten)."""
    import orjson

    d = CACHE / f"ranks-{n}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    src = sorted(DLRM.glob("*.json"))
    docs = [orjson.loads(p.read_bytes()) for p in src]
    for r in range(n):
        doc = docs[r % len(docs)]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=r, world_size=n)
        (d / f"rank{r:04d}.pt.trace.json").write_bytes(orjson.dumps(doc))
    return d


def row_ranks(ns: list[int], timeout: float) -> None:
    for n in ns:
        d = rank_folder(n)
        cal = child("calibrate", d, timeout)
        print(f"calibrate {n} rank files ({sum(p.stat().st_size for p in d.iterdir()) / 1e6:.0f}"
              f" MB): {cal['s']:.1f} s {cal.get('error', '')}, peak {cal['peak_mb']:.0f} MB, "
              f"{cal['cpu_s'] / cal['s']:.2f} cores used (goal: both cores; <= HTA's load)")
        shutil.rmtree(d, ignore_errors=True)


def synthetic_row(label: str, mb: float, timeout: float = 600,
                   steps: str | None = None) -> None:
    p = synthetic(mb)
    try:
        row_calibrate(label, p, timeout, steps)
    finally:
        p.unlink(missing_ok=True)
