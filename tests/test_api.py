"""The Python API (``import stepsim``): the CLI's verbs as functions, typed results, errors
raised rather than exits; its documents are the CLI's ``--json`` output."""
from __future__ import annotations

import inspect
import json

import pytest

import stepsim
from stepsim import api
from stepsim.models.metrics import label
from stepsim.scenarios.transforms import FixOp, ScaleOp, SetOp
from stepsim.simcore.errors import InputError, ModelError, StepsimError
from tests.conftest import REPO, run_cli

A = str(REPO / "scenarios" / "reference" / "input_pipeline_a.yaml")
FAST = {"steps": 10, "warmup": 5, "jobs": 1}


def test_the_package_forwards_every_verb():
    for name in stepsim.__all__:
        assert getattr(stepsim, name) is getattr(api, name)
    # ``stepsim.report`` is the subpackage (an attribute once imported): that verb stays
    # ``stepsim.api.report``
    verbs = {n for n in api.__all__ if callable(getattr(api, n))} - {"operations", "report"}
    assert verbs <= set(stepsim.__all__), verbs - set(stepsim.__all__)
    with pytest.raises(AttributeError):
        stepsim.no_such_verb  # noqa: B018


def test_defaults_are_the_clis():
    """The API's defaults are the ones ``stepsim VERB --help`` states."""
    for verb, draws in (("whatif", 16), ("sweep", 0), ("plan", 16), ("validate", 16)):
        sig = inspect.signature(getattr(api, verb))
        assert sig.parameters["draws"].default == draws, verb
        assert sig.parameters["steps"].default is None and sig.parameters["warmup"].default == 20
        assert sig.parameters["seed"].default == 0 and sig.parameters["jobs"].default == 0
        r = run_cli(verb, "--help")
        assert f"default {draws}" in " ".join(r.stdout.split()), verb
        assert "standard error" in " ".join(r.stdout.split()), verb   # steps: chosen
    assert inspect.signature(api.sweep).parameters["knee_tol"].default == 0.05
    assert inspect.signature(api.plan).parameters["min_gain"].default == 0.02


def test_operations_in_order_and_in_every_form():
    ops = api.operations([("fix", "mixed_precision:factor=0.6"), SetOp(path="loader.pin_memory",
                                                                          value=True)],
                         set={"loader.num_workers": 4}, scale=(0.5, "category=gemm"))
    assert [type(o) for o in ops] == [FixOp, SetOp, SetOp, ScaleOp]
    assert ops[2].value == 4 and ops[3].factor == 0.5
    assert api.operations(set=["loader.num_workers=2", "loader.prefetch_factor=4"])[1].value == 4
    with pytest.raises(ModelError, match="--set"):
        api.operations(set="loader.num_workers")
    with pytest.raises(ModelError, match="unknown kind"):
        api.operations([("bogus", 1)])
    with pytest.raises(ModelError, match="set='loader.num_workers=4'"):
        api.whatif(A, "loader.num_workers=4")
    with pytest.raises(ModelError, match="pair"):
        api.operations([["set", "loader.num_workers=4"]])


