"""A memo of whole simulations: a run asked for again (the same model, step count, warm-up,
seed and ``keep``) returns a copy of the first one's result instead of simulating it again.

``plan`` asks for the same run several times: the baseline's point estimate, a candidate
chosen in a round and each move's point estimate when its interval is drawn are the runs of
the ceilings and rounds before them (on the 2-rank gloo DDP model 12 of its 133 simulations,
about a tenth of its steps, 2026-12-06). A simulation is a function of those arguments alone
(one seed, its random streams spawned from it; :func:`models.simulate.simulate`), so the copy
is the result the run would give.

Each hit is a copy: new containers (lists, dicts, the step-time array, the loader's stats)
holding the first run's immutable records (:class:`simcore.record.Span` and
:class:`models.device.TaskRun` are named tuples, :class:`models.host.HostWait` frozen), and
``model`` is the caller's own (equal) model; so no caller can change what another was given.
Only ``keep="all"`` and ``keep="steps"`` results are held (``"brief"`` holds its repeated
steps as shared blocks), at most :data:`ENTRIES` of them, the least recently used dropped
first, and no more than :data:`MAX_RECORDS` spans and task runs in all (memory: a held
result keeps its records alive after its caller let them go). The memo is per process: a
forked worker's hits stay in it.
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from stepsim.models.params import StepModel
from stepsim.models.simulate import SimResult, simulate

__all__ = ["ENTRIES", "MAX_RECORDS", "memo_simulate", "clear", "hold", "chosen", "choose"]

ENTRIES = 16
"""Results held at most (a plan's repeats come within a few rounds of their first run)."""
MAX_RECORDS = 250_000
"""The most spans plus task runs the held results have together (about 45 MB of named tuples;
a 220-step run of the 2-rank demo DDP model keeping every span has 13,716)."""

_held: OrderedDict[tuple, SimResult] = OrderedDict()
_chosen: OrderedDict[tuple, int] = OrderedDict()
"""The step count each chain of the step-count rule chose (:func:`chosen`)."""


def clear() -> None:
    """Forget every held result and chosen count."""
    _held.clear()
    _chosen.clear()


def chosen(chain: tuple) -> int | None:
    """The step count that the step-count rule chose for ``chain`` (the model's JSON, warm-up,
    seed, target and most steps: what the choice is a function of) in this process, if it
    did (:func:`models.stepcount.simulate_counted`, which then simulates that count alone)."""
    n = _chosen.get(chain)
    if n is not None:
        _chosen.move_to_end(chain)
    return n


def choose(chain: tuple, n: int) -> None:
    """Remember that ``chain`` chose ``n`` steps (at most :data:`ENTRIES` chains)."""
    _chosen[chain] = n
    while len(_chosen) > ENTRIES:
        _chosen.popitem(last=False)


def _copy(r: SimResult, model: StepModel) -> SimResult:
    """``r`` in new containers (its records are immutable), for ``model``."""
    return replace(
        r, step_us=r.step_us.copy(), step_starts_us=[list(s) for s in r.step_starts_us],
        spans=list(r.spans), samples={k: list(v) for k, v in r.samples.items()},
        max_outstanding=list(r.max_outstanding), ranks=list(r.ranks),
        extra=copy.deepcopy(r.extra), runs=list(r.runs), host_waits=list(r.host_waits),
        loader_stats=copy.deepcopy(r.loader_stats), model=model,
        step_marks_us=[list(m) for m in r.step_marks_us], span_blocks=list(r.span_blocks))


def memo_simulate(model: StepModel, steps: int, warmup: int, seed: int, keep: str,
                  key: Callable[[], str] | None = None) -> SimResult:
    """``simulate(model, steps=steps, warmup=warmup, seed=seed, keep=keep)``, from the memo
    when that run was made before in this process (a copy; see the module docstring).
    ``key``: gives ``model.model_dump_json()``, called only where the run can be held (a
    caller asking for several counts passes one that makes it once); None: made here.

    Raises:
        SimulationError: as :func:`models.simulate.simulate` (an error is not held).
    """
    if keep not in ("all", "steps"):
        return simulate(model, steps=steps, warmup=warmup, seed=seed, keep=keep)
    k = ((key or model.model_dump_json)(), steps, warmup, seed, keep)
    got = _held.get(k)
    if got is not None:
        _held.move_to_end(k)
        return _copy(got, model)
    r = simulate(model, steps=steps, warmup=warmup, seed=seed, keep=keep)
    _hold(k, r, model)
    return r


def hold(model: StepModel, steps: int, warmup: int, seed: int, keep: str,
         key: Callable[[], str], r: SimResult) -> None:
    """Hold ``r``, made elsewhere, as :func:`memo_simulate`'s run of those arguments (it must
    be that run's result: :class:`models.extend.Extending`'s is)."""
    if keep in ("all", "steps"):
        _hold((key(), steps, warmup, seed, keep), r, model)


def _hold(k: tuple, r: SimResult, model: StepModel) -> None:
    if _records(r) <= MAX_RECORDS and not r.span_blocks:
        _held[k] = _copy(r, model)
        while len(_held) > ENTRIES or sum(map(_records, _held.values())) > MAX_RECORDS:
            _held.popitem(last=False)


def _records(r: SimResult) -> int:
    return len(r.spans) + len(r.runs)
