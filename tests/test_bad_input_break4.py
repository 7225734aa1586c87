"""Bad input, breaker session 4.

* A sidecar's or a ledger record's count, time or switch written as another JSON type: pydantic's
  lax mode read ``true`` as 1 (``num_workers: true`` calibrated a 1-worker loader), ``"5"`` as
  5 and ``1`` as True. Now a sidecar field refuses the file in one line naming it, a produce
  record or a ledger line holding one is dropped and counted, a scheduler wait is taken as not
  recorded.
* A ledger of 200,000 lines: every line was parsed and validated (``stepsim ledger`` 10 s and
  1.3 GB, ``report --ledger`` 13 s, 2026-12-05, load 1.5); now its latest
  ``MAX_LEDGER_RECORDS`` lines are read, the earlier ones said in a warning.
"""
from __future__ import annotations

import importlib
import json
import re

import pytest
import torch

from stepsim.calibration.sidecar import load_sidecar
from stepsim.models.params import save_model
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import latest_lines
from tests.conftest import run_cli
from tests.test_bad_input_session import _edited
from tests.test_batch_size_whatif import cpu_model
from tests.test_ledger import _rec
from tests.test_quirks import cli, one_line_error

V = importlib.import_module("stepsim.scenarios.validate")   # the package's `validate` is the verb


