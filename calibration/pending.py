"""What calibration hands over: the fitted parameters and the steps still to run on them.

Calibration uses models' parameter types, never the simulator. Two steps of the GPU path
simulate, so they are left to the caller above both (:mod:`stepsim.fit`):

* the cap on the ranks' lateness (:func:`models.skew_cap.cap_skew`), which simulates the
  reference rank alone (:class:`SkewCap` holds that model as fitted and its measured step);
* coarsening (:func:`models.coarsen.coarsen`), whose probe simulates the model.

Calibration's own steps that read their result (the DDP buckets inferred from the coarse
model's launches, the host speed of the runs, the replicates' notes) follow as ``after``, in
the order the caller is to run them: :func:`stepsim.fit.finish` runs the cap, then the
coarsening, then ``after``, which is the order they ran in when calibration ran all of them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from stepsim.models.params import StepModel

__all__ = ["Pending", "SkewCap"]


@dataclass(frozen=True)
class SkewCap:
    """What capping a multi-rank model's lateness needs: ``alone``, the model of the reference
    rank alone (every other rank's lateness removed) as the ranks were combined, and
    ``ref_step_us``, that rank's measured median step (µs)."""
    alone: StepModel
    ref_step_us: float


@dataclass(frozen=True)
class Pending:
    """A calibrated model (``model``: kernel-level, the ranks' lateness not capped yet), the
    cap it needs (``skew``, None for one rank), whether the planner's coarse model is wanted
    (``coarse``) and calibration's steps after both (``after``, each ``StepModel ->
    StepModel``). With nothing to simulate, :meth:`then` runs a step at once."""
    model: StepModel
    skew: SkewCap | None = None
    coarse: bool = False
    after: tuple[Callable[[StepModel], StepModel], ...] = ()

    @property
    def waiting(self) -> bool:
        """Whether a step that simulates is still to run (and so ``after`` waits for it)."""
        return self.skew is not None or self.coarse

    def then(self, step: Callable[[StepModel], StepModel]) -> Pending:
        """``step`` to run on the finished model: now when nothing is left to simulate, else
        after the rest."""
        if not self.waiting and not self.after:
            return replace(self, model=step(self.model))
        return replace(self, after=(*self.after, step))

    def now(self, step: Callable[[StepModel], StepModel]) -> Pending:
        """``step`` run on the model as it is, before the steps that simulate."""
        assert not self.after, "a step now would run before steps queued earlier"
        return replace(self, model=step(self.model))
