"""The CLI run as a user runs it (a subprocess): the main verbs and bad input."""
from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import run_cli


def test_calibrate_simulate_whatif(tmp_path, cpu_run_nw1):
    out = tmp_path / "model.json"
    r = run_cli("calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--sidecar",
                str(cpu_run_nw1 / "sidecar.json"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "calibrated 6 steps" in r.stdout
    assert json.loads(out.read_text())["loader"]["num_workers"] == 1
    r = run_cli("simulate", str(out), "--steps", "20")
    assert r.returncode == 0, r.stderr
    assert "step time mean" in r.stdout and "bottleneck" in r.stdout
    r = run_cli("simulate", str(out), "--steps", "20", "--json")
    assert json.loads(r.stdout)["mean_step_ms"] > 0


def _trace_no_steps() -> bytes:
    # step markers that cannot be steps (zero length); a trace with no marker at all is one
    # window (tests/test_real_shapes.py)
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
           "ts": 10.0 * n, "dur": 0.0} for n in range(2)]
    return json.dumps({"traceEvents": ev}).encode()


BAD = {
    "empty.json": b"",
    "notjson.json": b"this is not json",
    "noevents.json": b'{"schemaVersion": 1}',
    "nosteps.json": _trace_no_steps(),
    "truncated.json.gz": gzip.compress(b'{"traceEvents": [{"ph": "X", "ts": 1}]}')[:20],
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_calibrate_bad_input(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(BAD[name])
    out = tmp_path / "model.json"
    out.write_text("keep me")
    r = run_cli("calibrate", str(p), "-o", str(out))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert p.read_bytes() == BAD[name], "input unchanged"
    assert out.read_text() == "keep me", "output untouched on failure"


def test_missing_file(tmp_path):
    p = tmp_path / "nope.json"
    r = run_cli("calibrate", str(p), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2 and str(p) in r.stderr and "Traceback" not in r.stderr
    r = run_cli("simulate", str(p))
    assert r.returncode == 2 and str(p) in r.stderr and "Traceback" not in r.stderr


def test_simulate_rejects_a_trace(tmp_path, cpu_run_nw1):
    r = run_cli("simulate", str(cpu_run_nw1 / "sidecar.json"))
    assert r.returncode == 2 and "capture sidecar" in r.stderr


def test_bad_step_regex_and_unwritable_output(tmp_path, cpu_run_nw1):
    r = run_cli("calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--step-regex", "(", "-o",
                str(tmp_path / "m.json"))
    assert r.returncode == 2 and "--step-regex" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("demo", "--quick", "--out", "/proc/stepsim-cannot-write-here")
    assert r.returncode == 2 and "/proc/stepsim-cannot-write-here" in r.stderr
    assert "Traceback" not in r.stderr


def test_calibrate_reports_its_replay(tmp_path, cpu_run_nw1):
    r = run_cli("calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--sidecar",
                str(cpu_run_nw1 / "sidecar.json"), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 0 and "replay of the calibrated baseline" in r.stdout
    assert "at the capture's own host speed" in r.stdout      # which speed it is at


def test_simulate_names_what_it_was_given(cpu_run_nw1):
    r = run_cli("simulate", str(cpu_run_nw1 / "trace.json.gz"))
    assert r.returncode == 2 and "profiler trace" in r.stderr
    r = run_cli("simulate", "scenarios/reference/case_study_fixes.yaml")
    assert r.returncode == 2 and "scenario file" in r.stderr


A = "scenarios/reference/input_pipeline_a.yaml"


@pytest.mark.parametrize("args,says", [
    (("simulate", A, "--seed", "-1"), "--seed"),
    (("simulate", A, "--steps", "0"), "--steps"),
    (("whatif", A, "--set", "loader.num_workers=1000000"), "less than or equal to 1024"),
    (("whatif", A, "--set", "loader.num_workers=1:4"), "num_workers"),
    (("whatif", A, "--scale", "0", "all"), "takes no time"),
    (("sweep", A, "loader.num_workers=1,2", "--plot", "curve.xyz"), "plot"),
    (("plan", A, "--min-gain", "nan"), "--min-gain"),
])
def test_bad_arguments_exit_2_without_traceback(args, says):
    r = run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and "Traceback" not in r.stderr


def test_calibrate_never_overwrites_its_input(tmp_path, cpu_run_nw1):
    side = tmp_path / "sidecar.json"
    side.write_bytes((cpu_run_nw1 / "sidecar.json").read_bytes())
    before = side.read_bytes()
    r = run_cli("calibrate", str(cpu_run_nw1 / "trace.json.gz"), "--sidecar", str(side),
                "-o", str(side))
    assert r.returncode == 2 and "input" in r.stderr
    assert side.read_bytes() == before


@pytest.mark.parametrize("text,says", [
    ("loader: {num_workers: .inf}\nhost: {ops: [{kind: next_batch}]}", "num_workers"),
    ("loader: {num_workers: 2}", "no ops"),
    ("host: {ops: [{kind: cpu, dur_us: .inf}]}", "finite"),
    ("""host: {ops: [{kind: launch, task: a}, {kind: launch, task: b}]}
device: {streams: {s: [{id: a, stream: s, dur_us: 1, waits: [b]}, {id: b, stream: s, dur_us: 1}]}}""",
     "for itself"),
])
def test_models_that_cannot_run_are_refused(tmp_path, text, says):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    r = run_cli("simulate", str(p))
    assert r.returncode == 2 and says in r.stderr and str(p) in r.stderr, r.stderr


def test_a_named_pipe_without_writer_is_empty_not_a_hang(tmp_path):
    import os

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    for args in (("calibrate", str(fifo), "-o", str(tmp_path / "m.json")),
                 ("simulate", str(fifo))):
        r = run_cli(*args)   # run_cli has a timeout: a hang fails the test
        assert r.returncode == 2 and "empty" in r.stderr and str(fifo) in r.stderr


def test_calibrate_reads_a_pipe_once(tmp_path):
    import subprocess
    import sys

    from tests.test_window_replay import backlogged_trace

    trace = backlogged_trace(tmp_path / "t.json")
    out = tmp_path / "m.json"
    cmd = (f"{sys.executable} -m stepsim calibrate <(cat {trace}) -o {out}")
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path.parent), env=_env())
    assert r.returncode == 0, r.stderr
    assert "calibrated 3 steps" in r.stdout and out.exists()


def _env():
    import os

    return dict(os.environ)


def test_outputs_never_replace_a_device_or_an_input(tmp_path):
    import os
    import stat

    from tests.conftest import REPO
    ref = REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"
    model = tmp_path / "m.yaml"
    model.write_bytes(ref.read_bytes())
    r = run_cli("simulate", str(model), "--steps", "4", "--warmup", "1", "--chrome-trace",
                os.devnull)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode), "/dev/null is still a device"
    for args in (("simulate", str(model), "--chrome-trace", str(model)),
                 ("whatif", str(model), "--set", "loader.num_workers=2", "--draws", "0",
                  "--save-model", str(model))):
        r = run_cli(*args)
        assert r.returncode == 2 and "is an input file" in r.stderr, r.stderr
        assert model.read_bytes() == ref.read_bytes()
    r = run_cli("calibrate", str(tmp_path), "-o", str(tmp_path / "model.json"))
    assert r.returncode == 2 and "inside the input folder" in r.stderr
    r = run_cli("calibrate", str(model), "-o", str(tmp_path / "sub") + "/")
    assert r.returncode == 2 and "names a folder" in r.stderr


def test_absurd_values_and_odd_names_give_one_line(tmp_path):
    data = json.loads(json.dumps({"host": {"ops": [{"kind": "cpu", "dur_us": 1e308}]}}))
    p = tmp_path / "odd\nname.json"
    p.write_text(json.dumps(data))
    r = run_cli("simulate", str(p))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "odd\\nname.json" in lines[0]
    assert "less than or equal to" in lines[0]


def test_a_ledger_must_be_a_regular_file(tmp_path):
    import os

    from tests.conftest import REPO
    fifo = tmp_path / "ledger.jsonl"
    os.mkfifo(fifo)
    r = run_cli("validate", str(REPO / "scenarios" / "reference" / "input_pipeline_a.yaml"),
                str(tmp_path / "missing.json"), "--ledger", str(fifo))
    assert r.returncode == 2 and "must be a regular file" in r.stderr


@pytest.mark.parametrize("host", [5, "x", [1]])
def test_a_model_whose_host_is_not_an_object_gives_one_line(tmp_path, host):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"host": host}))
    r = run_cli("simulate", str(p))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and str(p) in lines[0], r.stderr


def test_demo_takes_o_as_the_other_verbs_do():
    """Every verb that writes takes ``-o``; the demo took only ``--out``, and a user's
    ``stepsim demo -o DIR`` was refused as an unrecognized argument."""
    from stepsim.cli_args import parser
    assert parser().parse_args(["demo", "-o", "d1"]).out == "d1"
