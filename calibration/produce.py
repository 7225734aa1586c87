"""Per-batch produce time, measured where the batch is made (a DataLoader worker or the main
thread), and the loader settings; for loaders stepsim builds and for loaders users already built.

A batch's produce time runs from its first sample fetch to the end of ``collate_fn``: wall time,
the producing thread's CPU time (``time.thread_time``) and its process's CPU time, plus the
batch's bytes. Each producer appends one JSON line per batch to ``produce-<pid>.jsonl`` in a
record folder; :mod:`calibration.window` gathers them into the sidecar.

Semantics relied on (torch 2.x, ``torch/utils/data``):

* ``_utils/fetch.py``: a fetcher takes a batch's samples (``dataset.__getitems__`` when the
  dataset has it, else ``dataset[i]`` per index; ``iter(dataset)`` for an iterable dataset) and
  then calls ``collate_fn`` once;
* ``_utils/worker.py``: a worker calls ``worker_init_fn(worker_id)`` with
  ``get_worker_info().dataset`` being the very object its fetcher is made from right after;
  between batches it blocks on its index queue (its CPU time does not advance while idle);
* ``dataloader.py``: after construction ``DataLoader.__setattr__`` refuses ``dataset``,
  ``sampler``, ``batch_sampler``, ``batch_size``, ``drop_last`` and ``persistent_workers``,
  but not ``collate_fn`` or ``worker_init_fn``; both are read when an iterator is made
  (``_BaseDataLoaderIter.__init__``), so setting them on an existing loader takes effect at
  its next ``iter()``, except for a persistent-workers loader whose workers already run.

So :func:`attach_loader` times an existing loader's batches by setting those two attributes:
the wrapped ``collate_fn`` records the end of each batch, and the wrapped ``worker_init_fn``
gives the worker's own copy of the dataset a subclass that marks the first sample fetch. The
user's dataset object in the main process is untouched when there are workers; with
``num_workers=0`` the batch is made inside ``next()`` on the main thread from that very object,
whose class is swapped to the timed subclass for the capture and given back at its end
(:func:`detach_loader`), and the wrapped ``collate_fn`` records each batch there too.
"""
from __future__ import annotations

import json
import os
import time
import warnings as _warnings

import torch
import torch.utils.data as tud

_STATE: dict = {"start": None, "seq": 0}


def run_wait_us() -> float | None:
    """This thread's time so far runnable but waiting for a core (µs): the kernel's run-queue
    delay, the second field of ``/proc/thread-self/schedstat``; None where the OS does not say
    (not Linux, or a kernel without schedstat)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e3
    except (OSError, ValueError, IndexError):
        return None


def _mark_start() -> None:
    if _STATE["start"] is None:
        now, proc, wait = time.monotonic(), time.process_time(), run_wait_us()
        # a worker's work between its batches (taking the indices, handing the last batch to
        # its queue's feeder thread, which pickles it): process CPU since the last batch's end.
        # The kernel adds a wait to the run-queue figure when the thread runs again, so a
        # preemption as a read returns counts in the next read: each interval's wall clock
        # brackets its two wait reads (the gap's from just before the end's read to just
        # after this one, the batch's from before this one to after its end's)
        end = _STATE.pop("end", None)
        gap = None if end is None else (
            (time.monotonic() - end[0]) * 1e6, (proc - end[1]) * 1e6,
            None if wait is None or end[2] is None else max(wait - end[2], 0.0))
        _STATE["start"] = (now, time.thread_time(), proc, wait, gap)


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.nelement()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _mark_end(record_dir: str, batch, phase: str = "") -> None:
    start = _STATE["start"]
    if start is None:
        return
    # the run-queue wait and the CPU are read before the wall clock (and after it at the
    # start): a preemption between the reads adds to the wall only, so a batch's wait is at
    # most its wall less its CPU
    before = time.monotonic()
    w1 = run_wait_us()
    cpu = (time.thread_time() - start[1]) * 1e6
    proc = (time.process_time() - start[2]) * 1e6
    now = time.monotonic()
    wall = (now - start[0]) * 1e6
    wait = None if start[3] is None or w1 is None else max(w1 - start[3], 0.0)
    _STATE["start"] = None
    info = tud.get_worker_info()
    rec = {"worker": -1 if info is None else info.id, "pid": os.getpid(), "seq": _STATE["seq"],
           "wall_us": wall, "cpu_us": cpu, "proc_cpu_us": proc, "t_end_us": now * 1e6,
           "run_wait_us": wait, "bytes": _nbytes(batch)}
    if start[4] is not None:
        rec["gap_wall_us"], rec["gap_cpu_us"], rec["gap_run_wait_us"] = start[4]
    if info is not None:
        _STATE["end"] = (before, start[2] + proc / 1e6, w1)
    if phase:
        rec["phase"] = phase
    _STATE["seq"] += 1
    try:
        with open(os.path.join(record_dir, f"produce-{os.getpid()}.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
    except OSError:  # the capture is over (its record folder is gone): training goes on
        pass


class TimedDataset(tud.Dataset):
    """Map-style dataset wrapper: marks the start of a batch at its first sample fetch."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        _mark_start()
        return self.dataset[index]

    def __getitems__(self, indices):
        _mark_start()
        inner = getattr(self.dataset, "__getitems__", None)
        if inner is not None:
            return inner(indices)
        return [self.dataset[i] for i in indices]


