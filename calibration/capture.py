"""The capture harness: what a user adds to a training script to record what stepsim needs.

Three lines::

    from stepsim.calibration.capture import Capture
    cap = Capture("runs/nw2")                                   # 1. an output folder
    loader = cap.dataloader(dataset, batch_size=32, num_workers=2)   # 2. instead of DataLoader(...)
    for batch in cap.steps(loader, active=8):                   # 3. instead of `for batch in loader:`
        train_step(batch)

Step 2 is optional: ``cap.steps(loader)`` over a DataLoader the script already built attaches to
it (:func:`calibration.produce.attach_loader`: its workers time each batch from this ``iter()``
on, without rebuilding the loader). ``cap.ddp(model)`` records a DistributedDataParallel job
(:mod:`calibration.ddp_info`; call it on every rank). PyTorch Lightning and Hugging Face
``Trainer`` runs use :mod:`calibration.lightning` and :mod:`calibration.hf` instead, which write
the same folder.

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

    {"stepsim_sidecar": 1, "capture": "harness" | "lightning" | "transformers",
     "torch_version": str, "device": str, "host_cores": int,
     "cpu_count": int, "torch_num_threads": int,
     "loader": {"num_workers", "prefetch_factor", "pin_memory", "batch_size",
                "persistent_workers", "in_order", "drop_last", "dataset_len"},
     "produce": [{"worker": int, "pid": int, "seq": int, "wall_us": float, "cpu_us": float,
                  "proc_cpu_us": float, "t_end_us": float, "run_wait_us": float,
                  "gap_wall_us", "gap_cpu_us", "gap_run_wait_us", "bytes": int}],
                  # gap_*: a worker's time since its previous batch ended (its work between
                  # batches: wall, process CPU, run-queue wait); absent for its first batch
     "steps": [{"t_start_us", "wall_us", "cpu_us", "proc_cpu_us", "next_wall_us",
                "next_cpu_us", "next_proc_cpu_us", "vcsw", "ivcsw", "run_wait_us",
                "next_run_wait_us", "next_vcsw", "next_ivcsw", "profiled", "profiler_on"}],
                # per step, main process; vcsw/ivcsw: the main thread's voluntary/involuntary
                # context switches outside next() (blocking vs waiting for a core),
                # next_vcsw/next_ivcsw inside it;
                # run_wait_us (here and per batch): the thread's run-queue wait, runnable
                # with no core free (/proc/thread-self/schedstat; absent where the OS does
                # not say), so wall − cpu − run_wait is the time it blocked;
                # profiled: a recorded step; profiler_on: the profiler ran (warm-up or
                # active): the skip_first + wait steps before it are unprofiled, which
                # calibration.profiler_overhead compares the recorded ones with
     "warnings": [str],   # e.g. the loop stopped early, the loader ran out
     "schedule": {"skip_first", "wait", "warmup", "active"}, "trace": "trace.json.gz",
     "host_name": str,    # ranks with one host name share its cores
     "probe": {"num_workers": int, "batch_size": int, "produce": [...], "steps": [...]},
                          # optional: steps(probe_workers=N or probe_batch_size=N)
     "ddp": {...}}        # only in a distributed job: calibration.ddp_info's schema

With a world size above 1 each rank writes its own folder, ``OUT/rank<R>``.

The DataLoader semantics this relies on are stated in :mod:`calibration.produce`.
"""
from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import torch
import torch.utils.data as tud

from stepsim.calibration.cold_capture import ColdSteps, spin
from stepsim.calibration.ddp_info import ddp_record
from stepsim.calibration.produce import (TimedCollate, TimedDataset, TimedIterable, attach_loader,
                                         loader_settings)
from stepsim.calibration.window import SIDECAR_VERSION, Window, clocks, step_row
from stepsim.models.param_base import MAX_WORKERS
from stepsim.simcore.atomic import make_folder

__all__ = ["Capture", "SIDECAR_VERSION", "rank_dir"]


def rank_dir(out_dir, ddp: dict | None) -> Path:
    """The folder a rank writes into: ``out_dir``, or ``out_dir/rank<R>`` in a job of more
    than one rank."""
    if ddp is not None and ddp["world_size"] > 1:
        return Path(out_dir) / f"rank{ddp['rank']}"
    return Path(out_dir)


PROBE_SKIP = 2
"""Probe steps left unrecorded: the probe loader's first batches carry its workers' start-up."""


