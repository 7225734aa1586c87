"""Bad input a hostile or careless user gives (findings in ../findings/breaker.md): each is one
line on stderr naming the file and what is wrong, exit code 2, no traceback, nothing written.
The traces are copies of a real one (``../shared/traces``), mutated; the originals are only
read."""
from __future__ import annotations

import json
import os

import pytest

from stepsim.cli import main
from tests.conftest import shared_traces

DLRM0 = "param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"


def _refused(capsys, argv, *words) -> str:
    """Run the CLI in this process: exit 2 and one line on stderr holding ``words``."""
    assert main([str(a) for a in argv]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1 and err[0].startswith("stepsim: error: "), err
    for w in words:
        assert w in err[0], err[0]
    return err[0]


@pytest.fixture(scope="module")
def trace_text() -> str:
    return (shared_traces() / DLRM0).read_text()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, trace_text) -> str:
    d = tmp_path_factory.mktemp("model")
    (d / "t.json").write_text(trace_text)
    assert main(["calibrate", str(d / "t.json"), "-o", str(d / "m.json")]) == 0
    return str(d / "m.json")


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("where", ["events", "args", "args_object", "metadata"])
def test_json_nested_too_deep_is_refused_not_a_recursion_error(capsys, tmp_path, trace_text,
                                                               where):
    """msgspec (the columnar reader) raised RecursionError on 100,000 nested arrays; the
    general reader says the JSON is nested too deep."""
    if where == "events":
        text = '{"traceEvents": ' + DEEP + "}"
    elif where == "args":
        text = trace_text.replace('"args": {', '"args": {"deep": ' + DEEP + ", ", 1)
    elif where == "args_object":
        deep = '{"a":' * 5000 + "1" + "}" * 5000
        text = trace_text.replace('"args": {', '"args": {"deep": ' + deep + ", ", 1)
    else:
        text = trace_text.rstrip()[:-1] + ', "extra": ' + DEEP + "}"
    p = tmp_path / "deep.json"
    p.write_text(text)
    _refused(capsys, ["calibrate", p, "-o", tmp_path / "m.json"], "deep.json",
             "not valid JSON: depth limit exceeded")
    assert not (tmp_path / "m.json").exists()


def test_symbolic_link_loop_and_broken_link_are_named(capsys, tmp_path, model_path):
    """A loop raised RuntimeError from pathlib (the outputs-over-inputs check), then was
    called 'no such file'; a broken link was 'no such file' too."""
    loop, other, broken = tmp_path / "loop.json", tmp_path / "other.json", tmp_path / "b.json"
    os.symlink(other, loop)
    os.symlink(loop, other)
    os.symlink(tmp_path / "gone.json", broken)
    for argv in (["calibrate", loop, "-o", tmp_path / "m.json"], ["simulate", loop],
                 ["ledger", loop], ["validate", model_path, loop, "--steps", "5"],
                 ["whatif", loop, "--set", "loader.num_workers=1"]):
        _refused(capsys, argv, "loop.json: a loop of symbolic links")
    for argv in (["calibrate", broken, "-o", tmp_path / "m.json"], ["simulate", broken]):
        _refused(capsys, argv, f"b.json: broken symbolic link (to {tmp_path / 'gone.json'})")
    assert not (tmp_path / "m.json").exists()


def _edited_model(model_path, tmp_path, edit) -> str:
    data = json.loads(open(model_path).read())
    edit(data)
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(data))
    return str(p)


def test_hand_edited_model_refs_and_schema(capsys, tmp_path, model_path):
    """A gradient ready after a task the model lacks loaded and failed only in a bucket
    what-if, without the file's name; a schema_version below 1 loaded as an old schema."""
    def dangling(d):
        d["comm"]["grad_params"][0]["ready_task"] = "nope"
    p = _edited_model(model_path, tmp_path, dangling)
    _refused(capsys, ["whatif", p, "--set", "comm.bucket_cap_mb=50", "--steps", "5"],
             "edited.json", "is ready after unknown task 'nope'")
    for v in (0, -1):
        p = _edited_model(model_path, tmp_path, lambda d: d.update(schema_version=v))
        _refused(capsys, ["simulate", p, "--steps", "5"], "edited.json",
                 f"schema_version {v} is no stepsim schema")


@pytest.mark.parametrize("op", [["--scale", "0.5", "category=gemm,category=conv"],
                                ["--fix", "more_workers:workers=2,workers=3"]])
def test_a_key_given_twice_is_refused(capsys, model_path, op):
    """The last value silently won (category=conv alone, workers=3)."""
    _refused(capsys, ["whatif", model_path, *op, "--steps", "5"], "is given twice")


@pytest.mark.parametrize("ts", [0, -7])
def test_a_few_far_timestamps_are_dropped_and_counted(capsys, tmp_path, trace_text, ts):
    """Three events with ts 0 or -7 among epoch-scale ones refused the whole trace ('a trace
    may span at most 30 days'), while ts 1e300 or 'abc' were dropped and counted."""
    from stepsim.calibration.trace_io import load_trace

    data = json.loads(trace_text)
    ops = [i for i, e in enumerate(data["traceEvents"]) if e.get("cat") == "cpu_op"][:3]
    for i in ops:
        data["traceEvents"][i]["ts"] = ts
    p = tmp_path / "far.json"
    p.write_text(json.dumps(data))
    for columnar in (True, False):
        raw = load_trace(p, columnar=columnar)
        assert len(raw.events) == len(data["traceEvents"]) - 3
        said = [w for w in raw.warnings if "whose ts lies more than 15 days from the median" in w]
        assert len(said) == 1 and said[0].startswith(f"far.json: dropped 3 of ") and \
            f"first: event {ops[0]}: ts {ts} µs" in said[0], raw.warnings
    assert main(["calibrate", str(p), "-o", str(tmp_path / "m.json")]) == 0
    assert "whose ts lies more than 15 days" in capsys.readouterr().err


def test_timestamps_split_in_two_far_halves_are_still_refused(capsys, tmp_path, trace_text):
    data = json.loads(trace_text)
    ev = data["traceEvents"]
    for e in ev[len(ev) // 2:]:
        if "ts" in e:
            e["ts"] -= 40 * 86_400e6
    p = tmp_path / "split.json"
    p.write_text(json.dumps(data))
    _refused(capsys, ["calibrate", p, "-o", tmp_path / "m.json"], "split.json",
             "a trace may span at most 30 days")
