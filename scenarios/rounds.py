"""Predictions run as rounds of work: a prediction is a generator (:func:`scenarios.predict.
predicting`) that yields the work it needs next (a point estimate, a round of draws) and takes
the results back; :func:`drive` runs several such generators side by side, each round of all
of them in one executor call (:func:`scenarios.parallel.run_many`), so ``whatif``'s baseline
and scenario simulate their points beside each other and their draws in one pool.

Every work item is deterministic in its arguments (each carries its seeds), so a prediction is
the same whether it runs alone or beside others, in this process or a worker. Errors come back
as values (:class:`Raised`) and are raised where the generator reads them (:func:`got`);
:func:`drive` raises the first in the generators' order, as running them one after the other
would (a later generator's error is kept until every earlier one has finished).
"""
from __future__ import annotations

from typing import Any, Callable, Generator, Sequence

import numpy as np

from stepsim.scenarios.parallel import Progress, run_many
from stepsim.simcore.errors import StepsimError

__all__ = ["Raised", "Round", "got", "work", "drive"]

Item = tuple[Callable[..., Any], tuple, int]
"""A work item: a module-level function, its arguments, and how many draws it holds (for a
progress hook; 0 for a point estimate)."""
Round = Generator[list[Item], list[Any], Any]
"""A prediction as rounds: yields a round's items, receives their results (in order)."""


class Raised:
    """A work item's error, raised again where the generator reads its result."""

    def __init__(self, error: StepsimError):
        self.error = error


def got(result: Any) -> Any:
    """``result``, or its error raised (:class:`Raised`)."""
    if isinstance(result, Raised):
        raise result.error
    return result


def work(item: Item) -> Any:
    """Run one item: ``fn(*args)``, a :class:`simcore.errors.StepsimError` returned as a
    :class:`Raised`."""
    fn, args, _ = item
    try:
        return fn(*args)
    except StepsimError as e:
        return Raised(e)


def _hook(items: list[Item], progress: Progress | None):
    """``run_many``'s progress hook for a round: draws done (by the items' order) of the
    round's draws; None where the round holds no draw."""
    done = np.cumsum([n for _, _, n in items])
    if progress is None or not len(done) or done[-1] <= 0:
        return None
    return lambda k, total: progress(int(done[-1]) if k == total else int(done[k - 1]),
                                     int(done[-1]))


def drive(gens: Sequence[Round], jobs: int = 1, progress: Progress | None = None) -> list:
    """Each generator's return value, its rounds run side by side (see the module docstring):
    one :func:`run_many` call per round over every generator still running.

    Raises:
        StepsimError: the first generator's (in order) that raised one.
    """
    out: list[Any] = [None] * len(gens)
    error: tuple[int, StepsimError] | None = None
    pending: dict[int, list[Item]] = {}

    def advance(k: int, results: list | None) -> None:
        nonlocal error
        try:
            pending[k] = gens[k].send(results)
        except StopIteration as stop:
            out[k] = stop.value
        except StepsimError as e:
            error = (k, e)
            for j in [j for j in pending if j > k]:   # a later one's work can no longer show
                del pending[j]

    for k in range(len(gens)):
        if error is None or k < error[0]:
            advance(k, None)
    while pending:
        order = sorted(pending)
        rounds = [pending.pop(k) for k in order]
        items = [it for r in rounds for it in r]
        results = run_many(work, items, jobs=jobs, progress=_hook(items, progress))
        at = 0
        for k, r in zip(order, rounds):
            if error is None or k < error[0]:
                advance(k, results[at:at + len(r)])
            at += len(r)
    if error is not None:
        raise error[1]
    return out
