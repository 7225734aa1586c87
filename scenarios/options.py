"""The what-if operations and sweep axes as people give them, to the CLI (``--set``,
``--scale``, ``--remove``, ``--fix``, ``--scenario``, collected as ``(kind, value)`` pairs in
command-line order) and to the Python API (``set="loader.num_workers=4"`` or
``set={"loader.num_workers": 4}``, ``scale=(0.5, "category=gemm")``, each one value or a list),
turned into :mod:`scenarios.transforms` operations."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Sequence

from stepsim.scenarios.sweep import parse_axis
from stepsim.scenarios.transforms import Operation, SetOp
from stepsim.scenarios.op_text import load_scenario, parse_fix, parse_remove, parse_scale, parse_set
from stepsim.simcore.errors import ModelError, StepsimError

MAX_OPS = 1000
"""Most what-if operations one verb applies (each one copies the model; a scenario of 200,000
ran past 4 minutes before this bound): far beyond any useful what-if."""

KINDS = ("scenario", "set", "scale", "remove", "fix")
"""The kinds of operation, in the order :func:`operations` applies the keyword forms."""


def _many(kind: str, value: Any) -> list:
    """One option's values as a list (a single value, or a list of them)."""
    if value is None:
        return []
    if kind == "set" and isinstance(value, Mapping):
        return list(value.items())
    if kind == "scale" and isinstance(value, tuple) and len(value) == 2 \
            and not isinstance(value[0], (tuple, list)):
        return [value]
    if isinstance(value, (str, Path, Operation)):
        return [value]
    return list(value)


def _op(kind: str, v: Any) -> list[Operation]:
    if isinstance(v, Operation):
        return [v]
    if kind == "scenario":
        return list(load_scenario(v).ops)
    if kind == "set":
        return [SetOp(path=v[0], value=v[1]) if isinstance(v, tuple) else parse_set(v)]
    if kind == "scale":
        factor, selector = v
        return [parse_scale(str(factor), selector)]
    if kind == "remove":
        return [parse_remove(v)]
    if kind == "fix":
        return [parse_fix(v)]
    raise ModelError(f"unknown kind of operation {kind!r}: expected one of {', '.join(KINDS)}")


def operations(ops: Sequence = (), scenario=None, set=None, scale=None, remove=None,
               fix=None) -> list[Operation]:
    """The what-if operations, in the order they apply: ``ops`` (operation objects or
    ``(kind, value)`` pairs) in their order, then the keyword forms in :data:`KINDS` order.

    Raises:
        ModelError / InputError: a bad operation, or a scenario file that cannot be read.
    """
    if isinstance(ops, (str, Path)):
        raise ModelError(f"operations {str(ops)!r}: give a text by its kind, e.g. "
                         f"set={str(ops)!r} or fix={str(ops)!r}")
    if ops is None:     # Python's "none" (whatif(m, None) was a TypeError from inside)
        ops = ()
    if not isinstance(ops, Iterable) or isinstance(ops, Mapping):
        raise ModelError(f"operations {ops!r}: expected a list of operation objects or "
                         f"(kind, value) pairs, kind one of {', '.join(KINDS)}")
    out: list[Operation] = []
    for item in ops:
        if isinstance(item, Operation):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            out += _op(*item)
        else:
            raise ModelError(f"operation {item!r}: expected an operation object or a "
                             f"(kind, value) pair, kind one of {', '.join(KINDS)}")
    for kind, value in zip(KINDS, (scenario, set, scale, remove, fix)):
        for v in _many(kind, value):
            out += _op(kind, v)
    if len(out) > MAX_OPS:   # each op copies the model: 200,000 ran past 4 minutes
        raise ModelError(f"{len(out):,} what-if operations (scenario files and options "
                         f"together): at most {MAX_OPS:,}")
    return out


def op_items(ops) -> Iterable:
    """``ops``'s items where it is a list of operations; none for anything else (which
    :func:`operations` refuses in its own words)."""
    ok = isinstance(ops, Iterable) and not isinstance(ops, (str, Path, Mapping))
    return ops if ok else ()


def scenario_files(ops: Sequence = (), scenario=None) -> list:
    """The scenario files named in ``(kind, value)`` pairs and in ``scenario`` (inputs that an
    output must not replace)."""
    named = [v for item in op_items(ops) if isinstance(item, tuple) and item[0] == "scenario"
             for v in _many("scenario", item[1])]
    return named + _many("scenario", scenario)


def sweep_grid(axes) -> dict:
    """Sweep axes as the CLI takes them (``"PATH=V1,V2,..."``, one or a list: a grid) or a
    mapping path → values, as path → values.

    Raises:
        StepsimError: a bad axis, or one given twice.
    """
    if isinstance(axes, Mapping):
        bad = next(((k, v) for k, v in axes.items()
                    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, Iterable)), None)
        if bad is not None:   # {path: 3} was a TypeError from inside
            raise StepsimError(f"sweep axis {bad[0]!r}: expected a list of values, got "
                               f"{type(bad[1]).__name__} {bad[1]!r}")
        return {k: list(v) for k, v in axes.items()}
    grid: dict = {}
    for text in [axes] if isinstance(axes, str) else axes:
        path, values = parse_axis(text)
        if path in grid:
            raise StepsimError(f"sweep axis {path!r} is given twice")
        grid[path] = values
    return grid
