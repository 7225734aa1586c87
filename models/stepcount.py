"""How many steps to simulate: until the mean step's standard error is a stated fraction of it.

A model with sampled durations (an input-stalled trace resamples its measured ``next()``
times, some of them hundreds of ms) gives a mean step that depends on the seed when too few
steps are simulated. When the caller names no step count, :func:`simulate_counted`
simulates :data:`FIRST_STEPS` steps, estimates the standard error of the mean job step, and
simulates again with more steps (the same seed, so a run is the same answer every time)
until the standard error is at most :data:`SE_TARGET` of the mean or :data:`MAX_STEPS` is
reached; :class:`StepCount` says which. A model that runs as SimPy processes at any count
(:func:`models.extend.processes_only`: the 2-rank gloo DDP model) is one run continued from
count to count (:class:`models.extend.Extending`: the same result as each count from step
0, each step simulated once), and the count chosen is remembered for the next caller
(:func:`models.run_memo.chosen`).

The standard error is that of non-overlapping batch means (:data:`BATCHES` batches of
consecutive steps): consecutive steps are correlated (a prefetch queue drains over several
steps), which the plain ``std / sqrt(n)`` would miss. A step count given by the caller is
simulated exactly, and its standard error is reported too.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from stepsim.models.params import StepModel
from stepsim.models.extend import Extending
from stepsim.models.sim_work import (DRAW_STEPS, MAX_STEPS, MAX_WORK, collective_quanta,
                                     processes_only, step_work, thread_pieces)
from stepsim.models.run_memo import choose, chosen, hold, memo_simulate
from stepsim.models.simulate import KEEPS, SimResult
from stepsim.simcore.errors import SimulationError
from stepsim.simcore.gcpause import gc_paused

__all__ = ["SE_TARGET", "FIRST_STEPS", "MAX_STEPS", "MAX_WORK", "DRAW_STEPS", "BATCHES",
           "StepCount", "mean_std_error_us", "simulate_counted", "step_bound", "thread_pieces",
           "draw_bound", "whole_cycles"]

SE_TARGET = 0.01
"""The standard error of the mean step, as a fraction of the mean, below which a chosen step
count stops growing."""
FIRST_STEPS = 40
"""Steps of the first simulation when the step count is chosen."""
BATCHES = 20
"""Batches of consecutive steps behind the standard error (fewer steps: one step a batch)."""
_GROWTH = (2, 8)
"""Each new simulation has between 2× and 8× the steps of the last (aimed at the count the
last one's standard error asks for, with a margin of :data:`_MARGIN`)."""
_MARGIN = 1.2


@dataclass(frozen=True)
class StepCount:
    """How many steps a simulation ran and how well they pin its mean (µs).

    Attributes:
        steps: measured steps simulated (after the warm-up).
        mean_us: the mean job step over them.
        std_error_us: the standard error of that mean (batch means).
        chosen: True when the step count was chosen here (the caller gave none).
        target: the standard error sought, as a fraction of the mean.
        basis: why ``target`` is what it is, in words appended to it (empty: the usual
            :data:`SE_TARGET`; :mod:`scenarios.interval_steps` names the interval's width).
    """

    steps: int
    mean_us: float
    std_error_us: float
    chosen: bool
    target: float = SE_TARGET
    basis: str = ""

    @property
    def rel_error(self) -> float:
        """The standard error as a fraction of the mean (0 for a zero mean)."""
        return self.std_error_us / self.mean_us if self.mean_us > 0 else 0.0

    @property
    def estimated(self) -> bool:
        """Whether the standard error could be estimated: 2 steps or more (one step's is not
        0, it is unknown; :func:`mean_std_error_us` gives 0 for it)."""
        return self.steps >= 2

    @property
    def met(self) -> bool:
        """Whether the standard error is at most ``target`` of the mean (not where it could
        not be :attr:`estimated`)."""
        return self.estimated and self.rel_error <= self.target

    def describe(self) -> str:
        """The step count and its standard error in words."""
        if not self.estimated:
            return (f"{self.steps} simulated step (given); the mean's standard error cannot "
                    "be estimated from one step (give --steps 2 or more)")
        se = f"the mean's standard error is {100 * self.rel_error:.1f} % of it"
        if not self.chosen:
            return f"{self.steps} simulated steps (given); {se}"
        if self.met:
            return (f"{self.steps} simulated steps, chosen so that {se} "
                    f"(at most {100 * self.target:.3g} %{self.basis})")
        return (f"{self.steps} simulated steps, the most a chosen count reaches: {se}, above "
                f"the {100 * self.target:g} % sought; give --steps for more")

    def to_dict(self) -> dict:
        """JSON-ready, times in ms; the standard error None where it could not be
        :attr:`estimated`."""
        known = self.estimated
        return {"steps": self.steps, "steps_chosen": self.chosen,
                "std_error_ms": self.std_error_us / 1e3 if known else None,
                "std_error_pct": 100 * self.rel_error if known else None,
                "std_error_target_pct": 100 * self.target,
                "std_error_met": self.met}


def mean_std_error_us(step_us) -> float:
    """The standard error (µs) of the mean of ``step_us`` from :data:`BATCHES` non-overlapping
    batch means (the earliest steps left over when the count does not divide evenly are left
    out of the batches); 0 for fewer than two steps."""
    x = np.asarray(step_us, dtype=float)
    b = min(BATCHES, x.size)
    if b < 2:
        return 0.0
    size = x.size // b
    means = x[x.size - b * size:].reshape(b, size).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(b))


