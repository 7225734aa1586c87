"""The what-if language's spellings (:mod:`scenarios.transforms` holds the operations):
scenario files (:func:`load_scenario`) and the CLI's ``--set``, ``--scale``, ``--remove`` and
``--fix`` (:func:`parse_set`, :func:`parse_selector`, :func:`parse_scale`,
:func:`parse_remove`, :func:`parse_fix`; values read by
:func:`scenarios.transforms.parse_value`)."""
from __future__ import annotations

import math
from pathlib import Path

from pydantic import ValidationError

from stepsim.models.param_base import error_parts
from stepsim.scenarios.paths import telling_error
from stepsim.scenarios.select import Selector
from stepsim.scenarios.transforms import (FixOp, RemoveOp, ScaleOp, Scenario, SetOp, _pairs,
                                          parse_value)
from stepsim.simcore.errors import InputError, ModelError
from stepsim.simcore.files import read_input
from stepsim.simcore.parsing import parse_yaml


def _error_text(e: ValidationError) -> str:
    err = telling_error(e)
    where, msg = error_parts(err)
    loc = ".".join(str(x) for x in where) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown key {str(err['loc'][-1])!r}"
    if err["type"] == "union_tag_invalid":
        return f"{loc}: unknown op {err['input'].get('op')!r} (ops: set, scale, remove, fix)"
    return f"{loc}: {msg}"


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (``.yaml``/``.yml`` as YAML, anything else as JSON, which YAML
    also reads).

    Raises:
        InputError: missing or unreadable file, bad syntax, an unknown key, op or fix, or a bad
            fix argument (the message names it and where it is).
    """
    p = Path(path)
    data = parse_yaml(p, read_input(p, "scenario"), "scenario")
    if not isinstance(data, dict):
        raise InputError(p, "expected a scenario object with 'ops'")
    if "schema_version" in data or "host" in data:
        raise InputError(p, "this is a StepModel, not a scenario (pass it as MODEL)")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        raise InputError(p, f"not a valid scenario: {_error_text(e)}") from None
    except ModelError as e:
        raise InputError(p, f"not a valid scenario: {e}") from None
    for op in scenario.ops:
        op._source = str(p)
    return scenario


def parse_set(text: str) -> SetOp:
    """``loader.num_workers=4`` → SetOp. Raises ModelError for a missing ``=`` or value."""
    path, eq, val = text.partition("=")
    if not eq or not path.strip() or not val.strip():
        raise ModelError(f"bad --set {text!r}: expected PATH=VALUE (e.g. loader.num_workers=4)")
    return SetOp(path=path.strip(), value=parse_value(val))


def parse_selector(text: str) -> Selector:
    """``category=gemm|conv,phase=forward`` → Selector (``all`` or empty: everything).

    Raises:
        ModelError: bad syntax, or an unknown filter or value (named).
    """
    raw = {} if text.strip() in ("", "all") else _pairs(text, "selector")
    try:
        return Selector.model_validate(raw)
    except ValidationError as e:
        raise ModelError(f"bad selector {text!r}: {_error_text(e)} (filters: "
                         f"{', '.join(Selector.model_fields)})") from None


def parse_scale(factor: str, selector: str) -> ScaleOp:
    """``--scale FACTOR SELECTOR`` → ScaleOp. Raises ModelError for a bad factor."""
    try:
        f = float(factor)
    except ValueError:
        raise ModelError(f"bad --scale factor {factor!r}: expected a number") from None
    if math.isnan(f):
        raise ModelError(f"bad --scale factor {factor!r}: not a number")
    if not 0 <= f < math.inf:
        raise ModelError(f"bad --scale factor {factor!r}: must be a finite number >= 0")
    return ScaleOp(select=parse_selector(selector), factor=f)


def parse_remove(selector: str) -> RemoveOp:
    """``--remove SELECTOR`` → RemoveOp."""
    return RemoveOp(select=parse_selector(selector))


def parse_fix(text: str) -> FixOp:
    """``NAME`` or ``NAME:arg=value,arg=value`` → FixOp.

    Raises:
        ModelError: unknown fix or argument, or a bad value (named).
    """
    name, _, rest = text.partition(":")
    try:
        return FixOp(name=name.strip(), args=_pairs(rest, f"--fix {name} arguments"))
    except ValidationError as e:
        raise ModelError(f"bad --fix {text!r}: {_error_text(e)}") from None