@pytest.mark.parametrize("edit,says", [
    (lambda d: d["loader"].update(num_workers=True),
     "bad sidecar field loader.num_workers: must be an integer, not bool True"),
    (lambda d: d.update(host_cores=True), "bad sidecar field host_cores: must be an integer"),
    (lambda d: d["loader"].update(pin_memory=1), "loader.pin_memory: must be true or false, not int 1"),
    (lambda d: d["steps"][1].update(wall_us="5"), "steps.1.wall_us: must be a number, not str"),
    (lambda d: d["steps"][1].update(vcsw=2.5), "steps.1.vcsw: must be a whole number"),
])
def test_a_field_of_another_json_type_refuses_the_sidecar(tmp_path, cpu_run_nw1, edit, says):
    d = _edited(cpu_run_nw1, tmp_path / "run", edit)
    with pytest.raises(InputError) as e:
        load_sidecar(d / "sidecar.json")
    assert says in str(e.value) and str(d / "sidecar.json") in str(e.value)
    r = run_cli("calibrate", str(d), "-o", str(tmp_path / "m.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "m.json").exists()


def test_a_boolean_in_a_produce_record_or_a_wait_is_not_a_number(tmp_path, cpu_run_nw1):
    def edit(d):
        d["produce"][1].update(worker=True)
        d["produce"][2].update(wall_us=False)
        d["steps"][3].update(run_wait_us=True)

    n = len(json.loads((cpu_run_nw1 / "sidecar.json").read_text())["produce"])
    side = load_sidecar(_edited(cpu_run_nw1, tmp_path / "run", edit) / "sidecar.json")
    assert len(side.produce) == n - 2
    assert side.steps[3].run_wait_us is None
    said = " ".join(side.dropped)
    assert f"dropped 2 of {n} 'produce' record(s)" in said
    assert "produce.1.worker: must be an integer, not bool True" in said
    assert "steps.3.run_wait_us" in said


@pytest.mark.parametrize("field,value", [
    ("steps_measured", True), ("runs", True), ("error_pct", "5"), ("in_sample", 0),
    ("measured_mean_us", True), ("outside_load_slowdown", True)])
def test_a_ledger_line_with_a_value_of_another_type_is_skipped(tmp_path, field, value):
    good = json.loads(V.ledger_line(_rec(5.0, True)))
    bad = {**good, field: value}
    p = tmp_path / "ledger.jsonl"
    p.write_bytes(V.ledger_line(_rec(5.0, True)) + json.dumps(bad).encode() + b"\n")
    skipped: list[str] = []
    assert len(V.read_ledger(p, skipped)) == 1
    assert len(skipped) == 1 and "skipped 1 of 2 line(s)" in skipped[0] and field in skipped[0]
    assert "Value error" not in skipped[0]


def test_a_long_ledger_is_read_from_its_latest_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(V, "MAX_LEDGER_RECORDS", 3)
    p = tmp_path / "ledger.jsonl"
    lines = [V.ledger_line(_rec(float(i), True)) for i in range(7)]
    p.write_bytes(b"".join(lines[:5]) + b"\n" + b"".join(lines[5:]))   # a blank line 6
    skipped: list[str] = []
    got = V.read_ledger(p, skipped)
    assert [r.error_pct for r in got] == [4.0, 5.0, 6.0]
    assert skipped == ["ledger.jsonl: holds more than 3 records; the latest 3 are read and "
                       "scored, lines 1 to 4 are not (scenarios.validate.MAX_LEDGER_RECORDS)"]
    # a bad line among the latest is counted by its own line number
    p.write_bytes(b"".join(lines[:5]) + b"{cut\n" + b"".join(lines[5:]))
    skipped.clear()
    assert [r.error_pct for r in V.read_ledger(p, skipped)] == [5.0, 6.0]
    assert "lines 1 to 5 are not" in skipped[0] and "line 6" in skipped[1]


@pytest.mark.parametrize("raw", [b"", b"a", b"a\n", b"a\n\nb\n", b"a\nb\nc", b"a\nb\nc\n\n",
                                 b"\n\na\n  \nb\nc\n", b"a\r\nb\r\n"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_latest_lines(raw, n):
    first, tail = latest_lines(raw, n)
    assert raw.splitlines()[first - 1:] == tail
    assert sum(1 for t in tail if t.strip()) == min(n, sum(1 for t in raw.splitlines()
                                                           if t.strip()))


@pytest.mark.parametrize("value,lost", [
    ("{}", "num_workers, batch_size, produce, host_cores"),
    ("{num_workers: 3}", "batch_size, produce, host_cores")])
def test_a_mapping_that_would_reset_a_sections_fields_is_refused(tmp_path, value, lost):
    """``--set loader={}`` replaced the calibrated loader with the defaults (a prediction of
    another job); now refused, naming the fields it would reset."""
    m = tmp_path / "m.json"
    save_model(cpu_model(2, 30.0, 10.0), m)
    rc, err, _ = cli("whatif", m, "--set", f"loader={value}", "--draws", "0", "--steps", "30")
    line = one_line_error(rc, err, "a mapping replaces the whole LoaderParams", lost,
                          "loader.FIELD=VALUE")
    assert "num_workers" in line.split("leaves out")[1] or "num_workers" in value


def test_a_mapping_with_every_set_field_is_taken(tmp_path):
    m = tmp_path / "m.json"
    save_model(cpu_model(2, 30.0, 10.0), m)
    rc, err, out = cli("whatif", m, "--set", "loader.produce={mean_us: 20000, cv: 0.0}",
                       "--draws", "0", "--steps", "30")
    assert rc == 0, err


@pytest.mark.parametrize("text,what", [
    (None, "a StepModel over several lines, not a ledger"),
    (b"[1,\n2]\n", "one JSON document (an array) over several lines, not a ledger")])
def test_a_json_document_given_as_the_ledger_says_what_it_is(tmp_path, text, what):
    p = tmp_path / "x.json"
    if text is None:
        save_model(cpu_model(2, 30.0, 10.0), p)
    else:
        p.write_bytes(text)
    rc, err, _ = cli("ledger", p)
    one_line_error(rc, err, str(p), what)


@pytest.mark.parametrize("args,says", [
    (["--measured", "nosuch.json"], "--measured draws a real trace's lanes"),
    (["--window", "--plot", "w.png"], "--window replays the captured window and draws nothing"),
    (["--window", "--queue-plot", "q.png"], "--window replays the captured window")])
def test_a_simulate_argument_that_would_be_ignored_is_refused(tmp_path, args, says):
    """``simulate --measured T`` without ``--plot`` never read T (an empty file passed, rc 0),
    and ``--window --plot F`` wrote no F (rc 0)."""
    m = tmp_path / "m.json"
    save_model(cpu_model(2, 30.0, 10.0), m)
    args = [str(tmp_path / a) if a.endswith((".png", ".json")) else a for a in args]
    rc, err, _ = cli("simulate", m, "--steps", "30", *args)
    one_line_error(rc, err, says)
    assert not list(tmp_path.glob("*.png"))


class _DS(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.ones(2)


@pytest.mark.parametrize("kw,says", [
    ({"active": True}, "active=True"), ({"active": 2.5}, "active=2.5"),
    ({"active": "2"}, "active='2'"), ({"warmup": 1.0}, "warmup=1.0"),
    ({"probe_workers": True}, "probe_workers=True"), ({"probe_workers": -1}, "probe_workers=-1")])
def test_capture_schedule_counts_are_whole_numbers(tmp_path, kw, says):
    """``Capture.steps(active=2.5)`` was a TypeError from inside the loop, ``active="2"`` one
    from a comparison, ``active=True`` a one-step capture, ``probe_workers=True`` a 1-worker
    probe; now a ValueError naming the argument, before the folder is made."""
    from stepsim.calibration.capture import Capture

    cap = Capture(tmp_path / "cap")
    with pytest.raises(ValueError, match=re.escape(says)):
        next(iter(cap.steps(cap.dataloader(_DS(), batch_size=2), **kw)))
    assert not (tmp_path / "cap" / "sidecar.json").exists()


_LAUGHS = ", ".join(["&a [1,1,1,1,1,1,1,1,1]"] + [
    f"&{b} [{','.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefg", "bcdefgh")] + ["*h"])


@pytest.mark.parametrize("where", ["set", "sweep", "scenario"])
def test_yaml_aliases_are_refused(tmp_path, where):
    """A 200-byte ``--set`` value of nested YAML aliases held 9^8 values: 2 GB and no end in
    30 s (the 'billion laughs'); aliases are now refused wherever YAML is read."""
    m = tmp_path / "m.json"
    save_model(cpu_model(2, 30.0, 10.0), m)
    if where == "set":
        args = ["whatif", m, "--set", f"meta.notes=[{_LAUGHS}]"]
    elif where == "sweep":
        args = ["sweep", m, f"loader.num_workers={_LAUGHS}"]
    else:
        sc = tmp_path / "s.yaml"
        sc.write_text(f"ops:\n  - op: set\n    path: meta.notes\n    value: [{_LAUGHS}]\n")
        args = ["whatif", m, "--scenario", sc]
    rc, err, _ = cli(*args, "--draws", "0", "--steps", "30")
    one_line_error(rc, err)
    if where == "scenario":     # a sweep's values are read as --set reads them (no YAML)
        assert "alias" in err
