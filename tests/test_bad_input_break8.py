"""Bad or outsized input found by the eighth breaker (2026-12-05): each refused in one line
(exit 2, no traceback), dropped and counted, or bounded in time and memory."""
from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from stepsim.models.params import save_model
from tests.test_batch_size_whatif import cpu_model
from tests.test_quirks import cli, one_line_error


def _many_ops(n: int):
    """A CPU model whose step is ``n`` host ops of 0.1 ms (a large calibrated trace's
    shape)."""
    m = cpu_model(0, produce_ms=1, train_ms=1)
    op = next(o for o in m.host.ops if o.kind == "cpu").model_copy(update={"dur_us": 100.0})
    ops = [m.host.ops[0]] + [op.model_copy(update={"name": f"op{i}"}) for i in range(n)]
    return m.model_copy(update={"host": m.host.model_copy(update={"ops": ops})})


def _limited(*args: str, mem_gb: float = 2.0, timeout: float = 120):
    """``stepsim ARGS`` in a subprocess whose address space is ``mem_gb`` GB (the old code's
    run of a large given count ends in a MemoryError there, not in the machine's memory)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (int(mem_gb * 2**30), int(mem_gb * 2**30)))
    return subprocess.run([sys.executable, "-m", "stepsim", *map(str, args)], text=True,
                          capture_output=True, timeout=timeout, preexec_fn=limit)


@pytest.mark.parametrize("args", [("--steps", "100000"), ("--warmup", "100000"),
                                  ("--steps", "3000", "--warmup", "3000")])
def test_a_given_step_count_of_a_large_model_is_one_line(tmp_path, args):
    """``simulate --steps 100000`` of the calibrated resnet50 GPU trace (1,002 ops and tasks a
    step) held 24 GB and ran 3 min (every span kept): each step count is bounded (100,000) but
    not its work; steps × the model's work a step is now bounded, refused before it runs."""
    save_model(_many_ops(1000), tmp_path / "m.json")
    r = _limited("simulate", tmp_path / "m.json", *args)
    one_line_error(r.returncode, r.stderr, "m.json", "1,001 host ops", "at most 5,000,000",
                   "4,995 steps of this model", "--steps or --warmup")


def test_a_default_run_of_a_model_of_many_ranks_is_one_line(tmp_path):
    """512 ranks of a 1,001-op model (the rank bound) are 512 k a step: the default first
    simulation (60 steps) is 31 M, refused (512 ranks of the resnet50 GPU model did not end in
    60 s; memory grows 0.4-0.7 kB each)."""
    m = _many_ops(1000)
    m = m.model_copy(update={"ranks": [m.ranks[0].model_copy(update={"rank": i})
                                       for i in range(512)]})
    save_model(m, tmp_path / "m.json")
    r = _limited("simulate", tmp_path / "m.json")
    one_line_error(r.returncode, r.stderr, "m.json", "over its 512 ranks", "39 steps")


def test_the_bound_is_the_work_and_a_default_run_is_taken_to_a_larger_bound():
    """Closed form: refused where (steps + warm-up) × the work a step passes MAX_RUN_WORK; the
    verbs' default first simulation (40 steps after 20 of warm-up) of a large calibrated
    model up to 4 × that; 512 ranks of the resnet50 GPU model (513 k a step) did not end in
    60 s."""
    from stepsim.limits import DEFAULT_WARMUP
    from stepsim.models.sim_work import (ALWAYS_STEPS, MAX_RUN_WORK, MAX_SMALL_RUN_WORK,
                                         step_work, work_problem)
    from stepsim.models.stepcount import FIRST_STEPS

    assert ALWAYS_STEPS == FIRST_STEPS + DEFAULT_WARMUP
    m = _many_ops(1000)
    assert step_work(m) == 1001
    most = MAX_RUN_WORK // 1001
    assert work_problem(m, most - 20, 20) is None
    assert "4,995 steps of this model" in work_problem(m, most - 19, 20)
    large = _many_ops(300_000)    # 300,001 a step: 60 steps are 18 M
    assert work_problem(large, FIRST_STEPS, DEFAULT_WARMUP) is None
    assert "60 steps of this model" in work_problem(large, FIRST_STEPS + 1, DEFAULT_WARMUP)
    huge = large.model_copy(update={"ranks": [r.model_copy(update={"rank": i})
                                              for i, r in enumerate(large.ranks * 2)]})
    said = work_problem(huge, FIRST_STEPS, DEFAULT_WARMUP)
    assert "over its 2 ranks" in said and "33 steps of this model" in said
    assert MAX_SMALL_RUN_WORK // 600_002 == 33


def test_the_api_refuses_it_too(tmp_path):
    """``stepsim.simulate`` / ``whatif`` go through the same bound (a SimulationError)."""
    import stepsim
    from stepsim.simcore.errors import SimulationError

    save_model(_many_ops(1000), tmp_path / "m.json")
    with pytest.raises(SimulationError, match="at most 5,000,000"):
        stepsim.simulate(tmp_path / "m.json", steps=6000)
    rc, err, _ = cli("whatif", tmp_path / "m.json", "--steps", "6000", "--draws", "0",
                     "--set", "loader.num_workers=1")
    one_line_error(rc, err, "m.json", "6,000 steps and 20 warm-up steps")


@pytest.mark.parametrize("regex, says", [
    ("x{99999999999}", "the repetition number is too large"),     # re: OverflowError
    ("(" * 1000 + "a" + ")" * 1000, "groups nested too deep"),    # re: RecursionError
    ("(", "missing )")])
