"""The planner verbs run as a user runs them (subprocesses): whatif, sweep, ceiling, plan,
validate, ledger, fixes, on the reference model, a hand-written CPU model, a real CPU run of
the capture harness and a real GPU trace; bad input exits 2 with one line."""
from __future__ import annotations

import json

import pytest
import yaml

from stepsim.scenarios import REFERENCE
from tests.conftest import run_cli, shared_traces

QUICK = ("--steps", "10", "--warmup", "3", "--jobs", "1")
CASE = str(REFERENCE / "case_study.yaml")


@pytest.fixture
def cpu_yaml(tmp_path):
    p = tmp_path / "cpu.yaml"
    p.write_text(yaml.safe_dump({
        "meta": {"name": "cpu", "sources": {"loader.produce": "assumed"}},
        "loader": {"num_workers": 0, "produce": {"mean_us": 10000, "cv": 0.1}, "host_cores": 8},
        "host": {"ops": [{"kind": "next_batch"}, {"kind": "cpu", "dur_us": 4000}]}}))
    return p


def _ok(r):
    assert r.returncode == 0, r.stderr
    return r


def test_fixes_lists_every_fix():
    from stepsim.scenarios.fixes import FIXES

    out = json.loads(_ok(run_cli("fixes", "--json")).stdout)
    assert set(out) == set(FIXES) and out["mixed_precision"]["arguments"]["factor"]["required"] is True
    # typed: a default is a JSON number or null, never its string spelling
    args = [a for f in out.values() for a in f["arguments"].values()]
    assert all(not isinstance(a.get("default"), str) or a["type"] == "str" for a in args)
    assert any(a.get("default") is None and "default" in a for a in args)
    assert "cuda_graphs" in _ok(run_cli("fixes")).stdout


def test_plan_reference_case_study(tmp_path):
    saved = tmp_path / "chain.yaml"
    r = _ok(run_cli("plan", CASE, *QUICK, "--draws", "0", "--json", "--save-scenario",
                    str(saved)))
    doc = json.loads(r.stdout)
    assert [m["fix"].split("(")[0] for m in doc["moves"]] == [
        "fix more_workers", "fix pin_memory", "fix cuda_graphs", "fix fused_elementwise"]
    assert doc["baseline"]["mean_step_ms"] == pytest.approx(380, rel=0.03)
    assert doc["moves"][-1]["mean_step_ms"] == pytest.approx(166, rel=0.02)
    assert doc["moves"][-1]["next_bottleneck"] == "compute:gemm"
    assert doc["moves"][-1]["largest_ceiling_component"] == "compute:gemm"
    assert "numerics" in doc["stop"]
    r = _ok(run_cli("whatif", CASE, "--scenario", str(saved), *QUICK, "--draws", "0",
                    "--json"))
    assert json.loads(r.stdout)["speedup"] == pytest.approx(doc["speedup"], rel=1e-6)
    text = _ok(run_cli("plan", CASE, *QUICK, "--draws", "2")).stdout
    assert "in 4 moves" in text and "P10 / P50 / P90" in text and "stop:" in text


def test_whatif_ops_in_order(cpu_yaml, tmp_path):
    saved = tmp_path / "after.json"
    r = _ok(run_cli("whatif", str(cpu_yaml), "--set", "loader.num_workers=1", "--fix",
                    "more_workers:workers=4", "--scale", "0.5", "lane=host,kind=cpu",
                    *QUICK, "--draws", "4", "--json", "--save-model", str(saved)))
    doc = json.loads(r.stdout)
    sc = doc["scenario"]
    assert sc["what"] == ("set loader.num_workers=1; fix more_workers(workers=4); "
                          "scale lane=host,kind=cpu x0.5")
    assert sc["p10_step_ms"] <= sc["mean_step_ms"] <= sc["p90_step_ms"]
    assert doc["baseline"]["bottleneck"] == "input"
    assert json.loads(saved.read_text())["loader"]["num_workers"] == 4
    text = _ok(run_cli("whatif", str(cpu_yaml), "--set", "loader.num_workers=2", *QUICK)).stdout
    assert "speed-up" in text and "bottleneck" in text and "Monte Carlo" in text


def test_sweep_table_knee_plot(cpu_yaml, tmp_path):
    plot = tmp_path / "sweep.png"
    r = _ok(run_cli("sweep", str(cpu_yaml), "loader.num_workers=0,1,2,3,4",
                    "loader.prefetch_factor=1,2", *QUICK, "--json", "--plot", str(plot)))
    doc = json.loads(r.stdout)
    # (0 workers, prefetch_factor 1) is left out, with a warning: PyTorch refuses it
    assert len(doc["points"]) == 9 and "1 grid point(s) left out" in r.stderr
    assert doc["knees"]["loader.num_workers"]["value"] == 3
    assert plot.stat().st_size > 1000
    text = _ok(run_cli("sweep", str(cpu_yaml), "loader.num_workers=0,2,4", *QUICK)).stdout
    assert "knee of loader.num_workers" in text


