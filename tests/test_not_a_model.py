"""A model file that is valid JSON but no StepModel (``{"a": 1}``) is said to be no StepModel,
in one line naming the file and the keys it has, from the CLI (exit 2) and from the API."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.simcore.errors import InputError
from tests.conftest import run_cli


@pytest.mark.parametrize("text", ['{"a": 1}', "{}", '{"name": "x", "steps": 3}'])
def test_json_that_is_no_model(tmp_path, text):
    f = tmp_path / "a.json"
    f.write_text(text)
    r = run_cli("whatif", str(f), "--set", "loader.num_workers=2")
    assert r.returncode == 2 and not r.stdout
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"stepsim: error: {f}: not a StepModel: it has none of a "
                           "StepModel's sections (schema_version, loader, host,"), line
    assert "its keys: " + (", ".join(sorted(eval(text))) or "none") in line
    with pytest.raises(InputError, match="not a StepModel: it has none"):
        api.whatif(f, set={"loader.num_workers": 2})
    assert f.read_text() == text


def test_a_model_without_host_ops_is_still_said_so(tmp_path):
    f = tmp_path / "m.json"
    f.write_text('{"loader": {"num_workers": 1}}')
    with pytest.raises(InputError, match=r"host thread has no ops \(host.ops\)"):
        api.load_model(f)
