"""``calibrate --steps A:B``: the trace read as a stream keeping only the steps asked for and
their neighbours (calibration.stream). The events kept do not depend on where the blocks
split the file; the fit uses only steps A to B-1, whose measured times are the full read's;
a range outside the trace is refused in one line."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from stepsim.fit import calibrate
from stepsim.calibration.events import build_table
from stepsim.calibration.stream import load_steps
from stepsim.limits import parse_steps
from stepsim.calibration.trace_io import load_trace
from stepsim.simcore.errors import InputError, StepsimError
from tests.conftest import run_cli, shared_traces

RESNET = "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0/worker0.pt.trace.json.gz"
DLRM0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"


def same_table(a, b) -> list[str]:
    """The columns (and keys) in which two tables differ."""
    bad = [c for c in a._COLUMNS if not np.array_equal(getattr(a, c), getattr(b, c),
                                                        equal_nan=getattr(a, c).dtype == float)]
    return bad + [k for k in ("str_ids", "metadata", "base_ns") if getattr(a, k) != getattr(b, k)]


@pytest.mark.parametrize("text,want", [("10:20", (10, 20)), (":5", (None, 5)),
                                       ("3:", (3, None)), (":", (None, None))])
def test_parse_steps(text, want):
    assert parse_steps(text) == want


@pytest.mark.parametrize("text", ["10", "a:b", "5:5", "9:3", "-1:4", "1.5:3"])
def test_parse_steps_refuses(text):
    with pytest.raises(ValueError):
        parse_steps(text)


@pytest.mark.parametrize("name,a,b", [(RESNET, 6, 9), (DLRM0, None, None)])
def test_the_events_kept_do_not_depend_on_the_blocks(name, a, b):
    p = shared_traces() / name
    whole = build_table(load_steps(p, a, b))
    small = build_table(load_steps(p, a, b, block=64 * 1024))
    assert len(small) == len(whole) > 0
    assert same_table(small, whole) == []


def test_open_range_keeps_every_event():
    """``--steps :`` keeps the whole trace: the table of the full read."""
    p = shared_traces() / DLRM0
    assert same_table(build_table(load_steps(p, None, None, block=256 * 1024)),
                      build_table(load_trace(p))) == []


def test_steps_fit_only_the_steps_asked_for_with_their_measured_times():
    p = shared_traces() / RESNET
    full = calibrate(p)
    part = calibrate(p, steps=(6, 9))
    assert part.meta.steps_used == [6, 7, 8]
    assert part.replay.steps == [6, 7, 8]
    for n, us in zip(part.meta.steps_used, part.meta.measured_step_us):
        assert us == full.meta.measured_step_us[full.meta.steps_used.index(n)]


def test_a_split_inside_a_string_or_a_nested_object_is_not_taken(tmp_path):
    """Text that looks like the end of an event (``},``) inside a name or nested args: the
    stream reads the same events as the whole file, whatever the block size."""
    evs = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}}]
    for n in range(4):
        t = 1000.0 * n
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1,
                    "tid": 1, "ts": t, "dur": 1000.0})
        evs.append({"ph": "X", "cat": "cpu_op", "name": 'odd }, {"ph": "X"} name', "pid": 1,
                    "tid": 1, "ts": t + 10, "dur": 5, "args": {"a": [{"b": 1}, {"c": "},"}]}})
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": evs,
                                            "deviceProperties": [{"id": 0}]}).encode()))
    ref = build_table(load_trace(p))
    for block in (7, 50, 333, 1 << 20):
        got = build_table(load_steps(p, None, None, block=block))
        assert same_table(got, ref) == []
    kept = build_table(load_steps(p, 2, 3, block=50))   # steps 1 to 3 as context
    assert sorted(set(kept.names.tolist()) - {"process_name"}) == [
        "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3", 'odd }, {"ph": "X"} name']


@pytest.mark.parametrize("steps,says", [((12, 14), "outside the trace's steps, 5 to 10"),
                                        ((2, 7), "outside the trace's steps, 5 to 10")])
def test_a_range_outside_the_trace_is_refused(steps, says):
    with pytest.raises(InputError, match=says):
        calibrate(shared_traces() / RESNET, steps=steps)


def test_steps_with_a_step_regex_or_a_folder_is_refused():
    with pytest.raises(StepsimError, match="--step-regex"):
        calibrate(shared_traces() / RESNET, steps=(6, 9), step_regex="x")
    with pytest.raises(InputError, match="one trace file"):
        calibrate(shared_traces() / "param/dlrm_kineto", steps=(1, 2))


def test_cli_steps(tmp_path):
    p = shared_traces() / RESNET
    r = run_cli("calibrate", str(p), "--steps", "6:9", "-o", str(tmp_path / "m.json"))
    assert r.returncode == 0, r.stderr
    assert "calibrated 3 steps" in r.stdout
    assert json.loads((tmp_path / "m.json").read_text())["meta"]["steps_used"] == [6, 7, 8]
    r = run_cli("calibrate", str(p), "--steps", "40:50", "-o", str(tmp_path / "n.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "5 to 10" in r.stderr
    assert not (tmp_path / "n.json").exists()
    r = run_cli("calibrate", str(p), "--steps", "9:3", "-o", str(tmp_path / "n.json"))
    assert r.returncode == 2 and "B must be above A" in r.stderr