def test_ceiling_text_and_plot(tmp_path):
    plot = tmp_path / "c.svg"
    text = _ok(run_cli("ceiling", CASE, *QUICK, "--plot", str(plot))).stdout
    assert "input pipeline" in text and "kernel-sum / step-wall" in text
    assert plot.read_text().lstrip().startswith("<?xml")


def test_validate_and_ledger_on_a_cpu_run(tmp_path, cpu_run_nw0, cpu_run_nw1):
    model = tmp_path / "m.json"
    _ok(run_cli("calibrate", str(cpu_run_nw0 / "trace.json.gz"), "--sidecar",
                str(cpu_run_nw0 / "sidecar.json"), "-o", str(model)))
    ledger = tmp_path / "ledger.jsonl"
    for nw, run in ((0, cpu_run_nw0), (1, cpu_run_nw1)):
        r = _ok(run_cli("validate", str(model), str(run / "trace.json.gz"), "--set",
                        f"loader.num_workers={nw}", *QUICK, "--draws", "4", "--ledger",
                        str(ledger), "--label", f"nw{nw}", "--json"))
        rec = json.loads(r.stdout)[0]
        assert rec["label"] == f"nw{nw}" and rec["measured_mean_us"] > 0
    doc = json.loads(_ok(run_cli("ledger", str(ledger), "--json")).stdout)
    # nw0 is the calibration setting (in-sample); nw1 is scored unless its run was re-measured
    # under outside load (the machine may be shared), which is counted apart
    summary = doc["summary"]
    assert summary["n_in_sample"] == 1
    assert summary["n"] + summary["n_outside_load"] == 1
    assert summary["n_intervals"] == summary["n"]
    text = _ok(run_cli("ledger", str(ledger))).stdout
    assert "1 in-sample record" in text
    if summary["n"]:
        assert "median |error|" in text and "interval coverage" in text
    else:
        assert "re-measured under outside load" in text


def test_validate_on_a_real_gpu_trace(tmp_path):
    pair = shared_traces() / "kineto" / "515e6115_rec2020-12-02"
    model = tmp_path / "resnet.json"
    _ok(run_cli("calibrate", str(pair / "resnet50_num_workers_0"), "-o", str(model)))
    ledger = tmp_path / "l.jsonl"
    r = _ok(run_cli("validate", str(model),
                    str(pair / "resnet50_num_workers_4" / "worker0.pt.trace.json.gz"),
                    "--fix", "more_workers:workers=4", "--set", "loader.host_cores=8",
                    "--steps", "4", "--warmup", "2", "--draws", "2", "--ledger", str(ledger)))
    assert "prediction vs re-measured" in r.stdout
    assert len(ledger.read_text().splitlines()) == 1


@pytest.mark.parametrize("args, named", [
    (("whatif", CASE, "--set", "loader.num_worker=4"), "num_worker"),
    (("whatif", CASE, "--fix", "warp_speed"), "warp_speed"),
    (("whatif", CASE, "--fix", "pin_memory:sped=3"), "sped"),
    (("whatif", CASE, "--scale", "0.5", "category=attention"), "selects nothing"),
    (("whatif", CASE), "at least one"),
    (("sweep", CASE, "loader.num_workers"), "PATH=V1,V2"),
    (("plan", CASE, "--fix-arg", "mixed_precision:fctor=0.5"), "fctor"),
    (("ledger", "/nonexistent/ledger.jsonl"), "no such ledger file"),
    (("whatif", "/nonexistent/model.json", "--set", "a=1"), "no such StepModel file"),
])
def test_bad_input_exits_2_with_one_line(args, named):
    r = run_cli(*args, *QUICK[:4]) if args[0] in ("whatif", "sweep", "plan") else run_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in r.stderr


def test_bad_scenario_file_exits_2(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("ops:\n  - {op: scale, select: {category: gemm}, facter: 0.5}\n")
    r = run_cli("whatif", CASE, "--scenario", str(p), *QUICK)
    assert r.returncode == 2 and "facter" in r.stderr and str(p) in r.stderr


def test_sweep_shows_intervals_only_when_drawn():
    base = ("sweep", str(REFERENCE / "input_pipeline_a.yaml"), "loader.num_workers=1,2",
            "--steps", "6", "--warmup", "2")
    assert "P10 / P50 / P90" not in _ok(run_cli(*base)).stdout
    assert "P10 / P50 / P90" in _ok(run_cli(*base, "--draws", "3")).stdout
