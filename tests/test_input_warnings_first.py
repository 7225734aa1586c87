"""A warning about the input (a model calibrated from a capture under outside load) comes
before the verb's result, once: ``plan`` printed it after its table and ``ceiling`` not at all
(a fresh user read it below a table). A refused input still says its one line alone
(``test_gloo_bad_ranks``)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from stepsim.models.params import (DurationSpec, HostOp, HostParams, LoaderParams, StepModel,
                                   save_model)
from tests.conftest import REPO

LOADED = "calibrated from a capture that ran under outside load"


@pytest.fixture(scope="module")
def loaded_model(tmp_path_factory):
    m = StepModel(
        loader=LoaderParams(num_workers=0, produce=DurationSpec(mean_us=3000.0), host_cores=2),
        host=HostParams(ops=[HostOp(kind="next_batch"), HostOp(kind="cpu", dur_us=2000.0)]))
    m.meta.notes["outside_load_held"] = 0.5     # its threads advanced 2x slower than alone
    path = tmp_path_factory.mktemp("loaded") / "m.json"
    save_model(m, path)
    return path


def _both(*args: str) -> list[str]:
    """stdout and stderr of ``stepsim ARGS`` as one log, in the order they were written."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"COLUMNS": "110"}
    r = subprocess.run([sys.executable, "-m", "stepsim", *args], cwd=REPO, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, r.stdout
    return r.stdout.splitlines()


@pytest.mark.parametrize("verb", [
    ["plan"], ["whatif", "--set", "loader.num_workers=1"], ["ceiling"],
    ["sweep", "loader.num_workers=0,1"]])
def test_the_loaded_capture_warning_comes_first_and_once(loaded_model, verb):
    lines = _both(verb[0], str(loaded_model), *verb[1:], "--steps", "20", "--warmup", "5",
                  *(["--draws", "0"] if verb[0] != "ceiling" else []))
    said = [i for i, ln in enumerate(lines) if LOADED in ln]
    assert len(said) == 1, lines
    assert said[0] == 0, lines      # before the table and anything else
