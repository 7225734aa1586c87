"""The per-rank work of a folder of traces in a pool of processes (:func:`map_ranks`): each rank
file is read (:func:`calibration.folders.read_folder`) and fitted
(:func:`calibration.gpu.calibrate_gpu_pending`) on its own, so the cost is linear in ranks and
spread over the machine's cores.

Workers are forked (they inherit the parent's modules and the items, which are never pickled
to them); results come back in input order, so the model does not depend on how many
processes ran. One process, no pool, when there is one item or one core, when the platform
cannot fork, inside a daemonic process, or when ``STEPSIM_CALIBRATION_JOBS`` is ``1`` (it caps
the processes). A problem with one file (:class:`simcore.errors.InputError`) comes back as
that file's result, not as a failure of the pool.

:func:`beside` runs one item in a forked process while the caller works on (a trace's read in
two parts at once, :mod:`calibration.block_halves`).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from stepsim.simcore.errors import InputError

__all__ = ["jobs_for", "map_ranks", "beside", "raised", "Problem", "JOBS_ENV"]

JOBS_ENV = "STEPSIM_CALIBRATION_JOBS"
"""Environment variable capping the processes of the per-rank pool (default: every core this
process may run on)."""

CHUNK_ITEMS = 2
"""Most items a worker takes at once: a worker ends its last chunk alone, so chunks of a
quarter of a worker's share (32 of 256 rank files, ~30 ms each) could leave a core idle for
about a second. Measured on the 256-rank DLRM folder (read and fit, three interleaved pairs,
load 1.6-1.9, 2026-12-05): 4.5-5.0 s with chunks of 2 against 4.8-5.2 s with chunks of 32."""

_ITEMS: Sequence | None = None
"""The items of the running :func:`map_ranks`, inherited by its forked workers."""


class Problem(tuple):
    """The result of an item whose file cannot be used: ``(path, problem)`` of its
    :class:`InputError` (exceptions with their own arguments do not pickle back)."""

    @classmethod
    def of(cls, e: InputError) -> "Problem":
        return cls((str(e.path), e.problem, e.where))

    @property
    def problem(self) -> str:
        """What is wrong with the file."""
        return self[1]

    def error(self) -> InputError:
        """The InputError again."""
        return InputError(self[0], self[1], self[2])


def jobs_for(n_items: int) -> int:
    """Processes for ``n_items`` independent items: at most one per item and per core, capped
    by ``STEPSIM_CALIBRATION_JOBS``; 1 where the platform cannot fork and inside a daemonic
    process (a ``multiprocessing.Pool`` worker)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    cap = os.environ.get(JOBS_ENV, "").strip()
    if cap.isdigit() and int(cap) > 0:
        cores = min(cores, int(cap))
    if n_items <= 1:   # (multiprocessing is imported only where it may be used)
        return 1
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():   # pragma: no cover
        return 1
    if multiprocessing.current_process().daemon:   # a daemonic process may not have children
        return 1
    return max(1, min(cores, n_items))


def raised(result: Any) -> Any:
    """``result``, or the InputError of a :class:`Problem` raised (a part of one job, where the
    job cannot go on without it)."""
    if isinstance(result, Problem):
        raise result.error()
    return result


def guarded(fn: Callable, item: Any) -> Any:
    try:
        return fn(item)
    except InputError as e:
        return Problem.of(e)


def _call_inherited(args: tuple[Callable, int]) -> Any:
    fn, i = args
    return guarded(fn, _ITEMS[i])


def map_ranks(fn: Callable, items: Sequence) -> list:
    """``[fn(item) for item in items]`` in input order, in forked processes that inherit
    ``items`` (large tables are never pickled to the workers; ``fn`` is a module-level
    function; its results are pickled back). An item whose ``fn`` raises InputError gives a
    :class:`Problem`."""
    global _ITEMS
    jobs = jobs_for(len(items))
    if jobs <= 1:
        return [guarded(fn, it) for it in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _ITEMS = items
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_call_inherited, [(fn, i) for i in range(len(items))],
                                 chunksize=max(1, min(CHUNK_ITEMS, len(items) // (4 * jobs)))))
    finally:
        _ITEMS = None


def beside(fn: Callable, item: Any, here: Callable[[], Any]) -> tuple[Any, Any]:
    """``(fn(item), here())``: ``fn(item)`` in one forked process (which inherits ``item``: it
    is never pickled to it) while ``here()`` runs in this one, so a job cut in two takes both
    cores. One after the other in this process, ``here()`` first, where :func:`jobs_for`
    gives one process, and inside a worker of :func:`map_ranks` (whose pool already holds
    every core).
    ``fn(item)`` raising InputError gives its :class:`Problem`; another exception is raised
    here (its text, where it does not pickle).

    The result comes back as a pickle whose buffers (numpy arrays' data) travel out of band,
    each received straight into its own buffer while ``here()`` runs (a thread reading the
    pipe): so this process holds each array once, where one pickle of the whole held it two
    or three times over (the bytes read, their copy, the arrays), which put the 500 MB
    trace's read over 3x the file."""
    if _ITEMS is not None or jobs_for(2) <= 1:
        done_here = here()
        return guarded(fn, item), done_here
    import multiprocessing
    import threading

    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_send_beside, args=(theirs, fn, item), daemon=True)
    proc.start()
    theirs.close()
    got: list = []
    reader = threading.Thread(target=_receive, args=(mine, got), daemon=True)
    reader.start()
    try:
        done_here = here()
    finally:
        reader.join()
        mine.close()
        proc.join()
    if not got or got[0] == "raised":
        raise RuntimeError("the forked part of the work failed: "
                           f"{got[1] if got else f'exit code {proc.exitcode}'}")
    if got[0] == "error":
        raise got[1]
    return got[1], done_here


def _send_beside(conn, fn: Callable, item: Any) -> None:
    """In the forked process: ``guarded(fn, item)`` sent on ``conn`` as a pickle (protocol 5)
    and its out-of-band buffers, each on its own."""
    import pickle

    try:
        kind, value = "ok", guarded(fn, item)
    except Exception as e:   # (raised again in the caller)
        kind, value = "error", e
    bufs: list = []
    try:
        head = pickle.dumps((kind, value), protocol=5, buffer_callback=bufs.append)
        bufs = [b.raw() for b in bufs]   # (contiguous: BufferError otherwise)
    except Exception as e:
        bufs, head = [], pickle.dumps(("raised", f"{type(e).__name__}: {e}"), protocol=5)
    conn.send((len(head), [b.nbytes for b in bufs]))
    conn.send_bytes(head)
    for b in bufs:
        conn.send_bytes(b)
    conn.close()


def _receive(conn, got: list) -> None:
    """The other end of :func:`_send_beside`: the result, its buffers read into their own
    bytearrays (the read releases the interpreter lock), appended to ``got`` as
    ``(kind, value)``; nothing where the forked process ended without sending."""
    import pickle

    try:
        n_head, sizes = conn.recv()
        head = conn.recv_bytes()
        bufs = []
        for n in sizes:
            b = bytearray(n)
            conn.recv_bytes_into(b)
            bufs.append(b)
        got.extend(pickle.loads(head, buffers=bufs))
    except (EOFError, OSError):
        pass
