"""An unknown `--set` path names the one the user likely meant: a field of that name one section
down (a fresh user's `--set num_workers=2` for `loader.num_workers`), else a close spelling of a
field there (`loader.num_worker`); a name close to nothing gets no guess."""
from __future__ import annotations

import pytest

from stepsim.models.params import StepModel
from stepsim.scenarios.paths import set_value
from stepsim.simcore.errors import ModelError


def _model() -> StepModel:
    return StepModel.model_validate({
        "loader": {"num_workers": 2, "produce": {"mean_us": 8000, "cv": 0.2}, "host_cores": 4,
                   "batch_size": 64},
        "host": {"ops": [{"kind": "next_batch"}, {"kind": "cpu", "name": "train", "dur_us": 300}]},
    })


@pytest.mark.parametrize("path, meant", [
    ("num_workers", "loader.num_workers"),        # the section left out
    ("batch_size", "loader.batch_size"),
    ("cpu_scale", "host.cpu_scale"),
    ("loader.num_worker", "loader.num_workers"),  # misspelt
    ("loader.pin_memry", "loader.pin_memory"),
    ("host.cpu_scal", "host.cpu_scale"),
])
def test_the_meant_path_is_named(path, meant):
    with pytest.raises(ModelError) as e:
        set_value(_model(), path, 1)
    msg = str(e.value)
    assert f"has no field {path.rsplit('.', 1)[-1]!r}; did you mean {meant!r}?" in msg
    assert "(fields: " in msg                     # the list of fields stays


@pytest.mark.parametrize("path", ["loader.foo", "nothing_like_it", "host.zzz"])
def test_no_guess_without_a_near_field(path):
    with pytest.raises(ModelError) as e:
        set_value(_model(), path, 1)
    assert "did you mean" not in str(e.value)
