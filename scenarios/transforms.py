"""The what-if language: operations on a StepModel, scenario files, and the CLI's spellings.

Every operation is a pure transform with one signature, ``StepModel -> StepModel``: the input
is never changed and the output is a validated StepModel (``op.apply(model)``). There are four:

=========  ================================================================================
op         meaning
=========  ================================================================================
set        a parameter at a dotted path to a value (:mod:`scenarios.paths`):
           ``{op: set, path: loader.num_workers, value: 8}``
scale      durations of what a selector picks, by a factor (:mod:`scenarios.primitives`,
           :mod:`scenarios.select`): ``{op: scale, select: {category: gemm}, factor: 0.5}``
remove     what a selector picks: ``{op: remove, select: {name: "aten::copy_*"}}``
fix        a named fix with arguments (:mod:`scenarios.fixes`):
           ``{op: fix, name: mixed_precision, args: {factor: 0.6}}``
=========  ================================================================================

A scenario file (YAML or JSON) holds ``name``, ``description`` and ``ops`` (a list, applied in
order). Unknown keys, unknown fixes and bad arguments are errors that name them; paths and
selectors are checked against the model when applied.

CLI spellings (:mod:`scenarios.op_text`, which also reads scenario files):
``--set loader.num_workers=4``, ``--scale 0.5 category=gemm|conv,phase=forward``,
``--remove name=aten::copy_*``, ``--fix cuda_graphs:launch_us=8,phases=forward|backward``.
Values are read as YAML scalars (``4``, ``0.5``, ``true``, ``null``); ``|`` separates
alternatives.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from stepsim.models.params import StepModel
from stepsim.models.team_inversion import reinverted
from stepsim.scenarios.fixes import get_fix
from stepsim.scenarios.paths import replaced, set_value
from stepsim.scenarios.primitives import remove, scale
from stepsim.scenarios.select import Selector
from stepsim.simcore.errors import ModelError, NotApplicable, shown
from stepsim.simcore.parsing import yaml_value


class Operation(BaseModel):
    """One what-if operation: ``apply(model)`` is the pure transform, ``describe()`` says it
    in the CLI's words. The result has no captured window (``StepModel.replay``): a changed
    model no longer replays the capture."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _source: str | None = PrivateAttr(default=None)
    """The scenario file it was read from, which its error names (None: the command line)."""

    def __eq__(self, other) -> bool:   # its fields, wherever it was read from
        return type(other) is type(self) and self.__dict__ == other.__dict__

    def apply(self, model: StepModel) -> StepModel:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


class SetOp(Operation):
    """Set the parameter at ``path`` to ``value``."""

    op: Literal["set"] = "set"
    path: str
    value: Any

    def apply(self, model: StepModel) -> StepModel:
        return set_path(model.without_replay(), self.path, self.value)

    def describe(self) -> str:
        return f"set {self.path}={_show(self.value)}"


def set_path(model: StepModel, path: str, value: Any) -> StepModel:
    """``model`` with the parameter at ``path`` set to ``value`` and what it carries moved
    with it: DDP's buckets rebuilt, the batch's physics, pinned copies, and for
    ``host.team_stall`` the step's work re-inverted at the new ``γ`` where it was inverted
    from a contended capture (:func:`models.team_inversion.reinverted`). One path for a
    what-if's ``set`` and an interval's draw of an absolute value
    (:func:`scenarios.draws.perturb`), so both answer one question.

    Raises:
        ModelError: a path that does not resolve, or a value the model refuses.
    """
    if path in ("comm.bucket_cap_mb", "comm.first_bucket_cap_mb"):
        # DDP's buckets are rebuilt as DDP builds them (models.ddp.set_bucket_caps)
        from stepsim.models.ddp import set_bucket_caps

        key = path.split(".")[1]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ModelError(f"--set {path}: expected a number of MiB, got {value!r}")
        return set_bucket_caps(model, **{key: float(value)})
    if path == "loader.batch_size":
        # the batch's physics: produce, bytes, the step's per-sample work (batch_size.py)
        from stepsim.scenarios.batch_size import set_batch_size

        return set_batch_size(model, value)
    if path == "loader.pin_memory" and value is True and not model.loader.pin_memory:
        # one meaning with --fix pin_memory: pinning also makes the H2D copies pinned
        from stepsim.scenarios.fixes import PinArgs, _pin_memory

        return _pin_memory(model, PinArgs())
    if path == "host.refault_share_runs":
        raise ModelError("--set host.refault_share_runs: the runs a measured share was the mean "
                         "of are not set by hand (the point would not move with them); set "
                         "host.refault_share")
    if path == "host.refault_share" and model.host.refault_share_runs:
        # the measured runs were the old value's: the set value is held, not drawn from them
        model = model.model_copy(update={"host": model.host.model_copy(
            update={"refault_share_runs": []})})
    if path == "host.team_stall":
        # the work inverted at the old γ moves with it; the value checked alone first (the
        # work at the old γ beside the new one is no model: its re-inversion check misleads)
        plain = model.model_copy(update={"host": model.host.model_copy(
            update={"team_stall_share": None})})
        return reinverted(model, replaced(plain, path, value).host.team_stall)
    return replaced(model, path, value)


