"""An API verb given something that is neither a file path nor a StepModel says so naming the
argument (ArgumentError, a StepsimError), not a TypeError from pathlib."""
from __future__ import annotations

import pytest

from stepsim import api
from stepsim.limits import ArgumentError


@pytest.mark.parametrize("bad", [None, {"a": 1}, 3])
def test_a_model_that_is_not_a_path_names_the_argument(bad):
    with pytest.raises(ArgumentError, match="^model: expected a file path or a StepModel, got"):
        api.whatif(bad, set="loader.num_workers=2")
    with pytest.raises(ArgumentError, match="^trace: expected a file path"):
        api.calibrate(bad)
