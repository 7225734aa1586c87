"""What every verb of :mod:`stepsim.api` shares: reading its model, its what-if operations,
refusing an output over an input, its progress bar and simulation keywords, and its caveats.
Loads nothing heavy at import (the verbs import the simulator when they run).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
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


ACCEPTED = {
    "scenario": "a scenario file path, or a list of them",
    "set": '"PATH=VALUE", a mapping path -> value, or a list of "PATH=VALUE" texts or '
           "(path, value) pairs",
    "scale": 'a (factor, selector) pair, e.g. (0.5, "category=gemm"), or a list of them',
    "remove": 'a selector text, e.g. "name=Memcpy*", or a list of them',
    "fix": '"NAME[:ARG=V,...]", or a list of them',
}
"""What each keyword form of the what-if operations takes (one value, or a list)."""


def _one_op(kind: str, v) -> bool:
    """Whether ``v`` is one operation of ``kind`` in a form :data:`ACCEPTED` names."""
    from numbers import Real

    from stepsim.scenarios.transforms import Operation

    if isinstance(v, Operation):
        return True
    if kind == "scenario":
        return isinstance(v, (str, os.PathLike))
    pair = isinstance(v, (tuple, list)) and len(v) == 2
    if kind == "set":
        return isinstance(v, str) or (pair and isinstance(v[0], str))
    if kind == "scale":
        return pair and isinstance(v[1], str) and not isinstance(v[0], bool) \
            and isinstance(v[0], (Real, str))
    return isinstance(v, str)


def _checked_ops(kind: str, value) -> list:
    """The operations of one keyword form as a list, each in a form it takes.

    Raises:
        ArgumentError: a value in no form :data:`ACCEPTED` names, naming the keyword.
    """
    from stepsim.limits import ArgumentError

    if value is None:
        return []
    if kind == "set" and isinstance(value, Mapping):
        value = list(value.items())
    elif _one_op(kind, value) and not (kind == "set" and isinstance(value, (tuple, list))):
        return [value]
    elif not isinstance(value, (tuple, list)):
        raise ArgumentError(f"{kind}: {value!r} is not {ACCEPTED[kind]}")
    for v in value:
        if not _one_op(kind, v):   # a tuple is named whole: scale=(0.5,) meant one pair
            bad = value if isinstance(value, tuple) else v
            raise ArgumentError(f"{kind}: {bad!r} is not {ACCEPTED[kind]}")
    return list(value)


def operations(ops: Sequence = (), scenario=None, set=None, scale=None, remove=None,
               fix=None) -> list[Operation]:
    """The what-if operations in the order they apply
    (:func:`stepsim.scenarios.options.operations`).

    Raises:
        ArgumentError: an operation in no form the keyword takes (:data:`ACCEPTED`), e.g.
            ``scale=(0.5,)``, naming the keyword; StepsimError: a bad operation text.
    """
    from stepsim.scenarios.options import KINDS, op_items, operations as parse

    for item in op_items(ops):
        if isinstance(item, tuple) and len(item) == 2 and item[0] in KINDS:
            _checked_ops(item[0], [item[1]])
    return parse(ops, *(_checked_ops(k, v) for k, v in
                        zip(KINDS, (scenario, set, scale, remove, fix))))


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
    from stepsim.limits import ArgumentError

    if not (isinstance(inputs[0], (str, os.PathLike)) or is_step_model(inputs[0])):
        raise ArgumentError(f"{first}: expected a file path or a StepModel, got "
                            f"{type(inputs[0]).__name__}")
    bad = next((x for x in inputs[1:] if x is not None and not isinstance(x, (str, os.PathLike))),
               None)
    if bad is not None:   # calibrate(t, sidecar=5) was a TypeError from pathlib
        raise ArgumentError(f"expected file paths for the {first}'s other inputs (sidecar, "
                            f"replicates, traces, ledger, measured), got "
                            f"{type(bad).__name__} {bad!r}")
    from stepsim.simcore.outputs import refuse_overwriting_inputs

    files = []
    if ops or scenario is not None:   # (the scenarios are not imported for a calibrate)
        from stepsim.scenarios.options import scenario_files

        files = scenario_files(ops, scenario)
    refuse_overwriting_inputs([*inputs, *files], outputs.items())


def progress_bar(description: str, enabled: bool):
    """Progress on stderr (:mod:`report.progress`: a bar on a terminal, plain lines after
    half a minute elsewhere), or none."""
    if not enabled:
        return nullcontext(None)
    from stepsim.report.progress import progress_bar as bar

    return bar(description)


def sim_kw(steps: int | None, warmup: int, seed: int, jobs: int) -> dict:
    """The simulation keywords of a verb (``jobs`` 0: the CPUs available; more than them:
    capped there, :func:`scenarios.parallel.capped_jobs`, whose warning the CLI prints)."""
    from stepsim.scenarios.parallel import capped_jobs

    return {"steps": steps, "warmup": warmup, "seed": seed, "jobs": capped_jobs(jobs)[0]}


def input_warnings(model) -> tuple[str, ...]:
    """What is wrong with a model's own capture (:func:`scenarios.caveats.input_caveats`), a
    file or a StepModel, for a verb that applies no operation to it (``simulate``, ``ceiling``,
    ``report``); none where it cannot be read as a model (the verb
    then says so in its own words)."""
    from stepsim.scenarios.caveats import input_caveats
    from stepsim.simcore.errors import StepsimError

    try:
        m = load_model(model)
    except StepsimError:   # the verb itself refuses it, in one line
        return ()
    return tuple(input_caveats(m))


def caveats(model: StepModel, ops: Sequence[Operation], paths: Sequence[str] = ()):
    """What the operations cannot show on this model (:func:`stepsim.scenarios.caveats`)."""
    from stepsim.scenarios.caveats import caveats as said

    return tuple(said(model, ops, paths))