class ScaleOp(Operation):
    """Multiply durations of what ``select`` picks by ``factor`` (≥ 0)."""

    op: Literal["scale"] = "scale"
    select: Selector = Field(default_factory=Selector)
    factor: float = Field(ge=0)

    def apply(self, model: StepModel) -> StepModel:
        return scale(model.without_replay(), self.select, self.factor)

    def describe(self) -> str:
        return f"scale {self.select.describe()} x{self.factor:g}"


class RemoveOp(Operation):
    """Remove what ``select`` picks."""

    op: Literal["remove"] = "remove"
    select: Selector

    def apply(self, model: StepModel) -> StepModel:
        return remove(model.without_replay(), self.select)

    def describe(self) -> str:
        return f"remove {self.select.describe()}"


class FixOp(Operation):
    """Apply the named fix ``name`` with ``args`` (checked when the op is built)."""

    op: Literal["fix"] = "fix"
    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _cli_form(cls, data):
        """``name: "straggler:rank=1,ms=30"`` (the ``--fix`` text) in a scenario file: the
        arguments after the colon join ``args`` (one given in both is an error)."""
        if isinstance(data, dict) and isinstance(data.get("name"), str) and ":" in data["name"]:
            name, _, rest = data["name"].partition(":")
            pairs, args = _pairs(rest, f"fix {name.strip()} arguments"), data.get("args")
            args = {} if args is None else args
            if not isinstance(args, dict):   # ``args: "ms=30"`` was a TypeError traceback
                raise ValueError(f"args must map each argument to its value (as "
                                 f"{{ms: 30}}), not {type(args).__name__} {args!r:.40}")
            if both := sorted(set(pairs) & set(args)):
                raise ValueError(f"{', '.join(both)} given in name and in args")
            data = {**data, "name": name.strip(), "args": {**args, **pairs}}
        return data

    @model_validator(mode="after")
    def _check(self):
        fix, fields = get_fix(self.name), get_fix(self.name).args.model_fields
        missing = [n for n, f in fields.items() if f.is_required() and n not in self.args]
        # a device fix missing an argument is refused where it is applied, after whether it
        # applies at all (on a CPU model "factor: Field required" hid that it does not)
        if not (fix.needs_device and missing and set(self.args) <= set(fields)):
            fix.parse_args(self.args)
        return self

    def apply(self, model: StepModel) -> StepModel:
        try:
            return get_fix(self.name).apply(model, self.args)
        except ModelError as e:   # "set loader.num_workers=1e9" named no --fix the user gave
            if isinstance(e, NotApplicable) or str(e).startswith(f"fix {self.name}"):
                raise
            raise ModelError(f"{self.describe()}: {e}") from None

    def describe(self) -> str:
        inner = ",".join(f"{k}={_show(v)}" for k, v in self.args.items())
        return f"fix {self.name}" + (f"({inner})" if inner else "")


Op = Annotated[Union[SetOp, ScaleOp, RemoveOp, FixOp], Field(discriminator="op")]