def _probe(args, num_workers: int, batch_size: int | None, n_steps: int, records: str,
           rows: list):
    """Yield ``PROBE_SKIP + n_steps`` batches of a second DataLoader with ``num_workers`` (and
    ``batch_size``, when given) over the same (wrapped) dataset, recording the last
    ``n_steps`` steps into ``rows``."""
    wrapped, collate, kwargs = args
    kw = dict(kwargs, num_workers=num_workers)
    if batch_size is not None:
        kw["batch_size"] = batch_size
    if num_workers == 0:
        for k in ("prefetch_factor", "persistent_workers", "worker_init_fn",
                  "multiprocessing_context"):
            kw.pop(k, None)
    it = iter(tud.DataLoader(wrapped, collate_fn=TimedCollate(collate, records, "probe"), **kw))
    for i in range(PROBE_SKIP + n_steps):
        t0 = clocks()
        try:
            batch = next(it)
        except StopIteration:
            return
        t1 = clocks()
        yield batch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if i >= PROBE_SKIP:
            rows.append(step_row(t0, t1, clocks(), False))


def _cold_steps(cold: ColdSteps, it, warnings: list[str]):
    """Yield the cold-resume probe's steps (:class:`calibration.cold_capture.ColdSteps`) from
    the iterator ``it``."""
    for k in range(len(cold.plan)):
        try:
            batch = next(it)
        except StopIteration:
            warnings.append(f"the DataLoader ran out after {k} of the cold-resume probe's "
                            f"{len(cold.plan)} steps")
            return
        cold.begin(k)
        yield batch
        cold.end(k)


def _probe_setting(cap: "Capture", probe_workers: int | None,
                   probe_batch_size: int | None) -> int | None:
    """The probe's ``num_workers`` (None: no probe), after checking the probe asked for."""
    if probe_workers is None and probe_batch_size is None:
        return None
    if probe_workers is not None and probe_batch_size is not None:
        raise ValueError("probe_workers and probe_batch_size are two probes: ask for one (each "
                         "measures its own change against the captured setting)")
    what = "probe_workers" if probe_workers is not None else "probe_batch_size"
    if not hasattr(cap, "_probe_args"):
        raise ValueError(f"{what} needs a loader made by Capture.dataloader")
    if probe_batch_size is None:
        if isinstance(probe_workers, bool) or not isinstance(probe_workers, int) \
                or not 0 <= probe_workers <= MAX_WORKERS:
            raise ValueError(f"probe_workers={probe_workers!r}: expected a whole number of "
                             f"workers from 0 to {MAX_WORKERS}")
        return probe_workers
    own = cap._loader_settings.get("batch_size")
    if isinstance(probe_batch_size, bool) or not isinstance(probe_batch_size, int) \
            or probe_batch_size < 1 or probe_batch_size == own:
        raise ValueError(f"probe_batch_size={probe_batch_size!r}: expected a whole number of "
                         f"samples >= 1 other than the loader's batch_size ({own})")
    return cap._loader_settings.get("num_workers", 0)


