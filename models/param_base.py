"""The StepModel's building blocks: units and bounds, the vocabularies (sources, kernel
categories, training phases), the strict pydantic base every parameter type derives from, and
:class:`DurationSpec`, a duration distribution in µs.

Every time is in **µs**, every size in **bytes**, every rate in **GB/s**
(see :mod:`models.params`).
"""
from __future__ import annotations

from types import UnionType
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from stepsim.simcore.dists import Constant, Duration, Empirical, LogNormal
from stepsim.simcore.errors import ModelError

Source = Literal["measured", "inferred", "assumed"]
CATEGORIES = (
    "gemm", "conv", "elementwise", "reduction", "normalization", "attention",
    "memcpy", "memset", "communication", "optimizer", "other",
)
Category = Literal[
    "gemm", "conv", "elementwise", "reduction", "normalization", "attention",
    "memcpy", "memset", "communication", "optimizer", "other",
]
PHASES = ("forward", "backward", "optimizer", "data", "other")
Phase = Literal["forward", "backward", "optimizer", "data", "other"]
SCHEMA_VERSION = 7
"""The StepModel schema this stepsim writes (``schema_version``); what each version changed is
:mod:`models.schema`'s."""
MAX_WORKERS, MAX_PREFETCH, MAX_THREADS, MAX_CORES = 1024, 1024, 256, 4096
"""Bounds on loader settings: far beyond any real DataLoader or host, and small enough that a
typo (``num_workers=1000000``) is an error rather than a simulation that never ends."""
MAX_OUTSTANDING = 16384
"""Most batches ``num_workers × prefetch_factor`` may keep outstanding in a simulation."""
MAX_LOADER_THREADS = 16384
"""Most threads ``num_workers × threads_per_worker`` the DataLoader may run: each batch runs
as that many simulated threads, and 1024 workers × 256 threads (a batch of 256 threads for each
of the 2,048 outstanding at the start) took 132 s for a ``whatif`` on 2 cores, where 1024 × 16
took 26 s (2026-12-05)."""
MAX_RANKS = 512
"""Most ranks one model simulates."""
MAX_RANK_ID = 2**31 - 1
"""Largest rank number (and world size) accepted: what c10d's int rank holds."""


LAUNCH_QUEUE_DEPTH = 1024
"""Pending launches CUDA's launch queue holds before a launch blocks the host: about 1024, an
undocumented figure consistent with traces where the host stalls inside ``cudaLaunchKernel``
(assumed; a calibrated model raises it when its trace shows more pending)."""
MAX_LAUNCH_QUEUE_DEPTH = 1 << 24
"""Largest ``device.launch_queue_depth`` accepted (a bound on typos, not a hardware figure)."""


MAX_DURATION_US = 1e12
"""Longest duration (µs, about 11.6 days) any one field may hold: beyond any real step, and
small enough that sums of them stay finite."""
Micros = Annotated[float, Field(ge=0, le=MAX_DURATION_US)]
"""A duration in µs, 0 to ``MAX_DURATION_US``."""
StepMicros = Annotated[float, Field(gt=0, le=MAX_DURATION_US)]
"""A measured step time in µs: a step always takes some time."""


def non_empty(obj, *names: str) -> None:
    """Raise ValueError if a list field among ``names`` of ``obj`` is given but empty."""
    for name in names:
        if getattr(obj, name) == []:
            raise ValueError(f"{name} must not be empty")


