"""A simulation that is continued to a larger step count instead of run again from step 0.

The step-count rule (:func:`models.stepcount.simulate_counted`) simulates 40 steps, reads
their standard error and, where it is too large, simulates a longer run with the same seed.
A run of ``n`` steps is, until some process first asks for a step past ``n``, the same run as
any longer one (the same events in the same order: the count is only the processes' loop
bound, :class:`models.step_bound.StepBound`). :class:`Extending` runs the SimPy processes
until the ``n`` steps' times are known (every host started step ``warmup + n``, the device
finished step ``warmup + n − 1``: :meth:`models.processes.Processes.reach`); where the rule
asks for more, it raises the bound and goes on, which is then the longer run from its start,
to the bit. Where a process had already ended at ``n`` (the bound read and refused), the
longer count is simulated from step 0 as before. The run the rule settles on is finished as a
run of that count (:meth:`models.processes.Processes.finish`): its step times, spans, task
runs, host waits and loader counts are those of ``simulate`` at that count.

Only for models that run as SimPy processes in any case (:func:`processes_only`): a model the
event-free engine solves (:mod:`models.solo`) is simulated count by count, as before.
Measured on the 2-rank gloo DDP demo model: :mod:`bench.ddp_verbs`, docs/measurements.md.
"""
from __future__ import annotations

import numpy as np

from stepsim.models.cpu import Oversubscribed
from stepsim.models.engine import Runs, Setup, Waits
from stepsim.models.params import StepModel
from stepsim.models.processes import Processes
from stepsim.models.simulate import SimResult, measured_steps_us, recorder_for, result_of
from stepsim.models.sim_work import processes_only, work_problem
from stepsim.simcore.errors import SimulationError
from stepsim.simcore.record import NullRecorder

__all__ = ["Extending", "processes_only"]


class Extending:
    """One run of ``model`` (``warmup`` steps, then measured ones; ``seed``; what ``keep``
    keeps, as :func:`models.simulate.simulate` takes it), continued from count to count.

    Attributes:
        steps: the measured steps of the count last asked (:meth:`job_step_us`).
        restarts: how many counts could not be continued and were simulated from step 0.
    """

    def __init__(self, model: StepModel, warmup: int, seed: int, keep: str):
        self.model, self.warmup, self.seed, self.keep = model, warmup, seed, keep
        self.steps = 0
        self.restarts = 0
        self._adaptive = True
        self._p: Processes | None = None

    def _start(self, steps: int) -> None:
        """A new run of ``steps`` steps from step 0."""
        self._rec = rec = recorder_for(self.keep)
        kept = self.keep != "steps"
        self._runs, self._waits = Runs(kept, self.keep == "brief"), Waits(kept)
        su = Setup(self.model, steps, self.warmup, self.seed, False, rec or NullRecorder(),
                   self._adaptive)
        self._p = Processes(su, self._runs, self._waits)

    def job_step_us(self, steps: int) -> np.ndarray:
        """The job step times (µs, the slowest rank's) of the run of ``steps`` measured
        steps: this run continued to them where it can be (``steps`` at least the last count
        asked), else simulated from step 0.

        Raises:
            SimulationError: as :func:`models.simulate.simulate` at ``steps`` (a deadlock, a
                count past :data:`models.sim_work.MAX_RUN_WORK`)."""
        problem = work_problem(self.model, steps, self.warmup)
        if problem:
            raise SimulationError(problem)
        k = self.warmup + steps
        if self._p is None or not self._p.extend(k + 1):
            if self._p is not None:
                self.restarts += 1
            self._start(steps)
        self.steps = steps
        try:
            self._p.reach(k)
        except Oversubscribed:   # as simulate: the pool not adaptive, from step 0
            self._adaptive = False
            self._start(steps)
            self._p.reach(k)
        step_us, _ = measured_steps_us(self.model, steps, self.warmup, self._p.starts,
                                       self._runs)
        return step_us.max(axis=0)

    def result(self) -> SimResult:
        """The run finished at the count last asked: ``simulate(model, steps, warmup, seed,
        keep=keep)``'s result.

        Raises:
            SimulationError: as :func:`models.simulate.simulate`."""
        try:
            starts, loaders = self._p.finish()
        except Oversubscribed:
            self._adaptive = False
            self._start(self.steps)
            starts, loaders = self._p.finish()
        return result_of(self.model, self.steps, self.warmup, starts, loaders, self._runs,
                         self._waits, self._rec)
