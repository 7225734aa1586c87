"""The type of a named fix (:mod:`scenarios.fixes` lists them): its name, kind, what it
changes, its arguments (a pydantic model; unknown arguments are errors) and its transform."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from pydantic import ConfigDict, ValidationError

from stepsim.models.param_base import StrictScalars, error_parts
from stepsim.models.params import StepModel
from stepsim.scenarios.paths import telling_error
from stepsim.simcore.errors import ModelError, NotApplicable

__all__ = ["Fix", "FixArgs", "FixKind", "NO_DEVICE_WHY", "nothing"]

FixKind = Literal["systems", "numerics", "algorithm", "hardware"]

NO_DEVICE_WHY = "it has no device (a CPU run)"
"""Why a fix that needs a device (``Fix.needs_device``) is refused on a CPU run, before the
fix's own reason."""


class FixArgs(StrictScalars):
    """A fix's arguments: frozen, unknown keys, non-finite numbers and numbers of the wrong
    kind refused (pydantic's lax mode read ``--fix more_workers:workers=true`` and a scenario's
    ``rank: true`` as 1, silently)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


@dataclass(frozen=True)
class Fix:
    """One named fix.

    Attributes:
        name: the name used in ``--fix NAME`` and scenario files.
        kind: systems / numerics / algorithm / hardware (see the module docstring).
        changes: exactly what the transform changes in the StepModel.
        args: pydantic model of its arguments (unknown arguments are an error).
        relieves: bottleneck keys it addresses.
        transform: ``(model, args) -> model``; raises ModelError when it does not apply.
        candidates: ``model -> [argument dict]`` the planner tries.
        repeatable: whether a plan may use it again (fixes that set a value, like the number of
            workers, may be raised again; multiplicative ones apply once).
        relieves_on: ``model -> keys`` it also addresses on that model (the planner's;
            :meth:`relieves_for`).
        needs_device: for a fix that changes device (GPU) work, why it needs one (empty for the
            others): :meth:`apply` refuses it on a CPU run (:meth:`StepModel.on_device`;
            gloo's collectives are no device), the one place whatif, plan, sweep and diagnose
            learn that no GPU fix applies there.
    """

    name: str
    kind: FixKind
    changes: str
    args: type[FixArgs]
    relieves: tuple[str, ...]
    transform: Callable[[StepModel, FixArgs], StepModel]
    candidates: Callable[[StepModel], list[dict]] = lambda m: [{}]
    repeatable: bool = False
    relieves_on: Callable[[StepModel], tuple[str, ...]] = lambda m: ()
    needs_device: str = ""

    def relieves_for(self, model: StepModel) -> tuple[str, ...]:
        """The bottleneck keys it addresses on ``model``: ``relieves`` and ``relieves_on``'s."""
        return self.relieves + tuple(self.relieves_on(model))

    def parse_args(self, raw: dict) -> FixArgs:
        """Validated arguments. Raises ModelError naming the bad or unknown argument."""
        try:
            return self.args.model_validate(raw or {})
        except ValidationError as e:
            err = telling_error(e)
            where, msg = error_parts(err)
            loc = ".".join(str(x) for x in where) or "(arguments)"
            msg = "unknown argument" if err["type"] == "extra_forbidden" else msg
            raise ModelError(f"fix {self.name}: {loc}: {msg} (arguments: "
                             f"{', '.join(self.args.model_fields) or 'none'})") from None

    def apply(self, model: StepModel, raw_args: dict | None = None) -> StepModel:
        """The changed model. Raises NotApplicable where it does not apply (a fix that needs a
        device, on a CPU run, first: before its arguments are read), ModelError on bad
        arguments."""
        # applicability before the arguments: a CPU model's "factor: Field required" hid
        # that mixed_precision does not apply to it at all (fresh14)
        if self.needs_device and not model.on_device():
            raise nothing(self.name, f"{NO_DEVICE_WHY}: {self.needs_device}")
        args = self.parse_args(raw_args or {})
        return self.transform(model.without_replay(), args)


def nothing(fix: str, why: str) -> ModelError:
    """The error of a fix that does not apply to a model, saying why."""
    return NotApplicable(f"fix {fix} does not apply to this model: {why}")