class Capture:
    """Records a profiler trace and a sidecar into ``out_dir`` (created if needed)."""

    def __init__(self, out_dir: str | os.PathLike):
        self.out_dir = Path(out_dir)
        make_folder(self.out_dir)
        self._records = tempfile.mkdtemp(prefix="stepsim-capture-")
        self._loader_settings: dict | None = None
        self._warnings: list[str] = []
        self._ddp: dict | None = None
        self._ddp_model = None
        self._stepped = False

    def dataloader(self, dataset, **kwargs) -> tud.DataLoader:
        """A ``torch.utils.data.DataLoader(dataset, **kwargs)`` whose workers time each batch
        (with ``num_workers=0``, the main thread does).

        Takes exactly DataLoader's keyword arguments.
        """
        collate = kwargs.pop("collate_fn", None)
        auto_batch = kwargs.get("batch_size", 1) is not None or kwargs.get("batch_sampler") is not None
        if collate is None:
            collate = tud.default_collate if auto_batch else tud.default_convert
        wrapped = TimedIterable(dataset) if isinstance(dataset, tud.IterableDataset) else TimedDataset(dataset)
        loader = tud.DataLoader(wrapped, collate_fn=TimedCollate(collate, self._records), **kwargs)
        self._loader_settings = loader_settings(loader)
        self._probe_args = (wrapped, collate, kwargs)
        try:
            self._loader_settings["dataset_len"] = len(dataset)
        except TypeError:
            self._loader_settings["dataset_len"] = None
        return loader

    def attach(self, loader: tud.DataLoader) -> tud.DataLoader:
        """Time the batches of a DataLoader the script already built, from its next
        ``iter()`` on; returns the same loader (see :func:`calibration.produce.attach_loader`).

        Raises:
            TypeError: ``loader`` is not a ``torch.utils.data.DataLoader``.
        """
        self._warnings += attach_loader(loader, self._records)
        self._loader_settings = loader_settings(loader)
        return loader

    def ddp(self, model):
        """Record the distributed job ``model`` trains in (a DistributedDataParallel module):
        world size, backend, buckets, parameters, each rank's host. A collective: call it on
        every rank. Returns ``model``. With a world size above 1, this rank writes into
        ``out_dir/rank<R>``. Over the profiled steps it also records, at no extra step, the
        CPU of the process's threads other than the training thread (gloo's: ``ddp.threads``)
        and that CPU between buckets' readiness, per bucket (``ddp.bucket_cpu``:
        :mod:`calibration.ddp_meter`), from which calibration measures gloo's CPU per
        collective and per MiB and its wake-ups.

        Raises:
            TypeError: ``model`` is not a ``torch.nn.Module``."""
        if not isinstance(model, torch.nn.Module):   # (its parameters were read: a traceback)
            raise TypeError(f"Capture.ddp(model): expected the DistributedDataParallel module "
                            f"(a torch.nn.Module), got a {type(model).__name__}")
        self._ddp = ddp_record(model)
        self._ddp_model = model if self._ddp is not None else None
        if self._ddp is None:   # a script run without torchrun: say why nothing is recorded
            warnings.warn("stepsim: Capture.ddp(model) outside a distributed job (no "
                          "torch.distributed process group is initialised): nothing recorded, "
                          "the capture is of a single process", stacklevel=2)
        return model

    def straggler(self, rank: int, ms: float) -> None:
        """Make rank ``rank`` of the job a straggler: it spins ``ms`` ms of wall-clock time
        (busy on ``time.perf_counter``, the core kept, as the what-if assumes; a sleep would
        free it) at the end of its DDP module's forward (a forward hook on ``model.module``),
        every step, and the sidecar records it (``ddp.straggler``), so that ``stepsim
        validate`` refuses the run against a prediction without ``--fix
        straggler:rank=R,phase=forward,ms=M``. Call it on every rank, after :meth:`ddp`
        and before :meth:`steps`.

        Raises:
            ValueError: no distributed job recorded by :meth:`ddp`, a rank not in it, ``ms``
                not a number > 0, or a second call."""
        if self._ddp_model is None:
            raise ValueError("Capture.straggler needs a distributed job: call "
                             "Capture.ddp(model) on every rank first")
        world = self._ddp["world_size"]
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise ValueError(f"Capture.straggler: rank={rank!r}: expected a rank of the job "
                             f"(0 to {world - 1})")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms <= 3.6e6:
            raise ValueError(f"Capture.straggler: ms={ms!r}: expected milliseconds > 0 (at "
                             "most an hour)")
        if self._ddp.get("straggler"):
            raise ValueError("Capture.straggler was already called on this Capture")
        self._ddp["straggler"] = {"rank": rank, "phase": "forward", "spin_us": float(ms) * 1e3}
        if self._ddp["rank"] == rank:
            module = getattr(self._ddp_model, "module", self._ddp_model)
            module.register_forward_hook(lambda mod, args, out: spin(ms))

    def steps(self, loader, active: int = 8, wait: int = 1, warmup: int = 2, skip_first: int = 3,
              probe_workers: int | None = None, probe_steps: int = 8, after: int = 0,
              probe_batch_size: int | None = None, cold_probe: bool = False):
        """Iterate over ``loader`` for ``skip_first + wait + warmup + active`` steps, profiling
        the last ``active`` of them, then ``after`` more with the profiler stopped (timed in
        the sidecar: the steps a validation of this run scores, as the user pays them,
        without the profiler's own cost); on exit write ``trace.json.gz`` and ``sidecar.json``.
        The profiler's stop pauses the loop while the workers fill the prefetch queue, and the
        first unprofiled steps that drain it are not scored
        (:func:`calibration.run_drift.settled_after`): take ``after`` at least
        ``num_workers × prefetch_factor + 20`` (``calibration.run_drift.SCORE_AFTER_STEPS``:
        a mean of fewer steps is pulled by single slow ones).

        With ``probe_workers`` (a loader made by :meth:`dataloader`), a short probe follows:
        ``probe_steps`` more steps (after ``PROBE_SKIP`` unrecorded ones, which carry the new
        workers' start-up) from a second DataLoader on the same dataset with that
        ``num_workers``, unprofiled, recorded in the sidecar's ``probe`` section; calibration
        fits co-run interference from it (:mod:`calibration.corun`). With
        ``probe_batch_size`` instead, the probe keeps ``num_workers`` and takes batches of that
        many samples: calibration measures from it how much of the training step and of a
        batch's produce time does not grow with the batch (:mod:`calibration.batch_probe`),
        which a ``loader.batch_size`` what-if then uses instead of assuming none.

        With ``cold_probe`` (a DDP job, after :meth:`ddp`), 36 more steps follow the
        ``after`` ones, before any loader probe, on the same loader and training as usual:
        for each pause of 10, 20 and 40 ms, 6 steps in which every rank spins that long at
        its DDP module's forward's end, alternated with 6 without (0.42 s of spin a rank in
        all; about 1.3 s on the DDP demo's MLP). It records the backward's and the
        optimizer's CPU after the pause against without (``ddp.cold_probe``:
        :mod:`calibration.cold_capture`), which the straggler and barrier what-ifs price
        (``comm.cold_resume``, ``comm.cold_resume_opt``, measured; without it they add no
        cold resume). Every rank must ask for it alike (the steps stay in step).

        A DataLoader not made by :meth:`dataloader` is attached (:meth:`attach`) first. Yields
        batches: only these ``skip_first + wait + warmup + active + after`` (then the cold
        probe's and the loader probe's), after which the loop ends, the capture written; the rest of the epoch is not yielded (loop
        over ``loader`` again to go on training). Stops early (with a warning in the sidecar) if the loader runs out. If the
        caller's loop stops early (``break``, an exception), the sidecar is still written, with
        a warning, and the trace too if the profiler completed its active steps. Per step it
        records the main thread's and the main process's CPU time (the latter counts torch's
        intra-op threads).

        Raises:
            ValueError: for a non-positive ``active`` or ``probe_steps`` or negative schedule
                counts, both probes
                at once, a probe without a loader made by :meth:`dataloader`, or a
                ``probe_batch_size`` that is not a whole number ≥ 1 or is the loader's own,
                or ``cold_probe`` not a bool or without a distributed job recorded by
                :meth:`ddp`.
            RuntimeError: a second call on one Capture (it would overwrite the first capture).
        When the loop ended before the profiler completed its active steps (no trace is
        written when none completed, a stub of the step in progress being all the profiler
        had), a ``UserWarning`` says so at the end, with the sidecar's warnings.
        """
        if self._stepped:
            raise RuntimeError(f"Capture.steps was already called on this Capture: a second "
                               f"capture would overwrite the first in {self.out_dir}; make a "
                               "new Capture with another out_dir")
        if isinstance(probe_steps, bool) or not isinstance(probe_steps, int) or probe_steps < 1:
            raise ValueError(f"probe_steps={probe_steps!r}: expected a whole number of steps "
                             ">= 1")
        if not isinstance(cold_probe, bool):     # ("no" asked for 36 steps of the probe)
            raise ValueError(f"cold_probe={cold_probe!r}: expected True or False")
        if cold_probe and self._ddp_model is None:
            raise ValueError("cold_probe needs a distributed job: call Capture.ddp(model) on "
                             "every rank first")
        self._stepped = True
        if self._loader_settings is None and isinstance(loader, tud.DataLoader):
            self.attach(loader)
        elif self._loader_settings is None:   # a list, a generator: no batch can be timed
            warnings.warn(f"stepsim: Capture.steps(loader): a {type(loader).__name__}, not a "
                          "torch DataLoader (nor one made by Capture.dataloader or attached): "
                          "only the trace is written, no sidecar", stacklevel=2)
        win = Window(rank_dir(self.out_dir, self._ddp), self._records, self._loader_settings,
                     via="harness", active=active, wait=wait, warmup=warmup,
                     skip_first=skip_first, after=after, ddp=self._ddp,
                     warnings=self._warnings, ddp_model=self._ddp_model)
        probe_nw = _probe_setting(self, probe_workers, probe_batch_size)
        win.hold = probe_nw is not None or cold_probe
        cold = None
        win.iter_start_us = clocks()[0]     # workers start in iter(): their start-up from here
        it = iter(loader)
        reason = None
        win.start()
        try:
            for i in range(win.total):
                try:
                    batch = next(it)
                except StopIteration:
                    reason = f"the DataLoader ran out after {i} of {win.total} steps"
                    break
                win.batch_ready()
                yield batch
                win.step_end()
            if cold_probe and len(win.rows) == win.total:
                cold = ColdSteps(self._ddp_model)
                yield from _cold_steps(cold, it, win.warnings)
            if probe_nw is not None and len(win.rows) == win.total:
                it = None   # the first loader's workers shut down before the probe starts
                rows: list[dict] = []
                win.probe = {"num_workers": probe_nw, "steps": rows}
                if probe_batch_size is not None:
                    win.probe["batch_size"] = probe_batch_size
                yield from _probe(self._probe_args, probe_nw, probe_batch_size, probe_steps,
                                  self._records, rows)
        finally:
            # also when the training loop stops early (break, exception): what was recorded
            # is written, and the sidecar says what is missing
            del it
            if cold is not None:
                cold.close()
                self._ddp["cold_probe"] = cold.rows(win.warnings)
            win.finish(reason)
            if win.profiled_steps < win.schedule["active"]:   # no trace, or a short one
                warnings.warn(f"stepsim capture {win.out_dir}: " + "; ".join(win.warnings),
                              stacklevel=2)