class TimedIterable(tud.IterableDataset):
    """Iterable-style dataset wrapper: marks the start of a batch before its first sample."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        yield from _timed_iter(self.dataset)


def _timed_iter(dataset):
    it = iter(dataset)
    while True:
        _mark_start()  # before the sample is made: its work belongs to the batch
        try:
            item = next(it)
        except StopIteration:
            return
        yield item


class TimedCollate:
    """Calls the user's collate_fn, then records the batch's produce time (picklable);
    ``phase`` tags the records (``probe``: the harness's probe loader)."""

    def __init__(self, collate_fn, record_dir: str, phase: str = ""):
        self.collate_fn, self.record_dir, self.phase = collate_fn, record_dir, phase

    def __call__(self, samples):
        out = self.collate_fn(samples)
        _mark_end(self.record_dir, out, self.phase)
        return out


_TIMED = "StepsimTimed"
"""The name prefix of :func:`_timed_class`'s subclasses."""


def _timed_class(cls: type) -> type:
    """A subclass of the dataset's class whose sample fetches mark a batch's start (no new
    slots, so an instance's class can be swapped to it)."""
    ns: dict = {"__slots__": (), "_stepsim_timed": True}
    if issubclass(cls, tud.IterableDataset) or not hasattr(cls, "__getitem__"):
        ns["__iter__"] = lambda self: _timed_iter(super(sub, self).__iter__())
    else:
        def getitem(self, index):
            _mark_start()
            return super(sub, self).__getitem__(index)
        ns["__getitem__"] = getitem
        if callable(getattr(cls, "__getitems__", None)):
            def getitems(self, indices):
                _mark_start()
                return super(sub, self).__getitems__(indices)
            ns["__getitems__"] = getitems
    sub = type(f"{_TIMED}{cls.__name__}", (cls,), ns)
    return sub


class TimedWorkerInit:
    """``worker_init_fn`` that runs the user's, then makes the worker's copy of the dataset time
    its sample fetches (picklable; the main process's dataset is untouched)."""

    def __init__(self, worker_init_fn, record_dir: str):
        self.worker_init_fn, self.record_dir = worker_init_fn, record_dir

    def __call__(self, worker_id: int) -> None:
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)
        ds = tud.get_worker_info().dataset
        try:
            ds.__class__ = _timed_class(type(ds))
        except Exception as e:  # a class that cannot take a subclass (a built-in type, ...): never break training
            with open(os.path.join(self.record_dir, f"untimed-{os.getpid()}.txt"), "w") as f:
                f.write(f"{type(ds).__name__}: {e}")


def loader_settings(loader: tud.DataLoader) -> dict:
    """The settings of a DataLoader as the sidecar records them (``loader`` in the schema)."""
    try:
        dataset_len = len(loader.dataset)
    except TypeError:
        dataset_len = None
    # a loader built with a batch_sampler (accelerate's DataLoaderShard is) has batch_size
    # None and drop_last False; its batch sampler holds both
    bs = loader.batch_size
    sampler_bs = getattr(loader.batch_sampler, "batch_size", None)
    from_sampler = bs is None and isinstance(sampler_bs, int)
    return {
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor if loader.num_workers > 0 else None,
        "pin_memory": bool(loader.pin_memory),
        "batch_size": sampler_bs if from_sampler else bs,
        "persistent_workers": bool(loader.persistent_workers),
        "in_order": getattr(loader, "in_order", None),
        "drop_last": bool(getattr(loader.batch_sampler, "drop_last", False) if from_sampler
                          else loader.drop_last),
        "dataset_len": dataset_len,
    }