@pytest.mark.parametrize("verb", ["calibrate", "diagnose"])
def test_a_step_regex_re_cannot_compile_is_one_line(tmp_path, regex, says, verb):
    """``--step-regex 'x{99999999999}'`` was a traceback (re raises OverflowError, and
    RecursionError for ~1,000 nested groups, not re.error)."""
    from tests.kineto_gen import one_rank_trace

    trace = one_rank_trace(tmp_path / "t.json")
    out = ("-o", tmp_path / "m.json") if verb == "calibrate" else ()
    rc, err, _ = cli(verb, trace, "--step-regex", regex, *out)
    one_line_error(rc, err, "--step-regex", "is not a valid regular expression", says)
    assert not (tmp_path / "m.json").exists()


def test_a_list_where_a_number_is_is_one_line(tmp_path):
    """A list where a scalar field is (``cpu_scale: [0.5]``, ``--set loader.num_workers=1|2``,
    a ledger's ``error_pct: [1]``) was a TypeError traceback from the strict-scalar check
    (``set <= ()``) in every file that derives from it: models, --set, sweeps, ledgers."""
    import json

    from tests.test_ledger import _rec

    m = cpu_model(1, produce_ms=40, train_ms=20)
    data = json.loads(m.model_dump_json())
    data["host"]["cpu_scale"] = [0.5]
    (tmp_path / "m.json").write_text(json.dumps(data))
    one_line_error(*cli("simulate", tmp_path / "m.json", "--steps", "5")[:2], "m.json",
                   "host.cpu_scale: Input should be a valid number")
    save_model(m, tmp_path / "ok.json")
    for args in (("whatif", "--set", "loader.num_workers=1|2", "--draws", "0"),
                 ("sweep", "host.cpu_scale=[0.5],1")):
        one_line_error(*cli(args[0], tmp_path / "ok.json", *args[1:], "--steps", "5")[:2],
                       "Input should be a valid")
    rec = json.loads(_rec(1.0, True).model_dump_json())
    rec["error_pct"] = [1.0]
    (tmp_path / "L.jsonl").write_text(json.dumps(rec) + "\n")
    one_line_error(*cli("ledger", tmp_path / "L.jsonl")[:2], "L.jsonl",
                   "error_pct: Input should be a valid number")


def test_a_sidecar_list_where_a_count_is_is_one_line(tmp_path, cpu_run_nw1):
    import json
    import shutil

    shutil.copytree(cpu_run_nw1, tmp_path / "run")
    side = json.loads((tmp_path / "run" / "sidecar.json").read_text())
    side["host_cores"] = [2]
    (tmp_path / "run" / "sidecar.json").write_text(json.dumps(side))
    one_line_error(*cli("calibrate", tmp_path / "run", "-o", tmp_path / "m.json")[:2],
                   "sidecar.json", "host_cores: Input should be a valid integer")


def test_sweep_values_are_read_as_set_reads_them():
    """``sweep host.cpu_scale=0.5,1e-1`` was refused ("must be a number, not str '1e-1'": the
    values were one YAML 1.1 list, which has no exponent without a dot) where
    ``--set host.cpu_scale=1e-1`` is 0.1; YAML also read ``yes`` as true and ``1:4`` as 64."""
    from stepsim.scenarios.sweep import parse_axis
    from stepsim.scenarios.transforms import parse_value
    from stepsim.simcore.errors import ModelError

    assert parse_axis("host.cpu_scale=0.5,1e-1") == ("host.cpu_scale", [0.5, 0.1])
    assert parse_axis("loader.pin_memory=yes,true")[1] == [parse_value("yes"), True] == ["yes", True]
    assert parse_axis("loader.num_workers=1:4,2")[1] == ["1:4", 2]
    assert parse_axis('loader.produce={mean_us: 1, cv: 0}, {mean_us: 2},"a,b"')[1] == [
        {"mean_us": 1, "cv": 0}, {"mean_us": 2}, "a,b"]
    assert parse_axis("x=[1, 2],3")[1] == [[1, 2], 3]
    for bad, says in (("x=1,,2", "an empty value"), ("x=[1,2", "unbalanced"),
                      ("x=1],2", "unbalanced"), ('x="a,b', "unbalanced")):
        with pytest.raises(ModelError, match=says):
            parse_axis(bad)


def test_a_yaml_exponent_without_a_dot_is_a_number(tmp_path):
    """A hand-written scenario's ``value: 1e-1`` (or a model's ``dur_us: 1.5e3``) was refused
    as "must be a number, not str '1e-1'": YAML 1.1 needs a dot and a signed exponent; JSON,
    YAML 1.2 and ``--set`` read a number."""
    from stepsim.simcore.parsing import yaml_value

    assert yaml_value("[1e3, -2E-2, 1.5e3, .5e1, '1e3', e3, 1e]") == [
        1000.0, -0.02, 1500.0, 5.0, "1e3", "e3", "1e"]
    save_model(cpu_model(1, produce_ms=40, train_ms=20), tmp_path / "m.json")
    (tmp_path / "s.yaml").write_text("ops:\n  - {op: set, path: host.cpu_scale, value: 1e-1}\n")
    rc, err, out = cli("whatif", tmp_path / "m.json", "--scenario", tmp_path / "s.yaml",
                       "--steps", "5", "--draws", "0")
    assert rc == 0, err
