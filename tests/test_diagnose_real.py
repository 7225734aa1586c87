"""``stepsim diagnose`` on every real trace in ``../shared/traces``: a verdict with evidence
at every stage, and kernel-sum ÷ step-wall checked against the trace's own numbers, computed
here independently (plain ``json``, no stepsim parsing)."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from tests.conftest import SHARED_TRACES, run_cli, shared_traces

STAGES = ("kernel_ratio", "gaps", "roofline", "memory")
_FILES = sorted(str(p.relative_to(SHARED_TRACES)) for p in SHARED_TRACES.rglob("*.json*")) \
    if SHARED_TRACES.is_dir() else ["(absent)"]
_STEP = re.compile(r"^ProfilerStep#\d+$")
_COLL = re.compile(r"^(nccl|rccl)", re.I)


def _events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def own_kernel_ratio(path: Path) -> float | None:
    """Compute kernels (collectives excluded) starting inside the ProfilerStep window, summed,
    over the window: the first marker's start to the last marker's end, or to the end of the
    last GPU activity (kernel, copy, memset) launched inside the last marker (a runtime call
    there with the activity's ``correlation``), whichever is later. None without two
    ProfilerStep markers."""
    ev = [e for e in _events(path) if e.get("ph") == "X"]
    cat = [str(e.get("cat", "")).lower() for e in ev]
    marks = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
                   for e, c in zip(ev, cat) if _STEP.match(str(e.get("name", "")))
                   and c in ("cpu_op", "user_annotation", "operator"))
    if len(marks) < 2:
        return None
    t0, (l0, l1) = marks[0][0], marks[-1]
    corr = lambda e: (e.get("args") or {}).get("correlation")  # noqa: E731
    launched = {corr(e) for e, c in zip(ev, cat) if c in ("cuda_runtime", "runtime")
                and l0 <= float(e["ts"]) < l1 and corr(e) is not None}
    gpu = [(e, c) for e, c in zip(ev, cat) if c in ("kernel", "gpu_memcpy", "gpu_memset",
                                                     "memcpy", "memset")]
    end = max([l1] + [float(e["ts"]) + float(e.get("dur", 0)) for e, _ in gpu
                      if corr(e) in launched])
    return sum(float(e.get("dur", 0)) for e, c in gpu if c == "kernel"
               and not _COLL.match(str(e.get("name", ""))) and t0 <= float(e["ts"]) < end) \
        / (end - t0)


@pytest.mark.parametrize("rel", _FILES)
def test_diagnose_every_real_trace(rel):
    path = shared_traces() / rel
    r = run_cli("diagnose", str(path), "--json", "--draws", "0", "--steps", "6", "--warmup", "3")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    stages = [f["stage"] for f in d["findings"]]
    assert all(s in stages for s in STAGES)
    for f in d["findings"]:
        assert f["verdict"]
    first = d["findings"][0]
    assert first["stage"] == "kernel_ratio" and len(first["evidence"]) == 3
    own = own_kernel_ratio(path)
    if own is not None:
        assert d["kernel_ratio"] == pytest.approx(own, abs=0.02)
    if d["roofline"] is not None:
        assert d["roofline"]["classes"]
        for c in d["roofline"]["classes"]:
            assert c["verdict"] in ("compute bound", "bandwidth bound", "neither (occupancy)",
                                    "neither (latency/launch)", "no shapes")


def test_dlrm_rank1_bucket_fix_says_why_it_cannot_apply():
    """DLRM rank 1 (TorchRec): a backward kernel waits in the trace for the small middle
    all-reduce, so caps that merge all three buckets could never meet that wait: the
    bucket_cap_mb fix and ``--set comm.bucket_cap_mb`` say so in one line (they were a model
    that failed validation, a traceback on ``--set``); caps that keep the buckets apart
    rebuild the captured step exactly, the embedding send/recv kept in its place."""
    from stepsim import api
    from stepsim.simcore.errors import ModelError

    (trace,) = (shared_traces() / "param" / "dlrm_kineto").glob("worker1_*.json")
    r = run_cli("diagnose", str(trace), "--json", "--draws", "0", "--steps", "3", "--warmup", "1")
    assert r.returncode == 0, r.stderr
    assert "cannot apply to this model as captured" in r.stdout
    assert "waits in the trace for the all-reduce" in r.stdout
    m = api.calibrate(trace).model
    kw = {"draws": 0, "steps": 3, "warmup": 1, "jobs": 1}
    with pytest.raises(ModelError, match="cannot apply to this model as captured"):
        api.whatif(m, set="comm.bucket_cap_mb=5", **kw)
    w = api.whatif(m, set="comm.bucket_cap_mb=0.0001", **kw)
    assert w.scenario.mean_step_us == pytest.approx(w.baseline.mean_step_us, rel=1e-6)
    sendrecv = [[t.id for t in x.device.streams[m.comm.comm_stream] if "SendRecv" in t.name]
                for x in (m, w.scenario.model)]
    assert sendrecv[0] and sendrecv[0] == sendrecv[1]
