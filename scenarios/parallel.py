"""Run independent simulations across processes, in order, with a progress hook.

Each call of ``fn`` must be independent and deterministic in its arguments (a seed travels
with each item), so results do not depend on ``jobs``. Worker processes are forked (the
simulator holds no global state) and user errors raised inside them come back as
:class:`simcore.errors.ModelError` with the same message.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from stepsim.simcore.errors import ModelError, StepsimError

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each item finishes."""


@dataclass(frozen=True)
class _Failed:
    message: str


def _guard(fn: Callable, item: Any) -> Any:
    try:
        return fn(item)
    except StepsimError as e:
        return _Failed(str(e))


def default_jobs() -> int:
    """Processes to use by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_many(fn: Callable[[Any], Any], items: Sequence[Any], jobs: int = 1,
             progress: Progress | None = None) -> list[Any]:
    """``[fn(item) for item in items]``, across up to ``jobs`` processes.

    Args:
        fn: a module-level function (it is pickled by name).
        items: its arguments, one per call (picklable).
        jobs: processes; 1 (or a single item) runs in this process.
        progress: optional hook called after each item.

    Raises:
        ModelError: the first item (in order) whose call raised a StepsimError.
    """
    total = len(items)
    if jobs <= 1 or total <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress:
                progress(i + 1, total)
        return out
    results: list[Any] = [None] * total
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=ctx) as pool:
        futures = {pool.submit(_guard, fn, item): i for i, item in enumerate(items)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, total)
    for r in results:
        if isinstance(r, _Failed):
            raise ModelError(r.message)
    return results
