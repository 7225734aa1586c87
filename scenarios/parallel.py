"""Run independent simulations across processes, in order, with a progress hook.

Each call of ``fn`` must be independent and deterministic in its arguments (a seed travels
with each item), so results do not depend on ``jobs`` or on the executor. Sweeps, Monte Carlo
draws, plans and ceilings all go through :func:`run_many`, which picks the executor:

* ``local`` (the default): a pool of forked worker processes on this machine (the simulator
  holds no global state);
* ``dask``: a Dask ``distributed`` cluster (the optional extra ``stepsim[dask]``), chosen with
  the environment variable ``STEPSIM_EXECUTOR``: ``dask`` starts a local cluster of ``jobs``
  worker processes for the call, ``dask:tcp://host:8786`` submits to an existing scheduler.
  Dask rather than Ray: it is a small pure-Python install that pickles our module-level
  functions as they are, and its scheduler is what HPC and cloud clusters already run
  (``dask-jobqueue``, ``dask-kubernetes``).

User errors raised inside a worker come back as :class:`simcore.errors.ModelError` with the
same message.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

from stepsim.simcore.errors import ModelError, StepsimError
from stepsim.simcore.heap import keep_freed_heap

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


_NOT_SHARED = object()
_shared: Any = _NOT_SHARED
"""The ``shared`` argument of the :func:`run_many` call in progress: forked workers inherit it
(set before the pool forks them), so it is not pickled with every item."""


def _with_shared(fn: Callable, item: Any) -> Any:
    return fn(_shared, item)


def _call_shared(args: tuple) -> Any:
    fn, shared, item = args
    return fn(shared, item)


def default_jobs() -> int:
    """Processes to use by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def capped_jobs(jobs: int) -> tuple[int, str | None]:
    """``(processes, warning)``: ``jobs`` (0: :func:`default_jobs`) at most the CPUs this
    process may run on, and the warning that says so where it asked for more (None where
    nothing was cut). Capped, not refused: a script that passes ``--jobs 64`` on a large
    machine still runs on a laptop; before, ``--jobs 1000`` forked up to 1,000 simulators on
    2 cores, each a copy of the model, none of them sooner done than 2 would be."""
    cpus = default_jobs()
    if jobs <= 0:
        return cpus, None
    if jobs <= cpus:
        return jobs, None
    return cpus, (f"--jobs {jobs}: this process may run on {cpus} CPU(s) (its affinity mask), "
                  f"so {cpus} simulation process(es) are used; more only wait for a core")


def executor_name() -> str:
    """The executor ``run_many`` uses: ``STEPSIM_EXECUTOR`` (``local`` when unset).

    Raises:
        ModelError: a value that is neither ``local``, ``dask`` nor ``dask:ADDRESS``.
    """
    name = os.environ.get("STEPSIM_EXECUTOR", "local").strip() or "local"
    if name != "local" and name != "dask" and not name.startswith("dask:"):
        raise ModelError(f"STEPSIM_EXECUTOR={name!r}: expected local, dask or dask:ADDRESS")
    return name


def _dask_map(fn: Callable, items: Sequence[Any], jobs: int, address: str | None,
              progress: Progress | None, meanwhile: Callable[[], Any] | None = None
              ) -> list[Any]:
    """``_guard(fn, item)`` for every item on a Dask cluster (a local one of ``jobs``
    processes when ``address`` is None), results in item order."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed as dask_completed
    except ImportError:
        raise ModelError("STEPSIM_EXECUTOR=dask needs Dask: pip install 'stepsim[dask]'") from None
    cluster = None
    if address is None:
        cluster = LocalCluster(n_workers=capped_jobs(jobs)[0], threads_per_worker=1,
                               processes=True, dashboard_address=None)
    try:
        with Client(cluster if cluster is not None else address) as client:
            futures = client.map(_guard, [fn] * len(items), list(items), pure=False)
            if meanwhile is not None:
                meanwhile()
            index = {f.key: i for i, f in enumerate(futures)}
            results: list[Any] = [None] * len(items)
            for done, fut in enumerate(dask_completed(futures), 1):
                results[index[fut.key]] = fut.result()
                if progress:
                    progress(done, len(items))
            return results
    finally:
        if cluster is not None:
            cluster.close()


def run_many(fn: Callable[..., Any], items: Sequence[Any], jobs: int = 1,
             progress: Progress | None = None, shared: Any = _NOT_SHARED,
             meanwhile: Callable[[], Any] | None = None) -> list[Any]:
    """``[fn(item) for item in items]`` (with ``shared``: ``[fn(shared, item) ...]``), across
    up to ``jobs`` processes of the executor :func:`executor_name` names.

    Args:
        fn: a module-level function (it is pickled by name).
        items: its arguments, one per call (picklable).
        jobs: processes; 1 (or a single item) runs in this process (the local executor), or
            the local Dask cluster's workers; at most the usable CPUs (:func:`capped_jobs`).
        progress: optional hook called after each item.
        shared: an argument every call takes first (e.g. the model): the local pool's forked
            workers inherit it instead of unpickling it with each item; Dask is sent it with
            each.
        meanwhile: called once in this process while the items run elsewhere (after they
            are handed to the executor, before any result is awaited); where they run in
            this process, before the first. It must not raise (nor touch what the items
            read).

    Raises:
        ModelError: the first item (in order) whose call raised a StepsimError; a bad
            ``STEPSIM_EXECUTOR``.
    """
    global _shared
    name = executor_name()
    if shared is _NOT_SHARED:
        return _run(fn, items, jobs, progress, name, meanwhile)
    if name != "local" or jobs <= 1 or len(items) <= 1:
        return _run(_call_shared, [(fn, shared, item) for item in items], jobs, progress, name,
                    meanwhile)
    before, _shared = _shared, shared   # forked below: the workers inherit it
    try:
        return _run(partial(_with_shared, fn), items, jobs, progress, name, meanwhile)
    finally:
        _shared = before


def _run(fn: Callable[[Any], Any], items: Sequence[Any], jobs: int,
         progress: Progress | None, name: str,
         meanwhile: Callable[[], Any] | None = None) -> list[Any]:
    total = len(items)
    if name != "local" and total > 0:
        results = _dask_map(fn, items, jobs, name[5:] or None, progress, meanwhile)
        for r in results:
            if isinstance(r, _Failed):
                raise ModelError(r.message)
        return results
    if jobs <= 1 or total <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        if meanwhile is not None:
            meanwhile()
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress:
                progress(i + 1, total)
        return out
    results: list[Any] = [None] * total
    ctx = multiprocessing.get_context("fork")
    jobs = capped_jobs(jobs)[0]   # never more forked simulators than usable CPUs
    # each worker keeps the heap a simulation freed for its next one (no page faults anew)
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=ctx,
                             initializer=keep_freed_heap) as pool:
        futures = {pool.submit(_guard, fn, item): i for i, item in enumerate(items)}
        if meanwhile is not None:
            meanwhile()
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, total)
    for r in results:
        if isinstance(r, _Failed):
            raise ModelError(r.message)
    return results
