"""Bad arguments to the Python API found by the tenth breaker (2026-12-06): each raised
Python's own TypeError or IndexError from inside stepsim; now a StepsimError (the CLI's
one-line message) naming the argument."""
from __future__ import annotations

import pytest

import stepsim
from stepsim.limits import ArgumentError
from stepsim.models.params import save_model
from stepsim.simcore.errors import StepsimError
from tests.test_batch_size_whatif import cpu_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("api") / "m.json"
    save_model(cpu_model(1, produce_ms=2, train_ms=1), path)
    return path


@pytest.mark.parametrize("ops, says", [
    (5, "operations 5: expected a list"),
    ({"loader.num_workers": 2}, "operations {'loader.num_workers': 2}: expected a list"),
])
def test_operations_that_are_no_list_are_named(model, ops, says):
    """``whatif(m, 5)`` and a mapping of paths were TypeErrors from the scenario-file scan."""
    with pytest.raises(StepsimError, match=says.replace("{", r"\{").replace("}", r"\}")):
        stepsim.whatif(model, ops)


def test_none_for_the_operations_is_none_given(model):
    """``whatif(m, None)`` was "'NoneType' object is not iterable"; None is no operation, so
    the what-if says it needs one, and a keyword operation beside it is taken."""
    with pytest.raises(StepsimError, match="needs at least one"):
        stepsim.whatif(model, None)
    r = stepsim.whatif(model, None, set="loader.num_workers=2", draws=0, steps=50)
    assert r.scenario.mean_step_us > 0 and r.scenario.mean_step_us != r.baseline.mean_step_us


@pytest.mark.parametrize("values", [3, "0,1", None])
def test_a_sweep_axis_of_no_list_is_named(model, values):
    """``sweep(m, {"loader.num_workers": 3})`` was "'int' object is not iterable"; a text
    value was read as its characters ("0", ",", "1")."""
    with pytest.raises(StepsimError, match="sweep axis 'loader.num_workers': expected a list"):
        stepsim.sweep(model, {"loader.num_workers": values})


@pytest.mark.parametrize("kw", [{"sidecar": 5}, {"replicates": [3]}])
def test_a_calibrate_input_that_is_no_path_is_named(kw):
    """``calibrate(t, sidecar=5)``: "expected str, bytes or os.PathLike object" from pathlib."""
    with pytest.raises(ArgumentError, match="expected file paths.*got int"):
        stepsim.calibrate("trace.json", **kw)


@pytest.mark.parametrize("steps", [(5, "x"), 5, (1, 2, 3), (True, 4), [2.5, 4]])
def test_steps_of_no_whole_numbers_are_named(steps):
    """``steps=(5, "x")`` was read as ``--steps 5:x`` and refused as "outside the trace's
    steps" of the file; a bare number passed on to the reader."""
    with pytest.raises(ArgumentError, match="steps: expected 'A:B' or \\(A, B\\)"):
        stepsim.calibrate("trace.json", steps=steps)


@pytest.mark.parametrize("traces, says", [([], "traces: expected"), (None, "traces: expected"),
                                          ([5], "expected file paths.*got int 5")])
def test_validate_without_a_trace_is_named(model, traces, says):
    """``validate(m, [])`` was an IndexError (the commonest bottleneck of no run),
    ``validate(m, None)`` a TypeError."""
    with pytest.raises(ArgumentError, match=says):
        stepsim.validate(model, traces)
