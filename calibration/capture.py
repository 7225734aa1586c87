"""The capture harness: what a user adds to a training script to record what stepsim needs.

Three lines::

    from stepsim.calibration.capture import Capture
    cap = Capture("runs/nw2")                                   # 1. an output folder
    loader = cap.dataloader(dataset, batch_size=32, num_workers=2)   # 2. instead of DataLoader(...)
    for batch in cap.steps(loader, active=8):                   # 3. instead of `for batch in loader:`
        train_step(batch)

It writes, atomically, into the folder:

* ``trace.json.gz``: a ``torch.profiler`` (Kineto) Chrome trace of ``active`` steps, recorded
  after ``skip_first + wait + warmup`` steps so the DataLoader pipeline and the profiler itself
  have warmed up (the first profiler start in a process stalls for about a second);
* ``sidecar.json``: what the trace cannot show. DataLoader workers are separate processes and
  absent from the trace, so each batch's produce time is measured inside the worker that made
  it: wall time and the worker thread's CPU time (``time.thread_time``) from its first sample
  fetch to the end of ``collate_fn``, plus the batch's bytes. Also the loader settings
  (``num_workers``, ``prefetch_factor``, ``pin_memory``, ``batch_size``,
  ``persistent_workers``, ``in_order`` where the torch version has it), the host's usable cores
  (``os.sched_getaffinity``), the main thread's CPU time per step, the torch version and the
  device.

Sidecar schema (``stepsim_sidecar: 1``), times in µs::

    {"stepsim_sidecar": 1, "torch_version": str, "device": str, "host_cores": int,
     "cpu_count": int, "torch_num_threads": int,
     "loader": {"num_workers", "prefetch_factor", "pin_memory", "batch_size",
                "persistent_workers", "in_order", "drop_last", "dataset_len"},
     "produce": [{"worker": int, "pid": int, "seq": int, "wall_us": float, "cpu_us": float,
                  "proc_cpu_us": float, "t_end_us": float, "bytes": int}],
     "steps": [{"t_start_us", "wall_us", "cpu_us", "proc_cpu_us", "next_wall_us",
                "next_cpu_us", "next_proc_cpu_us", "profiled"}],   # main process, per step
     "warnings": [str]}   # e.g. the loop stopped early, the loader ran out
     "schedule": {"skip_first", "wait", "warmup", "active"}, "trace": "trace.json.gz"}

Semantics relied on (``torch/utils/data/_utils/fetch.py``): a worker fetches a batch's samples
(``__getitems__`` or ``__getitem__`` per index) and then calls ``collate_fn`` once; between
batches it blocks on its index queue, so its thread CPU time does not advance while idle.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
import torch.utils.data as tud

from stepsim.simcore.atomic import write_atomic

SIDECAR_VERSION = 1
_STATE: dict = {"start": None, "seq": 0}


def _clocks() -> tuple[float, float, float]:
    """(monotonic wall, this thread's CPU, this process's CPU), all in µs."""
    return time.monotonic() * 1e6, time.thread_time() * 1e6, time.process_time() * 1e6


def _mark_start() -> None:
    if _STATE["start"] is None:
        _STATE["start"] = (time.monotonic(), time.thread_time(), time.process_time())


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.nelement()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def _mark_end(record_dir: str, batch) -> None:
    start = _STATE["start"]
    if start is None:
        return
    now = time.monotonic()
    wall = (now - start[0]) * 1e6
    cpu = (time.thread_time() - start[1]) * 1e6
    proc = (time.process_time() - start[2]) * 1e6
    _STATE["start"] = None
    info = tud.get_worker_info()
    rec = {"worker": -1 if info is None else info.id, "pid": os.getpid(), "seq": _STATE["seq"],
           "wall_us": wall, "cpu_us": cpu, "proc_cpu_us": proc, "t_end_us": now * 1e6,
           "bytes": _nbytes(batch)}
    _STATE["seq"] += 1
    with open(os.path.join(record_dir, f"produce-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


class _TimedDataset(tud.Dataset):
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


class _TimedIterable(tud.IterableDataset):
    """Iterable-style dataset wrapper: marks the start of a batch at its first sample."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        for item in self.dataset:
            _mark_start()
            yield item


class _TimedCollate:
    """Calls the user's collate_fn, then records the batch's produce time (picklable)."""

    def __init__(self, collate_fn, record_dir: str):
        self.collate_fn, self.record_dir = collate_fn, record_dir

    def __call__(self, samples):
        out = self.collate_fn(samples)
        _mark_end(self.record_dir, out)
        return out


