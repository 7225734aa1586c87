"""Saved models across schema versions (models/schema.py): an older model with a field a
later schema replaced is refused with one line asking for a re-calibration; an older one
without such a field loads as the current schema; a newer one asks for an upgrade."""
from __future__ import annotations

import json

import pytest

from stepsim.models.params import (SCHEMA_VERSION, HostOp, HostParams, StepModel, load_model,
                                   save_model)
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli


def _saved(tmp_path, **edit) -> str:
    """A small valid model saved as JSON, then edited as a dict (``comm`` merged)."""
    path = tmp_path / "model.json"
    save_model(StepModel(host=HostParams(ops=[HostOp(kind="cpu", dur_us=100.0)])), path)
    data = json.loads(path.read_text())
    comm = edit.pop("comm", {})
    data.update(edit)
    data["comm"].update(comm)
    path.write_text(json.dumps(data))
    return str(path)


def test_saved_models_carry_the_schema_version(tmp_path):
    assert SCHEMA_VERSION >= 2
    assert json.loads(open(_saved(tmp_path)).read())["schema_version"] == SCHEMA_VERSION


@pytest.mark.parametrize("version", [{"schema_version": 1}, {}])
def test_an_old_field_is_refused_in_one_line(tmp_path, version):
    path = _saved(tmp_path, comm={"host_cpu_fraction": 0.4}, **version)
    if not version:
        data = json.loads(open(path).read())
        del data["schema_version"]
        open(path, "w").write(json.dumps(data))
    with pytest.raises(InputError, match="older stepsim.*comm.host_cpu_fraction.*re-calibrate"):
        load_model(path)
    r = run_cli("simulate", path, "--steps", "4", "--warmup", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "older stepsim" in r.stderr and "re-calibrate" in r.stderr and path in r.stderr


def test_an_old_model_without_changed_fields_loads_as_current(tmp_path):
    path = _saved(tmp_path, schema_version=1)
    data = json.loads(open(path).read())
    assert load_model(path).schema_version == SCHEMA_VERSION
    assert json.loads(open(path).read()) == data   # the input is not modified


def test_a_newer_model_asks_for_an_upgrade(tmp_path):
    path = _saved(tmp_path, schema_version=SCHEMA_VERSION + 1)
    with pytest.raises(InputError, match="newer stepsim.*upgrade"):
        load_model(path)