def _scalar_kind(annotation, in_list: bool = False) -> str | None:
    """``"int"``, ``"float"`` or ``"bool"`` for a field of that type (or that type or None);
    ``"[int]"`` etc. for a list of them."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    origin = get_origin(annotation)
    if origin is None:
        args = [annotation]
    elif origin in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
    elif origin is list and not in_list:
        kind = _scalar_kind(get_args(annotation)[0], True)
        return f"[{kind}]" if kind else None
    else:
        return None
    args = [get_args(a)[0] if get_origin(a) is Annotated else a for a in args]
    if len(args) == 1 and args[0] in (int, float, bool):
        return args[0].__name__
    if len(args) == 1 and get_origin(args[0]) is list and not in_list:
        return _scalar_kind(args[0])
    return None


_SCALAR_KINDS: dict[type, dict[str, str]] = {}


def _scalar_fields(cls) -> dict[str, str]:
    """Field name → :func:`_scalar_kind` of model class ``cls``, computed once per class (the
    check runs on every object built, and ``model_fields`` is slow to read)."""
    kinds = _SCALAR_KINDS.get(cls)
    if kinds is None:
        kinds = _SCALAR_KINDS[cls] = {
            name: k for name, f in cls.model_fields.items()
            if (k := _scalar_kind(f.annotation)) is not None}
    return kinds


def _bounds(field) -> str:
    """`` from LO to HI`` (or `` >= LO``, `` <= HI``) of a field's ``ge``/``le``, else ''."""
    lo = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    hi = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if lo is not None and hi is not None:
        return f" from {lo} to {hi}"
    return f" >= {lo}" if lo is not None else f" <= {hi}" if hi is not None else ""


_PLAIN_TYPES: dict[type, tuple[dict[str, frozenset], dict[str, frozenset]]] = {}


def _plain_types(cls) -> tuple[dict[str, frozenset], dict[str, frozenset]]:
    """(scalar field name → the value types that pass :meth:`StrictScalars._strict_scalars`
    without a further look: its plain types and None, or only None for a list field; list
    field name → its elements' plain types), computed once per class. A name not in the first
    is no scalar field: nothing to check."""
    out = _PLAIN_TYPES.get(cls)
    if out is None:
        kinds = _scalar_fields(cls)
        out = _PLAIN_TYPES[cls] = (
            {name: frozenset({type(None)} if kind[0] == "[" else _PLAIN[kind] | {type(None)})
             for name, kind in kinds.items()},
            {name: frozenset(_PLAIN[kind[1:-1]]) for name, kind in kinds.items()
             if kind[0] == "["})
    return out


_SCALAR_OK = {"bool": lambda v: isinstance(v, bool),
              "int": lambda v: not isinstance(v, (bool, str, float)),
              "float": lambda v: not isinstance(v, (bool, str))}
_PLAIN = {"bool": {bool}, "int": {int}, "float": {float, int}}
_WHAT = {"int": "an integer", "float": "a number", "bool": "true or false"}
_LIST_WHAT = {"int": "integers", "float": "numbers", "bool": "true or false"}


def _refuse(name: str, what: str) -> PydanticCustomError:
    """A strict scalar's error: its field's ``name`` in ``ctx`` (a model's own check has the
    model's location: :func:`error_at` adds the field to it)."""
    return PydanticCustomError("strict_scalar", "{field} {what}", {"field": name, "what": what})


class StrictScalars(BaseModel):
    """A model whose numbers, counts and switches must be written as such (no configuration
    of its own: the sidecar's and the ledger's records derive from it too)."""

    @model_validator(mode="before")
    @classmethod
    def _strict_scalars(cls, data):
        """A number, a count or a switch must be written as one: pydantic's lax mode would read
        ``"4"`` as 4, ``true`` as 1 and ``"yes"`` as True. (One check per object, not one per
        field: a field validator on every field made a 2.7 MB model's validation 30 % slower,
        40 to 52 ms, 2026-12-05.)"""
        if isinstance(data, dict):
            kinds = _scalar_fields(cls)
            plain, plain_lists = _plain_types(cls)
            for name, value in data.items():
                ok = plain.get(name)    # None: no scalar field, nothing to check
                if ok is None or type(value) in ok:   # (most values: one set lookup)
                    continue
                if type(value) is list and set(map(type, value)) <= plain_lists.get(name, frozenset()):
                    continue
                kind = kinds.get(name) if isinstance(name, str) else None
                if kind and kind[0] == "[":   # a list's elements: ``shape: [true]``
                    kind = kind[1:-1]
                    ok = _SCALAR_OK[kind]   # (the types first: a list of 1,000 in 15 µs)
                    bad = next((v for v in value if not ok(v)), None) if isinstance(
                        value, list) and not set(map(type, value)) <= _PLAIN[kind] else None
                    if bad is not None:
                        raise _refuse(name, f"must hold only {_LIST_WHAT[kind]}, not "
                                            f"{type(bad).__name__} {bad!r}")
                    continue
                if kind == "int" and isinstance(value, float):   # 1e20, 4.0: not a count
                    raise _refuse(name, f"must be a whole number"
                                        f"{_bounds(cls.model_fields[name])}, not {value!r}")
                if kind and value is not None and not _SCALAR_OK[kind](value):
                    raise _refuse(name, f"must be {_WHAT[kind]}, not "
                                        f"{type(value).__name__} {value!r}")
        return data