def underlying(loader):
    """The DataLoader that iterates: a wrapper that delegates to a ``base_dataloader``
    (accelerate's ``DataLoaderAdapter``, which reads through to it but keeps what is set on
    itself) gives that one."""
    base = getattr(loader, "base_dataloader", None)
    return base if isinstance(base, tud.DataLoader) else loader


def attach_loader(loader: tud.DataLoader, record_dir: str, restart: bool = False) -> list[str]:
    """Make an existing DataLoader's workers record each batch's produce time into
    ``record_dir`` from its next ``iter()`` on. Returns warnings for the sidecar.

    Persistent workers that already run keep the loader's old functions: with ``restart``
    they are shut down so that the next ``iter()`` starts new ones (torch's ``DataLoader``
    makes a new iterator when its ``_iterator`` is None), else a warning says their batches
    are not recorded.

    Raises:
        TypeError: ``loader`` is not a ``torch.utils.data.DataLoader``.
    """
    if not isinstance(loader, tud.DataLoader):
        raise TypeError(f"loader must be a torch.utils.data.DataLoader, not {type(loader).__name__}")
    loader = underlying(loader)
    if isinstance(loader.collate_fn, TimedCollate) or isinstance(loader.dataset, (TimedDataset, TimedIterable)):
        return []  # attached already (or built by Capture.dataloader)
    out: list[str] = []
    if loader.num_workers == 0:
        return _attach_main(loader, record_dir)
    live = getattr(loader, "_iterator", None)
    if loader.persistent_workers and live is not None and restart:
        live._shutdown_workers()
        loader._iterator = None
    elif loader.persistent_workers and live is not None:
        msg = ("the DataLoader's persistent workers were already running when the capture "
               "attached: their produce times are not recorded")
        _warnings.warn(msg, stacklevel=3)
        return [msg]
    loader.collate_fn = TimedCollate(loader.collate_fn, record_dir)
    loader.worker_init_fn = TimedWorkerInit(loader.worker_init_fn, record_dir)
    return out


def _attach_main(loader: tud.DataLoader, record_dir: str) -> list[str]:
    """:func:`attach_loader` at ``num_workers=0``: the batch is made inside ``next()`` on the
    main thread, from the user's own dataset object (no worker holds a copy), so its class is
    swapped to the timed subclass for the capture and given back by :func:`detach_loader`
    (``isinstance`` still holds; ``type(ds)`` differs meanwhile). Before this, the callbacks
    wrote no produce record at 0 workers (fresh11's HF runs, 2026-12-07: ``produce == []``),
    so the readings that need them (a re-measured run's outside load, ``calibration.measure``)
    were blind there, while the harness (:meth:`Capture.dataloader`, its own wrapper) had
    them. Returns a warning where the class cannot be swapped (records then stay empty)."""
    ds = loader.dataset
    try:
        ds.__class__ = _timed_class(type(ds))
    except Exception as e:   # a class that cannot take a subclass: never break training
        return [f"the training dataset ({type(ds).__name__}) cannot time its sample fetches "
                f"({e}): no produce record at num_workers=0"]
    loader.collate_fn = TimedCollate(loader.collate_fn, record_dir)
    return []


def detach_loader(loader) -> None:
    """Give an attached DataLoader back its own ``collate_fn`` and ``worker_init_fn``, and a
    0-worker loader's dataset its own class (:func:`_attach_main`)."""
    loader = underlying(loader)
    ds = getattr(loader, "dataset", None)
    if type(ds).__name__.startswith(_TIMED) and type(ds).__dict__.get("_stepsim_timed"):
        ds.__class__ = type(ds).__mro__[1]
    if isinstance(getattr(loader, "collate_fn", None), TimedCollate):
        loader.collate_fn = loader.collate_fn.collate_fn
    if isinstance(getattr(loader, "worker_init_fn", None), TimedWorkerInit):
        loader.worker_init_fn = loader.worker_init_fn.worker_init_fn
