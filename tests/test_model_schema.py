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


@pytest.mark.parametrize("version", [3, 4])
def test_a_schema_4_models_measured_range_is_not_read_as_the_prior(tmp_path, version):
    """Schemas 3 and 4 kept the runs' P10–P90 in ``meta.ranges['host.cpu_scale']`` beside
    ``host.speed_runs``; schema 5 pools the runs with the stated prior there, so such a model
    loads with the prior every calibration stated (0.94–1.06), not its P10–P90 (which would
    count the runs twice); without runs, or of schema 5, the range is the file's."""
    from stepsim.models.host_speed import HOST_NOISE_PRIOR

    measured = {"cpu_scale": 1.4142, "speed_runs": [1.0, 2.0],
                "ops": [{"kind": "cpu", "dur_us": 100.0}]}
    ranges = {"host.cpu_scale": [0.1576, 6.3438], "loader.produce.mean_us": [0.8, 1.2]}
    path = _saved(tmp_path, schema_version=version, host=measured,
                  meta={"name": "old", "ranges": ranges})
    data = json.loads(open(path).read())
    model = load_model(path)
    assert model.meta.ranges["host.cpu_scale"] == pytest.approx(HOST_NOISE_PRIOR)
    assert model.meta.ranges["loader.produce.mean_us"] == pytest.approx((0.8, 1.2))
    assert model.host.speed_runs == [1.0, 2.0] and model.schema_version == SCHEMA_VERSION
    assert json.loads(open(path).read()) == data   # the input is not modified
    for v, host in ((SCHEMA_VERSION, measured), (version, {"ops": measured["ops"]})):
        path = _saved(tmp_path, schema_version=v, host=host, meta={"name": "m", "ranges": ranges})
        assert load_model(path).meta.ranges["host.cpu_scale"] == pytest.approx((0.1576, 6.3438))
