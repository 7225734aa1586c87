"""Step segmentation: one fixture per marker quirk, named after it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as hst

from stepsim.calibration.events import build_table
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import RawTrace, load_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


def x(name, ts, dur, cat="user_annotation", pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def table_of(tmp_path, events):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    return build_table(load_trace(p))


def test_profiler_steps_numbers_not_from_zero_start_to_next_start(tmp_path):
    ev = [x("ProfilerStep#1009", 100, 80), x("ProfilerStep#1010", 200, 90),
          x("ProfilerStep#1011", 330, 50)]
    st = find_steps(table_of(tmp_path, ev))
    assert [s.number for s in st] == [1009, 1010, 1011] and st.method == "profiler_step"
    assert [s.dur_ns for s in st] == [100_000, 130_000, 50_000]
    assert [s.last for s in st] == [False, False, True] and not st.warnings


def test_gpu_user_annotation_copy_is_not_a_step(tmp_path):
    ev = [x("ProfilerStep#5", 100, 50), x("ProfilerStep#6", 160, 50),
          x("ProfilerStep#5", 90, 400, cat="gpu_user_annotation", pid=0, tid=7)]
    st = find_steps(table_of(tmp_path, ev))
    assert [(s.number, s.pid) for s in st] == [(5, 1), (6, 1)]


def test_old_dialect_profiler_step_in_operator_category(tmp_path):
    ev = [x("ProfilerStep#5", 0, 10, cat="Operator"), x("ProfilerStep#6", 10, 10, cat="Operator")]
    assert [s.number for s in find_steps(table_of(tmp_path, ev))] == [5, 6]


def test_last_step_ends_at_the_later_of_cpu_end_and_its_gpu_work(tmp_path):
    ev = [x("ProfilerStep#1", 0, 100), x("ProfilerStep#2", 100, 50),
          x("cudaLaunchKernel", 120, 5, cat="cuda_runtime", correlation=9),
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 140, "dur": 300,
           "args": {"correlation": 9, "stream": 7}}]
    st = find_steps(table_of(tmp_path, ev))
    assert st[-1].cpu_end_ns == 150_000 and st[-1].end_ns == 440_000


def test_last_step_without_gpu_work_ends_at_cpu_end(tmp_path):
    st = find_steps(table_of(tmp_path, [x("ProfilerStep#0", 0, 10)]))
    assert len(st) == 1 and st[0].end_ns == 10_000 and st[0].last


def test_dataloader_marker_fallback_with_warning(tmp_path):
    nxt = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    ev = [x(nxt, 0, 5, cat="cpu_op"), x(nxt, 100, 5, cat="cpu_op"), x(nxt, 210, 5, cat="cpu_op")]
    st = find_steps(table_of(tmp_path, ev))
    # a short marker only opens a step: three markers, two steps
    assert st.method == "dataloader" and [s.dur_ns for s in st] == [100_000, 110_000]
    assert any("DataLoader" in w for w in st.warnings)


def test_optimizer_marker_fallback_with_warning(tmp_path):
    ev = [x("Optimizer.step#SGD.step", 50, 5), x("Optimizer.step#SGD.step", 150, 5),
          x("Optimizer.zero_grad#SGD.zero_grad", 10, 1)]
    st = find_steps(table_of(tmp_path, ev))
    # one step per marker, starting where the capture's first step does (zero_grad at 10 µs,
    # the first event): the last ends with the thread's last event (the second step's end)
    assert st.method == "optimizer" and len(st) == 2
    assert [(s.start_ns, s.end_ns) for s in st] == [(0, 100_000), (100_000, 145_000)]
    assert st[1].last and st.warnings


def test_optimizer_markers_give_one_step_each_not_one_short(tmp_path):
    """Optimizer.step 30 µs into each 100 µs step; the capture starts with the first step."""
    ev = [x(f"aten::op{k}", 100 * k, 25) for k in range(5)]
    ev += [x("Optimizer.step#SGD.step", 100 * k + 30, 10) for k in range(5)]
    ev += [x("aten::tail", 100 * k + 45, 55) for k in range(5)]
    st = find_steps(table_of(tmp_path, ev))
    assert st.method == "optimizer" and len(st) == 5
    assert [s.dur_ns for s in st] == [100_000] * 5


def test_optimizer_markers_after_set_up_are_bounded_by_the_markers(tmp_path):
    ev = [x("set_up", 0, 10)] + [x("Optimizer.step#SGD.step", 1000 + 100 * k, 10)
                                 for k in range(3)]
    st = find_steps(table_of(tmp_path, ev))
    assert [s.dur_ns for s in st] == [100_000, 100_000]


def test_user_regex_overrides_and_warns(tmp_path):
    ev = [x("ProfilerStep#1", 0, 100), x("## iteration ##", 0, 40), x("## iteration ##", 50, 40),
          x("## iteration ##", 100, 40)]
    st = find_steps(table_of(tmp_path, ev), step_regex=r"^## iteration ##$")
    assert st.method == "regex" and len(st) == 3 and st.warnings
    with pytest.raises(ValueError):
        find_steps(table_of(tmp_path, ev), step_regex="(")


def test_no_marker_is_the_whole_capture_never_silently(tmp_path):
    ev = [x("aten::mm", 10, 1000, cat="cpu_op"), x("aten::add", 1500, 100, cat="cpu_op"),
          x("aten::mul", 0, 5000, cat="cpu_op", tid=2)]   # a busier side thread launches nothing
    st = find_steps(table_of(tmp_path, ev))
    assert st.method == "whole_capture" and len(st) == 1
    s = st[0]
    assert s.last and s.name == "(whole capture)" and (s.start_ns, s.end_ns) == (0, 5_000_000)
    assert "the step was taken to be the whole capture" in st.warnings[0]
    assert "prof.step()" in st.warnings[0] and "capture harness" in st.warnings[0]


def test_no_host_op_at_all_gives_no_step(tmp_path):
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 5,
           "args": {"stream": 7}}]
    st = find_steps(table_of(tmp_path, ev))
    assert len(st) == 0 and st.method == "none" and "no host op" in st.warnings[0]


def test_single_optimizer_marker_is_not_a_repeating_marker(tmp_path):
    st = find_steps(table_of(tmp_path, [x("Optimizer.step#SGD.step", 0, 5)]))
    assert st.method == "whole_capture" and st.warnings


def test_repeated_top_level_annotation_is_the_step(tmp_path):
    ev = [x("## forward ##", 0, 100), x("## backward ##", 100, 200), x("## forward ##", 400, 100),
          x("## backward ##", 500, 200), x("## forward ##", 800, 100), x("## backward ##", 900, 50),
          # nested annotations repeat more often but are not top level
          *[x("inner", t, 5) for t in (10, 20, 410, 420, 810, 820)],
          x("nccl:all_reduce", 1000, 5), x("nccl:all_reduce", 1010, 5), x("nccl:all_reduce", 1020, 5),
          x("aten::mm", 300, 10, cat="cpu_op")]
    st = find_steps(table_of(tmp_path, ev))
    assert st.method == "annotation" and [s.name for s in st] == ["## forward ##"] * 2
    assert [(s.start_ns, s.end_ns) for s in st] == [(0, 400_000), (400_000, 800_000)]
    assert "'## forward ##' (3 occurrences" in st.warnings[0] and "prof.step()" in st.warnings[0]


def test_markers_on_two_threads_keep_the_busier(tmp_path):
    ev = [x("ProfilerStep#1", 0, 10), x("ProfilerStep#2", 10, 10), x("ProfilerStep#3", 20, 10),
          x("ProfilerStep#9", 5, 10, tid=2)]
    st = find_steps(table_of(tmp_path, ev))
    assert [s.number for s in st] == [1, 2, 3] and "several threads" in st.warnings[0]


def test_shared_trace_steps():
    p = SHARED / "hta" / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    if not p.exists():
        pytest.skip(f"shared traces not present at {SHARED}")
    st = find_steps(build_table(load_trace(p)))
    assert [s.number for s in st] == [101, 102, 103, 104, 105]
    assert st[2].dur_us == pytest.approx(95728.6, abs=1)


# ------------------------------------------------------------------ broken markers

def test_markers_at_one_start_time_give_no_step(tmp_path):
    ev = [x(f"ProfilerStep#{n}", 100, 50 + n) for n in range(4)]
    st = find_steps(table_of(tmp_path, ev))
    assert len(st) == 0 and st.method == "none"
    assert st.warnings == ["dropped 4 step(s) whose marker shares its start time with another "
                           "marker (events 0, 1, 2, 3)", "no step of positive length remains"]


def test_two_zero_length_profiler_steps_give_no_step(tmp_path):
    st = find_steps(table_of(tmp_path, [x("ProfilerStep#1", 0, 0), x("ProfilerStep#2", 40, 0)]))
    assert len(st) == 0 and "of zero length (events 0, 1)" in st.warnings[0]


def test_zero_length_step_marker_is_dropped_without_stretching_its_neighbours(tmp_path):
    ev = [x("ProfilerStep#1", 100, 80), x("ProfilerStep#2", 200, 0), x("ProfilerStep#3", 300, 90),
          x("ProfilerStep#4", 300, 90), x("ProfilerStep#5", 450, 40)]
    st = find_steps(table_of(tmp_path, ev))
    assert [(s.number, s.start_ns, s.end_ns) for s in st] == \
        [(1, 0, 100_000), (5, 350_000, 390_000)]  # ns from the first event
    assert st.warnings == [
        "dropped 2 step(s) whose marker shares its start time with another marker (events 2, 3)",
        "dropped 1 step(s) whose marker is of zero length (events 1)"]


def test_zero_length_short_markers_still_open_steps(tmp_path):
    nxt = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    st = find_steps(table_of(tmp_path, [x(nxt, t, 0, cat="cpu_op") for t in (0, 100, 250)]))
    assert [s.dur_ns for s in st] == [100_000, 150_000]


@settings(max_examples=60, deadline=None)
@given(hst.lists(hst.tuples(hst.integers(0, 50), hst.integers(0, 30)), min_size=1, max_size=8),
       hst.sampled_from(["ProfilerStep#{}", "Optimizer.step#SGD.step"]))
def test_every_step_has_positive_length_and_steps_never_overlap(markers, name):
    events = [x(name.format(k), ts, dur) for k, (ts, dur) in enumerate(markers)]
    raw = RawTrace(path=Path("t.json"), events=events, metadata={},
                   ts_ns=np.array([ts * 1000 for ts, _ in markers], dtype=np.int64))
    steps = find_steps(build_table(raw))
    assert all(s.dur_ns > 0 for s in steps)
    assert all(a.end_ns <= b.start_ns for a, b in zip(steps, steps[1:]))
    assert bool(steps) or steps.warnings


def test_duplicated_marker_events_count_once(tmp_path):
    ev = [x("ProfilerStep#1", 0, 100), x("ProfilerStep#2", 100, 90)]
    st = find_steps(table_of(tmp_path, ev + [dict(e) for e in ev]))
    assert [(s.number, s.dur_ns) for s in st] == [(1, 100_000), (2, 90_000)]
    assert st.warnings == ["ignored 2 duplicate step marker(s) (same name, start and end as "
                           "another) (events 2, 3)"]
