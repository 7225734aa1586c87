"""Launch → GPU activity linking and step coverage: one fixture per quirk."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepsim.calibration.events import build_table
from stepsim.calibration.linking import complete_steps, link, step_coverage
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import load_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def api(name, ts, corr, dur=5, ext=None, tid=1, cat="cuda_runtime"):
    a = {"correlation": corr}
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": a}


def kern(name, ts, corr=None, dur=10, stream=7, cat="kernel", ext=None):
    a = {"stream": stream, "device": 0}
    if corr is not None:
        a["correlation"] = corr
    if ext is not None:
        a["External id"] = ext
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": a}


def step(n, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
            "ts": ts, "dur": dur}


def table_of(tmp_path, events):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return build_table(load_trace(p))


def rows(t, name):
    return [i for i, n in enumerate(t.names) if n == name]


def test_links_by_correlation_never_by_external_id(tmp_path):
    # the kernel's External id equals the *other* call's correlation: a wrong join would pick it
    t = table_of(tmp_path, [api("cudaLaunchKernel", 0, corr=11, ext=500),
                            api("cudaLaunchKernel", 10, corr=500, ext=501),
                            kern("k_a", 20, corr=11, ext=500), kern("k_b", 40, corr=500, ext=501)])
    lo = link(t).launch_of()
    assert lo[rows(t, "k_a")[0]] == 0 and lo[rows(t, "k_b")[0]] == 1


def test_driver_and_hip_launch_apis_link(tmp_path):
    t = table_of(tmp_path, [api("cuLaunchKernel", 0, 1, cat="cuda_driver"),
                            api("hipExtModuleLaunchKernel", 10, 2),
                            kern("k1", 5, 1), kern("k2", 15, 2)])
    lo = link(t).launch_of()
    assert lo[rows(t, "k1")[0]] == 0 and lo[rows(t, "k2")[0]] == 1


def test_graph_launch_one_call_many_kernels(tmp_path):
    t = table_of(tmp_path, [api("cudaGraphLaunch", 0, 7),
                            kern("g1", 10, 7), kern("g2", 20, 7), kern("g3", 30, 7, stream=9)])
    L = link(t)
    assert L.by_launch[0] == [rows(t, "g1")[0], rows(t, "g2")[0], rows(t, "g3")[0]]


def test_flows_are_only_a_fallback(tmp_path):
    t = table_of(tmp_path, [
        api("cudaLaunchKernel", 0, 3),
        api("cudaLaunchKernel", 10, 4),
        kern("has_corr", 20, 3),
        kern("no_corr", 40),  # correlation missing: the s/f flow pair ties it to the 2nd call
        {"ph": "s", "cat": "ac2g", "id": 4, "name": "ac2g", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "f", "cat": "ac2g", "id": 4, "name": "ac2g", "pid": 0, "tid": 7, "ts": 40, "bp": "e"},
        # a misleading flow for the kernel that has a correlation
        {"ph": "f", "cat": "ac2g", "id": 4, "name": "ac2g", "pid": 0, "tid": 7, "ts": 20, "bp": "e"},
    ])
    L = link(t)
    lo = L.launch_of()
    assert lo[rows(t, "has_corr")[0]] == 0 and lo[rows(t, "no_corr")[0]] == 1
    meth = dict(zip(L.gpu_rows.tolist(), L.method.tolist()))
    assert meth[rows(t, "has_corr")[0]] == "correlation" and meth[rows(t, "no_corr")[0]] == "flow"


def test_unlinkable_activity_is_counted(tmp_path):
    t = table_of(tmp_path, [kern("orphan", 0, 99)])
    L = link(t)
    assert L.launch_row.tolist() == [-1] and "1 of 1" in L.warnings[0]


def test_steps_with_dropped_kernels_are_excluded_with_count(tmp_path):
    ev = [step(1, 0, 100), step(2, 100, 100), step(3, 200, 100),
          api("cudaLaunchKernel", 10, 1), kern("k", 20, 1),
          api("cudaLaunchKernel", 110, 2),  # its kernel was dropped by the profiler
          api("cudaLaunchKernel", 120, 3),  # and this one too
          api("cudaLaunchKernel", 210, 4), kern("k", 220, 4)]
    t = table_of(tmp_path, ev)
    st = find_steps(t)
    L = link(t)
    cov = step_coverage(t, L, st)
    assert [(c.number, c.launches, c.covered) for c in cov] == [(1, 1, 1), (2, 2, 0), (3, 1, 1)]
    kept, w = complete_steps(t, L, st)
    assert [s.number for s in kept] == [1, 3]
    assert "excluded 1 of 3 steps" in w[0] and "2 launch call(s)" in w[0]


def test_zero_byte_memset_noop_is_not_a_drop(tmp_path):
    ev = [step(1, 0, 100), api("cudaMemsetAsync", 10, 1, dur=0.3),
          api("cudaLaunchKernel", 20, 2), kern("k", 30, 2)]
    t = table_of(tmp_path, ev)
    kept, w = complete_steps(t, link(t), find_steps(t))
    assert len(kept) == 1 and not w


def test_shared_trace_links_every_step_launch():
    p = SHARED / "kineto" / "be239c04_rec2021-06-08" / "resnet50_num_workers_0" / \
        "worker0.1623143089861.pt.trace.json.gz"
    if not p.exists():
        pytest.skip(f"shared traces not present at {SHARED}")
    t = build_table(load_trace(p))
    L = link(t)
    cov = step_coverage(t, L, find_steps(t))
    assert all(c.launches == c.covered == 1516 for c in cov)
    assert (L.launch_row >= 0).all()