def test_whatif_matches_the_cli_json():
    r = api.whatif(A, set="loader.num_workers=4", draws=0, **FAST)
    assert isinstance(r.scenario.mean_step_us, float) and r.speedup > 1
    cli = run_cli("whatif", A, "--set", "loader.num_workers=4", "--draws", "0", "--steps", "10",
                  "--warmup", "5", "--jobs", "1", "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == json.loads(json.dumps(r.to_dict()))


def test_errors_are_raised_not_exits(tmp_path):
    with pytest.raises(StepsimError, match="at least one"):
        api.whatif(A)
    with pytest.raises(InputError, match="nope.json"):
        api.simulate(tmp_path / "nope.json")
    with pytest.raises(StepsimError, match="given twice"):
        api.sweep(A, ["loader.num_workers=1,2", "loader.num_workers=3"])


def test_simulate_and_a_model_object(tmp_path):
    model = api.load_model(A)
    r = api.simulate(model, chrome_trace=tmp_path / "t.json", **{k: FAST[k] for k in
                                                                   ("steps", "warmup")})
    assert r.model is model and len(r.result.job_step_us) == 10
    assert r.to_dict()["mean_step_ms"] == pytest.approx(r.summary.mean_step_us / 1000)
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_frames(tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas (the 'frames' extra) is not installed")
    s = api.sweep(A, "loader.num_workers=1,2,4", plot=tmp_path / "s.png", **FAST)
    df = s.to_frame()
    assert isinstance(df, pd.DataFrame) and list(df["loader.num_workers"]) == [1, 2, 4]
    assert (df["mean_step_ms"] > 0).all() and (tmp_path / "s.png").stat().st_size > 0
    c = api.ceiling(A, **FAST).to_frame()
    assert {"key", "ceiling", "free_step_ms"} <= set(c.columns)
    w = api.whatif(A, fix="mixed_precision:factor=0.6", draws=0, **FAST).to_frame()
    assert list(w[""]) == ["baseline", "scenario"]
    p = api.plan(A, draws=0, max_moves=2, save_scenario=tmp_path / "p.yaml", **FAST)
    assert len(p.to_frame()) == len(p.plan.moves) + 1 and (tmp_path / "p.yaml").exists()
    assert list(p.to_frame()["move"]) == list(range(len(p.plan.moves) + 1))
    sim = api.simulate(A, steps=10, warmup=5).to_frame()
    assert list(sim.columns) == ["step", "step_ms", "rank0_ms"] and len(sim) == 10


def test_a_plan_without_moves_has_its_baseline_row():
    """The CLI shows row 0 (the baseline) when no move gains enough; the frame did not (an
    empty DataFrame with no columns)."""
    pytest.importorskip("pandas", reason="pandas (the 'frames' extra) is not installed")
    p = api.plan(A, draws=0, min_gain=50.0, **FAST)
    assert not p.plan.moves
    df = p.to_frame()
    assert list(df["fix"]) == ["(baseline)"] and df["speedup"][0] == 1.0
    assert df["mean_step_ms"][0] == pytest.approx(p.plan.baseline.mean_step_us / 1e3)


def test_whatif_prints_its_warnings():
    """``print(w)`` and ``repr(w)`` show the warnings, not only ``w.warnings``."""
    w = api.whatif(A, set="comm.latency_us=5", draws=0, **FAST)
    assert w.warnings
    for text in (str(w), repr(w)):
        assert text.startswith("WhatIf(set comm.latency_us=5: ")
        assert all(f"warning: {x}" in text for x in w.warnings)


def test_to_frame_without_pandas_says_how_to_get_it(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pandas(name, *a, **k):
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real(name, *a, **k)

    r = api.whatif(A, set={"loader.num_workers": 2}, draws=0, **FAST)
    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match="pip install"):
        r.to_frame()
    assert r.to_dict()["scenario"]["mean_step_ms"] > 0


def test_outputs_never_overwrite_inputs(tmp_path):
    model = tmp_path / "m.yaml"
    model.write_bytes(open(A, "rb").read())
    before = model.read_bytes()
    with pytest.raises(StepsimError, match="save_model .*input file"):
        api.whatif(model, set="loader.num_workers=2", save_model=model, draws=0, **FAST)
    with pytest.raises(StepsimError, match="plot .*input file"):
        api.ceiling(model, plot=model, **FAST)
    assert model.read_bytes() == before


def test_calibrate_and_validate_a_capture(tmp_path, cpu_run_nw1):
    """On a real CPU capture: the calibration's table and document, and a validation whose
    record is the CLI's."""
    cal = api.calibrate(cpu_run_nw1, output=tmp_path / "m.json")
    assert cal.window is None and len(cal.measured_step_us) == 6
    assert cal.to_dict()["measured_mean_ms"] == pytest.approx(cal.measured_mean_us / 1000)
    json.dumps(cal.to_dict())
    v = api.validate(tmp_path / "m.json", cpu_run_nw1, draws=0, label="same run", **FAST)
    cli = run_cli("validate", str(tmp_path / "m.json"), str(cpu_run_nw1), "--draws", "0",
                  "--label", "same run", "--steps", "10", "--warmup", "5", "--jobs", "1",
                  "--json")
    assert cli.returncode == 0, cli.stderr
    (doc,) = json.loads(cli.stdout)
    assert {**doc, "time": None} == {**json.loads(json.dumps(v.to_dict())), "time": None}
    pd = pytest.importorskip("pandas", reason="pandas (the 'frames' extra) is not installed")
    assert list(cal.to_frame().columns) == ["step", "measured_ms"] and len(cal.to_frame()) == 6
    assert isinstance(v.to_frame(), pd.DataFrame) and len(v.to_frame()) == 1


def test_a_validation_prints_its_score_in_a_line(tmp_path, cpu_run_nw1):
    """``print(v)`` gives the score in one line, then the warnings, as a what-if's does (it
    dumped the whole record and prediction, some 5,000 characters, a fresh user's)."""
    api.calibrate(cpu_run_nw1, output=tmp_path / "m.json")
    v = api.validate(tmp_path / "m.json", cpu_run_nw1, draws=4, label="same run", **FAST)
    r = v.record
    for text in (str(v), repr(v)):
        head = text.splitlines()[0]
        assert head.startswith("Validation(same run (in-sample): predicted ") and len(head) < 300
        assert f"error {r.error_pct:+.1f} %" in head and f"of {r.runs} run(s)" in head
        assert f"{r.measured_mean_us / 1e3:.1f} ms" in head and "P10-P90" in head
        assert all(f"warning: {x}" in text for x in v.warnings)
        assert len(text.splitlines()) == 1 + len(v.warnings)


@pytest.mark.parametrize("module,never", [
    ("stepsim.cli", ("stepsim.models", "stepsim.scenarios", "stepsim.report", "stepsim.results",
                     "stepsim.calibration")),
    ("stepsim.calibration.capture", ("stepsim.api", "stepsim.models.simulate",
                                     "stepsim.scenarios", "stepsim.report", "simpy")),
])
def test_what_an_import_loads(module, never):
    """``stepsim --help`` loads no simulator or planner (the API imports them when a verb
    runs), and the harness in a training script loads neither the API nor the simulator."""
    import subprocess
    import sys

    code = f"import sys, {module}; print('\\n'.join(sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = [m for m in r.stdout.split() if m.startswith(never)]
    assert not loaded, f"import {module} loads {loaded[:5]}"


def _bounded_verbs():
    """(verb, argument) for every count or fraction a verb of the API takes."""
    from stepsim.limits import COUNTS, FRACTIONS

    return [(v, n) for v in ("simulate", "whatif", "sweep", "ceiling", "plan", "validate",
                             "diagnose", "report")
            for n in inspect.signature(getattr(api, v)).parameters
            if n in COUNTS or n in FRACTIONS]


_VERB_ARGS = {"sweep": ("loader.num_workers=1,2",), "validate": ("no-trace.json",)}


@pytest.mark.parametrize("verb,name", _bounded_verbs())
def test_the_api_bounds_counts_as_the_cli_does(verb, name):
    """Each count and fraction is refused outside the CLI's bounds (one table,
    :mod:`stepsim.limits`) before any work, naming the argument; a bool or a string is not a
    number."""
    from stepsim.limits import COUNTS, ArgumentError

    lo, hi = COUNTS.get(name, (0, None))
    bad = [lo - 1 if name in COUNTS else -0.5, True, "3"]
    bad += [hi + 1] if hi is not None else []
    bad += [float("nan")] if name not in COUNTS else [2.0]
    call = getattr(api, verb)
    for value in bad:
        with pytest.raises(ArgumentError, match=f"^{name}: "):
            call(A, *_VERB_ARGS.get(verb, ()), **{name: value})
    assert issubclass(ArgumentError, StepsimError) and issubclass(ArgumentError, ValueError)


def test_bounds_are_the_clis_and_say_the_same():
    """The CLI and the API refuse the same value with the same words."""
    from stepsim.limits import MAX_DRAWS, MAX_STEPS, ArgumentError

    with pytest.raises(ArgumentError) as e:
        api.whatif(A, set="loader.num_workers=2", steps=MAX_STEPS + 1)
    r = run_cli("whatif", A, "--set", "loader.num_workers=2", "--steps", str(MAX_STEPS + 1))
    assert r.returncode == 2 and str(e.value) in r.stderr.replace("argument --", ""), r.stderr
    with pytest.raises(ArgumentError, match=f"draws: {MAX_DRAWS + 1} is above {MAX_DRAWS}"):
        api.plan(A, draws=MAX_DRAWS + 1)
    import numpy as np

    assert len(api.simulate(A, steps=np.int64(3), warmup=1).result.job_step_us) == 3


def test_validate_refuses_a_run_of_another_loader_setting(tmp_path, cpu_run_nw0, cpu_run_nw1):
    """A re-measured capture whose sidecar states other DataLoader settings than the predicted
    model's (after its --set ops) is refused in one line naming the trace, the setting and the
    --set that matches (exit 2), and nothing is written to the ledger."""
    api.calibrate(cpu_run_nw1, output=tmp_path / "m.json")
    ledger = tmp_path / "ledger.jsonl"
    fast = ("--draws", "0", "--steps", "10", "--warmup", "5", "--jobs", "1", "--ledger", str(ledger))
    for ops in ((), ("--set", "loader.num_workers=2")):
        r = run_cli("validate", str(tmp_path / "m.json"), str(cpu_run_nw0), *ops, *fast)
        assert r.returncode == 2, r.stderr
        assert "trace.json.gz: not a run of the predicted setting: loader.num_workers is 0" in r.stderr
        assert "--set loader.num_workers=0 would match" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and not ledger.exists()
    r = run_cli("validate", str(tmp_path / "m.json"), str(cpu_run_nw0),
                "--set", "loader.num_workers=0", *fast)
    assert r.returncode == 0, r.stderr
    assert len(ledger.read_text().splitlines()) == 1


def test_frame_bottleneck_is_what_the_tables_print():
    # a fresh user's sweep frame said 'input' / 'cpu_cores' where the printed table said
    # 'input pipeline (DataLoader)': the column holds the printed words, the code beside
    rows = api.sweep(A, "loader.num_workers=0,2", draws=0, **FAST).rows()
    for r in rows:
        assert r["bottleneck"] == label(r["bottleneck_code"]) and "bottleneck_label" not in r


def test_every_result_prints_a_line_not_a_dump(tmp_path, cpu_run_nw1):
    """``print(result)`` in a notebook gives one line (then the warnings), not the dataclass
    dump of its model and predictions (3,300-6,700 characters each on a fresh user's CNN,
    2026-12-05)."""
    cal = api.calibrate(cpu_run_nw1, output=tmp_path / "m.json")
    sw = api.sweep(A, "loader.num_workers=0,2", **FAST)
    ce = api.ceiling(A, **FAST)
    pl = api.plan(A, draws=0, max_moves=1, **FAST)
    heads = {"Calibration(": cal, "Sweep(": sw, "Ceilings(": ce, "PlanResult(": pl}
    for start, r in heads.items():
        text = repr(r)
        assert text == str(r) and text.startswith(start), text[:200]
        assert len(text.splitlines()[0]) < 300 and len(text.splitlines()) == 1 + len(r.warnings)
    assert f"measured mean {cal.measured_mean_us / 1e3:.1f} ms" in repr(cal)
    assert "m.json" in repr(cal)
    best = sw.result.best
    assert f"at {best.prediction.mean_step_us / 1e3:.1f} ms" in repr(sw)
    assert f"{ce.report.rows[0].ceiling:.2f}x" in repr(ce)
    assert f"in {len(pl.plan.moves)} move(s)" in repr(pl)