def _count(result: SimResult, chosen: bool, target: float) -> StepCount:
    return _count_of(result.job_step_us, chosen, target)


def _count_of(job: np.ndarray, chosen: bool, target: float) -> StepCount:
    """The count, mean and standard error of the job step times ``job`` (µs)."""
    return StepCount(int(job.size), float(job.mean()), mean_std_error_us(job), chosen, target)


def step_bound(model: StepModel) -> int:
    """The most steps a chosen count reaches for ``model``: :data:`MAX_STEPS`, or fewer so
    that the simulated ops and tasks stay within :data:`MAX_WORK` (never below
    :data:`FIRST_STEPS`)."""
    return max(FIRST_STEPS, min(MAX_STEPS, MAX_WORK // max(step_work(model), 1)))


def draw_bound(model: StepModel, draws: int) -> int:
    """The most steps each of ``draws`` draws simulates when the step count is chosen: at
    most :data:`DRAW_STEPS`, and fewer (never below :data:`FIRST_STEPS`) where the draws'
    :func:`thread_pieces` and :func:`collective_quanta` together would pass :data:`MAX_WORK`."""
    pieces = len(model.ranks) * (thread_pieces(model) + collective_quanta(model)) * max(draws, 1)
    return max(FIRST_STEPS, min(DRAW_STEPS, MAX_WORK // max(pieces, 1)))


def simulate_counted(model: StepModel, steps: int | None, warmup: int, seed: int,
                     target: float = SE_TARGET, max_steps: int | None = None,
                     keep: str = "all") -> tuple[SimResult, StepCount]:
    """Simulate ``model`` for ``steps`` steps, or (``steps`` None) for as many as it takes to
    pin the mean step to ``target``, at most ``max_steps`` (default :func:`step_bound`) (see
    the module docstring); ``keep`` as :func:`models.simulate.simulate` takes it.

    Raises:
        SimulationError: a model that cannot run (as :func:`models.simulate.simulate`).
    """
    accum = model.comm.grad_accum_steps
    key = functools.cache(model.model_dump_json)   # the memo's key (models.run_memo): made
    # once for every count, and only where a run can be held (not for keep="brief")
    if steps is not None:
        if steps < accum:
            raise SimulationError(_short_of_a_cycle(f"{steps} step(s) given", accum))
        r = memo_simulate(model, steps, warmup, seed, keep, key)
        return r, _count(r, False, target)
    max_steps = step_bound(model) if max_steps is None else max_steps
    if accum > 1:   # whole optimizer steps: each count a multiple of the cycle
        if accum > max_steps:
            raise SimulationError(_short_of_a_cycle(f"at most {max_steps} steps simulated "
                                                    "(stepcount.step_bound)", accum))
        max_steps -= max_steps % accum
    n = _cycles(min(FIRST_STEPS, max_steps), accum)
    if keep in KEEPS and processes_only(model):   # SimPy processes at every count: one
        # run continued from count to count
        got = _extended(model, n, warmup, seed, target, max_steps, keep, key)
        if got is not None:
            return got
    first = True   # the first count and the bound keep what was asked; the counts between
    # keep only step times, and the one chosen is simulated again as asked
    while True:
        kept = keep if first or n >= max_steps else "steps"
        r = memo_simulate(model, n, warmup, seed, kept, key)
        c = _count(r, True, target)
        if c.met or n >= max_steps:
            if kept != keep:
                r = memo_simulate(model, n, warmup, seed, keep, key)
            return r, c
        first = False
        n = _next_count(n, c, max_steps, accum)


def _next_count(n: int, c: StepCount, max_steps: int, accum: int) -> int:
    """The count after ``n`` steps whose standard error ``c`` missed its target."""
    need = n * (c.rel_error / c.target) ** 2 * _MARGIN
    return min(max_steps, _cycles(int(np.clip(math.ceil(need), _GROWTH[0] * n,
                                              _GROWTH[1] * n)), accum))


@gc_paused
def _extended(model: StepModel, n: int, warmup: int, seed: int, target: float,
              max_steps: int, keep: str, key) -> tuple[SimResult, StepCount] | None:
    """:func:`simulate_counted`'s counts from ``n`` on as one run continued from count to
    count (:class:`models.extend.Extending`), the same result as each count simulated from
    step 0; the count chosen is remembered (:func:`models.run_memo.chosen`). None where a
    count's run fails (the caller simulates it afresh, which says why)."""
    held = keep in ("all", "steps")   # as memo_simulate: a "brief" run is not held
    chain = (key(), warmup, seed, target, max_steps) if held else None
    chosen_n = chosen(chain) if held else None
    if chosen_n is not None:
        r = memo_simulate(model, chosen_n, warmup, seed, keep, key)
        return r, _count(r, True, target)
    run = Extending(model, warmup, seed, keep)
    accum = model.comm.grad_accum_steps
    try:
        while True:
            job = run.job_step_us(n)
            c = _count_of(job, True, target)
            if c.met or n >= max_steps:
                break
            n = _next_count(n, c, max_steps, accum)
        r = run.result()
    except SimulationError:
        return None
    if held:
        hold(model, n, warmup, seed, keep, key, r)
        choose(chain, n)
    return r, _count(r, True, target)


def _cycles(n: int, accum: int) -> int:
    """``n`` rounded up to whole cycles of ``accum`` steps (one optimizer step each)."""
    return -(-n // accum) * accum


def _short_of_a_cycle(what: str, accum: int) -> str:
    """A step count that holds no optimizer step of ``comm.grad_accum_steps`` = ``accum``: its
    mean is of micro-batches alone (no collective, no optimizer), so it would not be the
    step's. ``grad_accumulation:micro_batches=1000000`` predicted a 1.8x speed-up that way
    from 80 steps without one optimizer step (2026-12-06)."""
    return (f"comm.grad_accum_steps={accum}: {what}, fewer than one optimizer step "
            f"({accum} micro-batch steps); the mean would hold no collective and no optimizer "
            "work")


def whole_cycles(model: StepModel, n: int) -> int:
    """``n`` steps rounded up to whole optimizer steps of ``model``'s
    ``comm.grad_accum_steps`` (a fixed count that a comparison simulates).

    Raises:
        SimulationError: one cycle is past :func:`step_bound`."""
    accum = model.comm.grad_accum_steps
    if accum > max(n, step_bound(model)):
        raise SimulationError(_short_of_a_cycle(f"at most {step_bound(model)} steps simulated "
                                                "(stepcount.step_bound)", accum))
    return _cycles(n, accum)