class Capture:
    """Records a profiler trace and a sidecar into ``out_dir`` (created if needed).

    Raises:
        ValueError: for a non-positive ``active`` or negative schedule counts.
    """

    def __init__(self, out_dir: str | os.PathLike):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._records = tempfile.mkdtemp(prefix="stepsim-capture-")
        self._loader_settings: dict = {}

    def dataloader(self, dataset, **kwargs) -> tud.DataLoader:
        """A ``torch.utils.data.DataLoader(dataset, **kwargs)`` whose workers time each batch.

        Takes exactly DataLoader's keyword arguments.
        """
        collate = kwargs.pop("collate_fn", None)
        auto_batch = kwargs.get("batch_size", 1) is not None or kwargs.get("batch_sampler") is not None
        if collate is None:
            collate = tud.default_collate if auto_batch else tud.default_convert
        wrapped = _TimedIterable(dataset) if isinstance(dataset, tud.IterableDataset) else _TimedDataset(dataset)
        loader = tud.DataLoader(wrapped, collate_fn=_TimedCollate(collate, self._records), **kwargs)
        try:
            dataset_len = len(dataset)
        except TypeError:
            dataset_len = None
        self._loader_settings = {
            "num_workers": loader.num_workers,
            "prefetch_factor": loader.prefetch_factor if loader.num_workers > 0 else None,
            "pin_memory": bool(loader.pin_memory),
            "batch_size": loader.batch_size,
            "persistent_workers": bool(loader.persistent_workers),
            "in_order": getattr(loader, "in_order", None),
            "drop_last": bool(loader.drop_last),
            "dataset_len": dataset_len,
        }
        return loader

    def steps(self, loader, active: int = 8, wait: int = 1, warmup: int = 2, skip_first: int = 3):
        """Iterate over ``loader`` for ``skip_first + wait + warmup + active`` steps, profiling
        the last ``active`` of them; on exit write ``trace.json.gz`` and ``sidecar.json``.

        Yields batches. Stops early (with a warning in the sidecar) if the loader runs out. If
        the caller's loop stops early (``break``, an exception), the sidecar is still written,
        with a warning, and the trace too if the profiler completed its active steps.
        Per step it records the main thread's and the main process's CPU time (the latter
        counts torch's intra-op threads).
        """
        if active < 1 or min(wait, warmup, skip_first) < 0:
            raise ValueError("active must be >= 1 and wait, warmup, skip_first >= 0")
        from torch.profiler import ProfilerActivity, profile, schedule

        total = skip_first + wait + warmup + active
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        # export_chrome_trace gzips only when the name ends in .gz
        trace_tmp = self.out_dir / ".partial.trace.json.gz"
        done = {"exported": False}

        def on_ready(prof):
            prof.export_chrome_trace(str(trace_tmp))
            done["exported"] = True

        step_rows, warnings = [], []
        sched = schedule(skip_first=skip_first, wait=wait, warmup=warmup, active=active, repeat=1)
        it = iter(loader)
        try:
            with profile(activities=activities, schedule=sched, on_trace_ready=on_ready) as prof:
                for i in range(total):
                    t0 = _clocks()
                    try:
                        batch = next(it)
                    except StopIteration:
                        warnings.append(f"the DataLoader ran out after {i} of {total} steps")
                        break
                    t1 = _clocks()
                    yield batch
                    if torch.cuda.is_available():
                        torch.cuda.synchronize()
                    t2 = _clocks()
                    step_rows.append({
                        "t_start_us": t0[0], "wall_us": t2[0] - t0[0], "cpu_us": t2[1] - t0[1],
                        "proc_cpu_us": t2[2] - t0[2], "next_wall_us": t1[0] - t0[0],
                        "next_cpu_us": t1[1] - t0[1], "next_proc_cpu_us": t1[2] - t0[2],
                        "profiled": i >= total - active})
                    prof.step()
        finally:
            # also when the training loop stops early (break, exception): what was recorded
            # is written, and the sidecar says what is missing
            del it
            if len(step_rows) < total and not any("ran out" in w for w in warnings):
                warnings.append(f"the training loop stopped after {len(step_rows)} of {total} steps")
            if done["exported"]:
                os.replace(trace_tmp, self.out_dir / "trace.json.gz")
            else:
                trace_tmp.unlink(missing_ok=True)
                warnings.append("the profiler never completed its active steps: no trace was "
                                f"written (run at least {total} steps)")
            self._write_sidecar(step_rows, warnings, dict(skip_first=skip_first, wait=wait,
                                                          warmup=warmup, active=active))

    def _write_sidecar(self, step_rows, warnings, sched) -> None:
        produce = []
        for f in sorted(Path(self._records).glob("produce-*.jsonl")):
            produce += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        shutil.rmtree(self._records, ignore_errors=True)
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
        side = {
            "stepsim_sidecar": SIDECAR_VERSION,
            "torch_version": torch.__version__,
            "device": device,
            "host_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_count": os.cpu_count(),
            "torch_num_threads": torch.get_num_threads(),
            "loader": self._loader_settings,
            "produce": produce,
            "steps": step_rows,
            "schedule": sched,
            "trace": "trace.json.gz",
            "warnings": warnings,
        }
        write_atomic(self.out_dir / "sidecar.json", json.dumps(side, indent=1).encode())
