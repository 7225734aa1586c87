"""What every verb of :mod:`stepsim.api` shares: reading its model, its what-if operations,
refusing an output over an input, its progress bar and simulation keywords, and its caveats.
Loads nothing heavy at import (the verbs import the simulator when they run).
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from stepsim.models.params import StepModel
    from stepsim.scenarios.transforms import Operation

__all__ = ["load_model", "operations"]


def load_model(model: str | Path | StepModel) -> StepModel:
    """A StepModel from a JSON or YAML file (a StepModel is returned as it is).

    Raises:
        InputError: missing or unreadable file, or not a valid StepModel (named).
    """
    from stepsim.models.params import load_model as load

    return model if is_step_model(model) else load(model)


def is_step_model(model) -> bool:
    from stepsim.models.params import StepModel

    return isinstance(model, StepModel)


def operations(ops: Sequence = (), scenario=None, set=None, scale=None, remove=None,
               fix=None) -> list[Operation]:
    """The what-if operations in the order they apply
    (:func:`stepsim.scenarios.options.operations`)."""
    from stepsim.scenarios.options import operations as parse

    return parse(ops, scenario, set, scale, remove, fix)


def model_name(model: str | Path | StepModel, loaded: StepModel) -> str:
    """The model's name, else its file's stem."""
    if loaded.meta.name:
        return loaded.meta.name
    return Path(model).stem if not is_step_model(model) else "model"


def guard(inputs: Sequence, ops: Sequence = (), scenario=None, first: str = "model",
           **outputs) -> None:
    """No output (keyword → path) over an input, scenario files included; the first input
    (named ``first``) must be a file path (or a StepModel).

    Raises:
        ArgumentError: the first input is neither (e.g. None or a dict).
    """
    import os

    from stepsim.limits import ArgumentError

    if not (isinstance(inputs[0], (str, os.PathLike)) or is_step_model(inputs[0])):
        raise ArgumentError(f"{first}: expected a file path or a StepModel, got "
                            f"{type(inputs[0]).__name__}")
    from stepsim.scenarios.options import scenario_files
    from stepsim.simcore.outputs import refuse_overwriting_inputs

    refuse_overwriting_inputs([*inputs, *scenario_files(ops, scenario)], outputs.items())


def progress_bar(description: str, enabled: bool):
    """A progress bar on stderr (a terminal only), or none."""
    if not enabled:
        return nullcontext(None)
    from stepsim.report.planner import progress_bar as bar

    return bar(description)


def sim_kw(steps: int | None, warmup: int, seed: int, jobs: int) -> dict:
    """The simulation keywords of a verb (``jobs`` 0: the CPUs available)."""
    from stepsim.scenarios.parallel import default_jobs

    return {"steps": steps, "warmup": warmup, "seed": seed, "jobs": jobs or default_jobs()}


def caveats(model: StepModel, ops: Sequence[Operation], paths: Sequence[str] = ()):
    """What the operations cannot show on this model (:func:`stepsim.scenarios.caveats`)."""
    from stepsim.scenarios.caveats import caveats as said

    return tuple(said(model, ops, paths))