def error_parts(err: dict) -> tuple[tuple, str]:
    """A pydantic error's location (a strict scalar's field added to its model's) and message
    (without pydantic's ``Value error, ``)."""
    if err["type"] == "strict_scalar":
        return (*err["loc"], err["ctx"]["field"]), err["ctx"]["what"]
    return tuple(err["loc"]), err["msg"].removeprefix("Value error, ")


def error_at(e: ValidationError) -> tuple[str, str]:
    """Where pydantic's first error is, its location's parts joined with dots (``loader.
    num_workers``, ``ddp.params.0.shape``; '' at the top), and what it says
    (:func:`error_parts`)."""
    loc, msg = error_parts(e.errors()[0])
    return ".".join(str(x) for x in loc), msg


class StrictModel(StrictScalars):
    # infinities and NaNs are refused everywhere: no real duration, size or rate is one
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def copy_with(model: BaseModel, update: dict) -> BaseModel:
    """``model.model_copy(update=update)`` (a shallow copy, ``update``'s values set without
    validation and marked as set) without pydantic's general path: about 1.6x cheaper (0.91 against 1.44 µs a DeviceTask,
    1.6 against 2.5 µs a HostOp, pydantic 2.13, a microbenchmark of 2026-12-05), for the
    thousands of ops and tasks a Monte Carlo draw copies. The same object state for a
    :class:`StrictModel` (no extra fields, no private attributes); any other model goes the
    general way."""
    if model.__pydantic_extra__ is not None or getattr(model, "__pydantic_private__", None):
        return model.model_copy(update=update)
    cls = type(model)
    m = cls.__new__(cls)
    _set = object.__setattr__
    _set(m, "__dict__", {**model.__dict__, **update})
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(m, "__pydantic_private__", None)
    return m


class DurationSpec(StrictModel):
    """A duration distribution in µs, hand-writable as ``{mean_us: 900, cv: 0.1}`` or
    ``{samples_us: [...]}`` (resampled with replacement; ``mean_us`` is then their mean)."""

    mean_us: Micros
    cv: float = Field(default=0.0, ge=0)
    samples_us: list[Micros] | None = None

    @model_validator(mode="after")
    def _check_samples(self):
        non_empty(self, "samples_us")
        return self

    @classmethod
    def constant(cls, us: float) -> "DurationSpec":
        return cls(mean_us=us)

    @classmethod
    def from_samples(cls, samples_us: list[float]) -> "DurationSpec":
        s = [float(v) for v in samples_us]
        return cls(mean_us=sum(s) / len(s), samples_us=s)

    def build(self) -> Duration:
        """The simcore distribution: Empirical if samples are given, else LogNormal (cv > 0)
        or Constant."""
        if self.samples_us:
            return Empirical(tuple(self.samples_us))
        if self.cv > 0:
            return LogNormal(self.mean_us, self.cv)
        return Constant(self.mean_us)

    def scaled(self, factor: float) -> "DurationSpec":
        """Every value multiplied by ``factor`` (≥ 0)."""
        if factor < 0:
            raise ModelError(f"scale factor must be >= 0, got {factor}")
        return DurationSpec(
            mean_us=self.mean_us * factor, cv=self.cv,
            samples_us=None if self.samples_us is None else [v * factor for v in self.samples_us],
        )