class Scenario(BaseModel):
    """A named list of operations, as read from a scenario file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    description: str = ""
    ops: tuple[Op, ...] = ()

    def apply(self, model: StepModel) -> StepModel:
        return apply_ops(model, self.ops)


def _show(v: Any) -> str:
    """A value as the CLI spells it (``a|b`` for a list, YAML's ``true``/``null``)."""
    if isinstance(v, (list, tuple)):
        return "|".join(map(_show, v))
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    return str(v)


def apply_ops(model: StepModel, ops: Sequence[Operation]) -> StepModel:
    """Apply ``ops`` in order; pure (``model`` is unchanged). The result is a DataLoader
    PyTorch accepts (:func:`apply_with_notes`).

    Raises:
        ModelError: the first op that does not apply (unknown path, empty selection, a fix that
            does not fit the model, an invalid result), named in the message.
    """
    return apply_with_notes(model, ops)[0]


PREFETCH_DEFAULT = 2
"""The model's ``prefetch_factor`` without workers: it stands for PyTorch's ``None``."""


class PrefetchWithoutWorkers(ModelError):
    """Operations that set a ``prefetch_factor`` (or ``persistent_workers``) for a DataLoader
    they leave without workers, which PyTorch's DataLoader refuses."""


def _sets_prefetch(op: Operation) -> bool:
    """``op`` sets a prefetch_factor (other than the default, which stands for None)."""
    return (isinstance(op, SetOp) and op.path == "loader.prefetch_factor"
            and op.value != PREFETCH_DEFAULT) or (isinstance(op, FixOp)
                                                  and op.name == "prefetch_factor")


def apply_with_notes(model: StepModel, ops: Sequence[Operation]) -> tuple[StepModel,
                                                                          tuple[str, ...]]:
    """:func:`apply_ops`, and what the result could not honour as given, in words.

    PyTorch's DataLoader raises ValueError for ``num_workers=0`` with a ``prefetch_factor``
    (torch/utils/data/dataloader.py: "prefetch_factor option could only be specified in
    multiprocessing"), and without workers nothing prefetches. So:

    - ops that set a prefetch_factor (``--set``, ``--fix prefetch_factor``) and end without
      workers are refused, as PyTorch refuses them, in whatever order they come (in between
      they may: ``--set loader.prefetch_factor=4 --set loader.num_workers=2`` on a model
      without workers is a DataLoader PyTorch accepts);
    - otherwise an op that takes the workers to 0 takes the model's prefetch_factor with them
      (back to the default, PyTorch's ``None``, also if workers return later): what a user who
      sets ``num_workers=0`` must write for the DataLoader to accept the call; a note says so.

    ``persistent_workers`` follows the same rule ("persistent_workers option needs
    num_workers > 0"): ending with it on and no workers is refused, and taking the workers
    away takes it with them (a note says so).

    Raises:
        ModelError: as :func:`apply_ops`; PrefetchWithoutWorkers: the first case.
    """
    out, dropped, persistent = model, [], False
    for op in ops:
        try:
            after = op.apply(out)
        except ModelError as e:   # a scenario file's op: the file is named (NotApplicable:
            if op._source is None or isinstance(e, NotApplicable):   # the model is)
                raise
            raise ModelError(f"{shown(op._source)}: {e}") from None
        lo = after.loader
        if out.loader.num_workers > 0 and lo.num_workers == 0 \
                and lo.prefetch_factor != PREFETCH_DEFAULT:
            dropped.append(lo.prefetch_factor)
            after = set_value(after, "loader.prefetch_factor", PREFETCH_DEFAULT)
        if out.loader.num_workers > 0 and lo.num_workers == 0 and lo.persistent_workers:
            persistent = True
            after = set_value(after, "loader.persistent_workers", False)
        out = after
    explicit = [op for op in ops if _sets_prefetch(op)]
    if explicit and out.loader.num_workers == 0:
        raise PrefetchWithoutWorkers(
            f"{explicit[-1].describe()} with loader.num_workers=0: PyTorch's DataLoader raises "
            "ValueError for a prefetch_factor without workers (it only applies with "
            "num_workers > 0)")
    if out.loader.num_workers == 0 and (out.loader.persistent_workers or any(
            isinstance(op, SetOp) and op.path == "loader.persistent_workers"
            and op.value is True for op in ops)):
        raise PrefetchWithoutWorkers(
            "set loader.persistent_workers=true with loader.num_workers=0: PyTorch's DataLoader "
            "raises ValueError (\"persistent_workers option needs num_workers > 0\")")
    if any(isinstance(op, SetOp) and op.path == "loader.prefetch_factor" for op in ops):
        dropped = []                # set to the default as asked: nothing was dropped
    notes = tuple(f"loader.num_workers=0: prefetch_factor={n} is dropped with the workers "
                  "(PyTorch's DataLoader raises ValueError for a prefetch_factor without "
                  "workers): from there on it is left out of the DataLoader call (PyTorch's "
                  "default)" for n in dict.fromkeys(dropped))
    if persistent and not any(isinstance(op, SetOp) and op.path == "loader.persistent_workers"
                              for op in ops):
        notes += ("loader.num_workers=0: persistent_workers=True is dropped with the workers "
                  "(PyTorch's DataLoader raises ValueError for it without workers): from there "
                  "on it is False",)
    return out, notes


def describe_ops(ops: Sequence[Operation]) -> str:
    """The ops in words, joined by ``; `` (``baseline`` when there are none)."""
    return "; ".join(op.describe() for op in ops) or "baseline"


_NON_FINITE = frozenset({"inf", "infinity", "nan"})
"""The words ``float()`` reads as a non-finite number (any case, any sign)."""


def parse_value(text: str) -> Any:
    """A value given on the command line: a JSON scalar (``4``, ``0.5``, ``true``, ``null``),
    a YAML flow map or list (``{mean_us: 900}``, ``[1, 2]``), ``a|b|c`` for a list of values,
    ``inf``/``-inf``/``nan`` as the float (so the model's finite check names it, where the
    text would be refused as "not a number"), else the text itself. YAML's other scalar forms
    are not used (YAML 1.1 reads ``1:4`` as 64 and ``yes`` as true)."""
    text = text.strip()
    if "|" in text:
        return [parse_value(t) for t in text.split("|")]
    if text.lower().lstrip("+-") in _NON_FINITE:
        return float(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    if text[:1] in ("{", "["):
        import yaml   # here, not at the top: a sweep's main process reads no YAML (10 ms)

        try:
            return yaml_value(text)
        except yaml.YAMLError:
            return text
    return text


def _pairs(text: str, what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in filter(None, (s.strip() for s in text.split(","))):
        key, eq, val = part.partition("=")
        if not eq or not key.strip():
            raise ModelError(f"bad {what} {text!r}: expected key=value[,key=value]")
        if key.strip() in out:   # the last would silently win
            either = f" ({key.strip()}=a|b selects either)" if what == "selector" else ""
            raise ModelError(f"bad {what} {text!r}: {key.strip()} is given twice{either}")
        out[key.strip()] = parse_value(val)
    return out
