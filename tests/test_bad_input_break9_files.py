"""Bad input found by the ninth breaker (2026-12-05) in the small files: sidecars (workers,
batch sizes, keys given twice), models, scenario files and ledgers; each refused in one line
(exit 2, no traceback), or dropped and counted in a warning; inputs never changed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import record_cpu_run
from tests.kineto_gen import one_rank_trace
from tests.test_bad_input_break9 import _digest, _warnings
from tests.test_quirks import cli, one_line_error


# ------------------------------------------------------------------ sidecar workers -----------
@pytest.fixture(scope="module")
def run_nw2(tmp_path_factory) -> Path:
    """A real 2-worker capture (map-style dataset of 40 batches an epoch)."""
    return record_cpu_run(tmp_path_factory.mktemp("nw2"), num_workers=2, active=4, work=60)


def _edited(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    side = json.loads((dst / "sidecar.json").read_text())
    edit(side)
    (dst / "sidecar.json").write_text(json.dumps(side))
    return dst


def test_a_real_two_worker_capture_passes(run_nw2, tmp_path):
    side = json.loads((run_nw2 / "sidecar.json").read_text())
    assert {r["worker"] for r in side["produce"]} == {0, 1}
    rc, err, _ = cli("calibrate", run_nw2, "-o", tmp_path / "m.json")
    assert rc == 0 and "produce' record" not in err, err


@pytest.mark.parametrize("same_pid", [False, True])
def test_batches_all_from_one_of_four_workers_are_refused(run_nw2, tmp_path, same_pid):
    """Every batch from worker 0 while ``num_workers=4`` (8 in the breaker's file) was
    calibrated as 4 workers: a map-style loader hands its batches round robin to every
    worker, so it cannot be right (the capture made 14 batches: twice 4 and more)."""
    def edit(side):
        assert len(side["produce"]) >= 8
        side["loader"]["num_workers"] = 4
        for r in side["produce"]:
            r["worker"] = 0
            if same_pid:
                r["pid"] = 4242
    run = _edited(run_nw2, tmp_path / "run", edit)
    before = _digest(run)
    rc, err, _ = cli("calibrate", run, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "sidecar.json", "come from 1 worker(s) (0)", "num_workers=4",
                   "round robin")
    assert _digest(run) == before and not (tmp_path / "m.json").exists()


def test_round_robin_is_checked_only_where_it_holds():
    """Closed forms of the rule: an epoch shorter than the workers (counted in whole batches
    of a DDP rank's share), fewer than twice their number of batches, a missing worker that
    the dropped records may account for, or no dataset length (an iterable dataset may leave
    workers idle): accepted."""
    from types import SimpleNamespace as NS

    from stepsim.calibration.sidecar_cross import _round_robin
    from stepsim.simcore.errors import InputError

    def side(nw=4, n=1000, bs=10, batches=8, workers=(0, 1, 2), ddp=None):
        recs = [NS(worker=workers[k % len(workers)]) for k in range(batches)]
        return NS(loader=NS(num_workers=nw, dataset_len=n, batch_size=bs, drop_last=False),
                  produce=recs, ddp=ddp)
    with pytest.raises(InputError, match="come from 3 worker"):
        _round_robin(Path("s.json"), side(), 8)
    _round_robin(Path("s.json"), side(n=30), 8)          # 3 batches an epoch < 4 workers
    _round_robin(Path("s.json"), side(n=39), 8)          # 3 whole batches an epoch
    _round_robin(Path("s.json"), side(n=160, ddp=NS(world_size=8)), 8)   # 2 a rank's epoch
    _round_robin(Path("s.json"), side(batches=7), 7)     # fewer than 2 × 4 batches
    _round_robin(Path("s.json"), side(), 9)              # one dropped record: maybe worker 3
    _round_robin(Path("s.json"), side(n=None), 8)        # no length: maybe iterable
    _round_robin(Path("s.json"), side(workers=(0, 1, 2, 3)), 8)


def test_two_batches_at_once_from_one_worker_are_dropped(run_nw2, tmp_path):
    """A batch record copied (the same worker and process making two batches at once) is a
    record that cannot be right: dropped and counted, the calibration the same as without."""
    def edit(side):
        side["produce"].append(dict(side["produce"][3]))
    run = _edited(run_nw2, tmp_path / "run", edit)
    rc, err, _ = cli("calibrate", run, "-o", tmp_path / "m.json")
    assert rc == 0
    said = [w for w in _warnings(err) if "makes it while it makes another" in w]
    n = len(json.loads((run / "sidecar.json").read_text())["produce"])
    assert len(said) == 1 and f"dropped 1 of {n} 'produce' record(s)" in said[0], err


# ------------------------------------------------------------------ duplicated keys -----------
def _twice(text: str, tail: str) -> str:
    """``text`` (a JSON object) with ``tail`` (``"key": value``) added at its end: the key
    then given twice."""
    return text.rstrip().rstrip("}") + f", {tail}}}"


def test_a_sidecar_key_given_twice_is_refused(run_nw2, tmp_path):
    """A second ``"loader": {"num_workers": 7}`` at the sidecar's end was read silently (the
    last one wins), and the capture calibrated as 7 workers; now refused, naming the key."""
    run = tmp_path / "run"
    shutil.copytree(run_nw2, run)
    side = run / "sidecar.json"
    side.write_text(_twice(side.read_text(), '"loader": {"num_workers": 7}'))
    before = _digest(run)
    rc, err, _ = cli("calibrate", run, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "sidecar.json", "the key 'loader' is given twice")
    assert _digest(run) == before and not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("tail, key", [('"ranks": []', "ranks"), ('"host": 5', "host")])
def test_a_model_key_given_twice_is_refused(tmp_path, tail, key):
    """A model whose ``ranks`` (or ``host``) is given twice ran the last one silently."""
    from stepsim.models.params import save_model
    from tests.test_batch_size_whatif import cpu_model

    m = tmp_path / "m.json"
    save_model(cpu_model(1, produce_ms=2, train_ms=1), m)
    m.write_text(_twice(m.read_text(), tail))
    before = _digest(m)
    for verb in ("simulate", "ceiling"):
        rc, err, _ = cli(verb, m, "--steps", "10")
        one_line_error(rc, err, "m.json", f"the key '{key}' is given twice")
    assert _digest(m) == before


def test_a_key_twice_at_any_depth():
    """The check sees a key twice at any depth, never the same key in two objects; NaN and
    1e400 are left to the reader that refuses or takes them."""
    from stepsim.simcore.errors import InputError
    from stepsim.simcore.parsing import parse_json

    assert parse_json("x.json", b'{"a": {"b": 1}, "c": {"b": 2}}', "x", unique_keys=True) == \
        {"a": {"b": 1}, "c": {"b": 2}}
    with pytest.raises(InputError, match="'b' is given twice"):
        parse_json("x.json", b'{"a": [{"b": 1, "b": 2}]}', "x", unique_keys=True)
    assert parse_json("x.json", b'{"a": 1, "a": 2}', "x") == {"a": 2}   # a trace's reader


# ------------------------------------------------------------------ scenario files -----------
def _model(tmp_path) -> Path:
    from stepsim.models.params import save_model
    from tests.test_batch_size_whatif import cpu_model

    save_model(cpu_model(1, produce_ms=2, train_ms=1), tmp_path / "m.json")
    return tmp_path / "m.json"


@pytest.mark.parametrize("op, says", [
    ("{op: set, path: loader.num_workers, value: many}", "must be an integer, not str 'many'"),
    ("{op: set, path: loader.pin_memory, value: maybe}", "must be true or false"),
    ("{op: set, path: loader.nonexistent, value: 1}", "unknown parameter path"),
    ("{op: fix, name: more_workers, args: {workers: 100000000000}}",
     "fix more_workers(workers=100000000000): set loader.num_workers=100000000000")])
@pytest.mark.parametrize("verb", ["whatif", "plan"])
def test_a_scenario_op_that_gives_a_bad_model_names_the_scenario_file(tmp_path, op, says, verb):
    """A value of the wrong type in a scenario file ("set loader.num_workers='many': gives an
    invalid model") named no file; a fix's bad result named a --set the user never gave."""
    m = _model(tmp_path)
    s = tmp_path / "bad_scenario.yaml"
    s.write_text(f"ops:\n  - {op}\n")
    before = _digest(m, s)
    rc, err, _ = cli(verb, m, "--scenario", s, "--draws", "0", "--steps", "10")
    one_line_error(rc, err, "bad_scenario.yaml: ", says)
    assert _digest(m, s) == before


def test_the_same_op_from_a_file_and_the_command_line_is_one_op():
    """An op keeps its source apart from its fields: equal, one hash."""
    from stepsim.scenarios.transforms import SetOp

    a, b = SetOp(path="loader.num_workers", value=1), SetOp(path="loader.num_workers", value=1)
    b._source = "s.yaml"
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_a_scenario_of_too_many_ops_or_bytes_is_one_line(tmp_path):
    """200,000 ops in a 10 MB scenario ran past 4 minutes (69 s of it reading the YAML): a
    YAML file is bounded (1 MiB) and so are the operations (1,000)."""
    from stepsim.scenarios.options import MAX_OPS
    from stepsim.simcore.parsing import MAX_YAML_BYTES

    m = _model(tmp_path)
    line = "  - {op: set, path: loader.num_workers, value: 1}\n"
    big = tmp_path / "big.yaml"
    big.write_text("ops:\n" + line * (MAX_YAML_BYTES // len(line) + 1))
    rc, err, _ = cli("whatif", m, "--scenario", big, "--draws", "0", "--steps", "10")
    one_line_error(rc, err, "big.yaml", "MiB of YAML", "at most 1 MiB")
    many = tmp_path / "many.yaml"
    many.write_text("ops:\n" + line * MAX_OPS)
    rc, err, _ = cli("whatif", m, "--scenario", many, "--set", "loader.num_workers=2",
                     "--draws", "0", "--steps", "10")
    one_line_error(rc, err, f"{MAX_OPS + 1:,} what-if operations", f"at most {MAX_OPS:,}")
    rc, err, _ = cli("whatif", m, "--scenario", many, "--draws", "0", "--steps", "10")
    assert rc == 0, err


@pytest.mark.parametrize("verb, flag", [("calibrate", "-o"), ("whatif", "--save-model")])
def test_dash_as_an_output_is_refused(tmp_path, monkeypatch, verb, flag):
    """``-o -`` wrote a file named ``-`` in the working folder (a Unix user means stdout)."""
    monkeypatch.chdir(tmp_path)
    src = one_rank_trace(tmp_path / "t.json") if verb == "calibrate" else _model(tmp_path)
    extra = () if verb == "calibrate" else ("--set", "loader.num_workers=2", "--draws", "0")
    rc, err, _ = cli(verb, src, *extra, flag, "-")
    assert rc == 2 and "'-' (standard output) is not an output here" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "-").exists()


def test_a_ledger_line_with_a_key_twice_is_skipped_or_one_line(tmp_path):
    """A ledger record whose ``label`` is given twice is skipped and counted beside good
    ones; alone it is refused, naming the key and its line (not "in it None")."""
    from tests.test_ledger import _rec

    good = _rec(1.0, True).model_dump_json()
    twice = good[:-1] + ', "label": "x"}\n'
    led = tmp_path / "l.jsonl"
    led.write_text(good + "\n" + twice)
    before = _digest(led)
    rc, err, _ = cli("ledger", led)
    assert rc == 0 and _warnings(err) == [
        "warning: l.jsonl: skipped 1 of 2 line(s) that are not ledger records (first: line 2: "
        "the key 'label' is given twice in one object of the ledger (a JSON reader keeps one "
        "silently: which was meant?))"]
    assert _digest(led) == before
    led.write_text(twice)
    rc, err, _ = cli("ledger", led)
    line = one_line_error(rc, err, "l.jsonl", "the key 'label' is given twice", "(at line 1)")
    assert "None" not in line


@pytest.mark.parametrize("where", ["loader", "probe"])
def test_a_batch_above_the_dataset_is_the_whole_dataset(run_nw2, tmp_path, where):
    """A batch_size of 10^12 on a dataset of 320 samples (the probe's was fitted as a 3e10x
    batch): each batch is the whole dataset, taken as its length and said; with drop_last no
    batch is made at all: refused."""
    from stepsim.calibration.sidecar import load_sidecar

    def edit(side):
        n = side["loader"]["dataset_len"]
        assert n == 320
        if where == "loader":
            side["loader"]["batch_size"] = 10**12
        else:
            end = side["steps"][-1]["t_start_us"] + side["steps"][-1]["wall_us"]
            steps = [dict(s, t_start_us=s["t_start_us"] - side["steps"][0]["t_start_us"] + end
                          + 1e5) for s in side["steps"][:3]]   # a probe follows the run's steps
            side["probe"] = {"num_workers": 2, "batch_size": 10**12,
                             "produce": side["produce"][:6], "steps": steps}
    run = _edited(run_nw2, tmp_path / "run", edit)
    side = load_sidecar(run / "sidecar.json")
    got = side.loader.batch_size if where == "loader" else side.probe.batch_size
    assert got == 320
    assert [w for w in side.dropped if "whole dataset" in w] == [
        f"sidecar.json: {where}.batch_size 1000000000000 is above the dataset's 320 samples "
        "(loader.dataset_len): each batch is the whole dataset, taken as 320"]
    data = json.loads((run / "sidecar.json").read_text())
    data["loader"]["drop_last"] = True
    (run / "sidecar.json").write_text(json.dumps(data))
    before = _digest(run)
    rc, err, _ = cli("calibrate", run, "-o", tmp_path / "m.json")
    one_line_error(rc, err, "sidecar.json", f"{where}.batch_size", "make no batch at all")
    assert _digest(run) == before
