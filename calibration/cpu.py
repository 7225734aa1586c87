"""Calibration of a host-side (CPU) training loop from a Kineto trace plus the capture sidecar.

What is read (times converted to µs):

* per step (``ProfilerStep#N``, start to next start; :mod:`calibration.steps`): the step time,
  the main thread's DataLoader wait (summed ``enumerate(DataLoader)#…__next__`` on the step's
  thread) and the rest of the step, the main thread's compute;
* from the sidecar (:mod:`calibration.capture`): every batch's produce time measured inside
  its worker (wall and CPU), the loader settings, the host's usable cores, torch's intra-op
  threads, the batch size in bytes, the main process's CPU time per step.

The model (:class:`models.params.StepModel`): the host thread does ``next_batch`` then one
``cpu`` op whose duration is drawn from the measured per-step compute times; the loader's
``produce`` is the empirical distribution of the steady-state batches (:func:`steady_records`,
:func:`fit_produce`). Both use wall time when the calibration run had a core for every busy
thread, and CPU time when it had more busy threads than cores (its wall times then hold waits
for a core, which the simulator adds itself). Without a sidecar, produce time is inferred from
the trace (``num_workers=0``: the ``next()`` time; otherwise ``num_workers ×`` the mean step,
valid only when the run was input-bound) and the core count is assumed; each such fallback
adds a warning.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.steps import StepList
from stepsim.calibration.step_fallback import no_step_error
from stepsim.models.params import (DurationSpec, HostOp, HostParams, LoaderParams, Meta, StepModel)

MIN_STEPS = 4
"""Fewer profiled steps than this give a warning."""
CORE_WAIT_RATIO = 1.15
"""Wall ÷ CPU time of the training step above which its thread(s) waited for a core."""
DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")


def waited_for_cores(wall_us: float, cpu_us: float, torch_threads: int, host_cores: int) -> bool:
    """Whether a training step of ``wall_us`` µs that used ``cpu_us`` µs of CPU (all its
    threads) waited for a core: its wall time exceeds ``CORE_WAIT_RATIO`` × the CPU time
    spread over its intra-op threads (at most ``host_cores`` of them run at once)."""
    return wall_us > CORE_WAIT_RATIO * cpu_us / max(1, min(torch_threads, host_cores))


def step_loader_waits_us(table: EventTable, steps: StepList) -> np.ndarray:
    """Per step, µs the step's host thread spent in ``enumerate(DataLoader)#…__next__``.

    Returns shape (len(steps),) float64.
    """
    is_next = np.fromiter((bool(DATALOADER_NEXT.match(n)) for n in table.names), bool, len(table))
    mask = is_next & (table.ph == "X")
    ts, dur, tid, pid = table.ts_ns[mask], table.dur_ns[mask], table.tid[mask], table.pid[mask]
    out = np.zeros(len(steps))
    for i, s in enumerate(steps):
        sel = (tid == s.tid) & (pid == s.pid) & (ts >= s.start_ns) & (ts < s.end_ns)
        out[i] = dur[sel].sum() / 1e3
    return out


def fit_cpu_model(table: EventTable, steps: StepList, sidecar: Sidecar | None,
                  trace_path: Path, sidecar_path: Path | None) -> StepModel:
    """Fit the StepModel of a CPU training loop (see the module docstring).

    Raises:
        InputError: when the trace has no step to calibrate from.
    """
    if not steps:
        raise no_step_error(trace_path, steps.warnings)
    warnings = list(table.warnings) + list(steps.warnings)
    if sidecar is not None:
        warnings += [f"capture: {w}" for w in sidecar.warnings]
    if len(steps) < MIN_STEPS:
        warnings.append(f"only {len(steps)} step(s) to calibrate from: the model's numbers are "
                        f"uncertain (profile at least {MIN_STEPS} steps)")
    sources: dict[str, str] = {}
    step_us = np.array([(s.end_ns - s.start_ns) / 1e3 for s in steps])
    wait_us = step_loader_waits_us(table, steps)
    compute_us = np.maximum(step_us - wait_us, 0.0)
    if not wait_us.any():
        warnings.append("no DataLoader __next__ events in the steps: input wait taken as 0")

    lp: dict = {}
    notes_produce = None
    if sidecar is not None:
        settings = loader_settings(sidecar)
        nw = settings["num_workers"]
        lp.update(settings)
        sources.update({f"loader.{k}": "measured" for k in settings})
        if sidecar.loader.prefetch_factor is None:
            sources["loader.prefetch_factor"] = "assumed"
        recs = steady_records(sidecar, nw)
        if recs:
            spec, tpw, why = fit_produce(recs, nw, sidecar.host_cores,
                                         sidecar.torch_num_threads or 1)
            lp["produce"] = spec
            sources["loader.produce"] = "measured"
            notes_produce = why
            if tpw > 1:
                lp["threads_per_worker"] = tpw
                sources["loader.threads_per_worker"] = "inferred"
                warnings.append(f"workers used about {tpw} cores each while producing (library "
                                f"threads, e.g. BLAS): threads_per_worker set to {tpw}")
            nbytes = [r.bytes for r in recs if r.bytes]
            if nbytes:
                lp["batch_bytes"] = int(np.median(nbytes))
                sources["loader.batch_bytes"] = "measured"
        if sidecar.host_cores:
            lp["host_cores"] = sidecar.host_cores
            sources["loader.host_cores"] = "measured"
    else:
        warnings.append("no sidecar: loader settings, per-batch produce time and host cores "
                        "could not be measured (use calibration.capture to record them)")
        nw = 0 if not wait_us.any() else _guess_workers(table)
        lp["num_workers"] = nw
        sources["loader.num_workers"] = "inferred"
    if "produce" not in lp:
        if nw == 0:
            lp["produce"] = DurationSpec.from_samples(list(wait_us))
        else:
            lp["produce"] = DurationSpec(mean_us=float(nw * step_us.mean()))
            warnings.append("produce time inferred as num_workers × mean step: valid only if the "
                            "run was input-bound")
        sources["loader.produce"] = "inferred"
    if "host_cores" not in lp:
        lp["host_cores"] = max(1, lp.get("num_workers", 0) + 1)
        sources["loader.host_cores"] = "assumed"
        warnings.append(f"host cores unknown: assumed {lp['host_cores']} (one per thread)")
    prof = [s for s in sidecar.steps if s.profiled] if sidecar is not None else []
    if lp.get("num_workers", 0) > 0 and prof:
        # next() blocks without using CPU while it waits for a worker; the CPU it does use is
        # the hand-over of the batch (unpickling, bookkeeping)
        lp["unpickle_us"] = float(np.median([s.next_cpu_us for s in prof]))
        sources["loader.unpickle_us"] = "measured"
    for k in LoaderParams.model_fields:
        sources.setdefault(f"loader.{k}", "assumed")

    # The training step's wall time (trace) is its cost on this machine as it was, unless the
    # run itself had more runnable threads than cores: then the wall time already holds the
    # waits for a core that the simulator adds again, and the main thread's CPU time is used.
    torch_threads = (sidecar.torch_num_threads or 1) if sidecar is not None else 1
    threads = lp["num_workers"] * lp.get("threads_per_worker", 1) + torch_threads
    compute_basis = "wall_time"
    if prof:
        cpu_compute = np.array([s.compute_cpu_us for s in prof])
        if threads > lp["host_cores"]:
            compute_us, compute_basis = cpu_compute, "cpu_time"
            if torch_threads > 1:
                warnings.append(
                    f"torch used {torch_threads} intra-op threads beside {lp['num_workers']} "
                    f"workers on {lp['host_cores']} cores: the training step's CPU time of all "
                    "its threads is modelled as one thread's work")
        elif waited_for_cores(float(compute_us.mean()), float(cpu_compute.mean()),
                              torch_threads, lp["host_cores"]):
            warnings.append(
                f"the training step's wall time ({compute_us.mean() / 1e3:.1f} ms) exceeds its "
                f"CPU time ({cpu_compute.mean() / 1e3:.1f} ms) by more than 15 % although every "
                "thread had a core: other load on the machine slowed the run")
    compute_mean = float(compute_us.mean())
    host = HostParams(ops=[HostOp(kind="next_batch", name="next(DataLoader)"),
                           HostOp(kind="cpu", name="training step", dur_us=compute_mean,
                                  samples_us=[float(v) for v in compute_us], category="train")])
    sources["host.ops[1].dur_us"] = "measured"
    notes: dict = {"kind": "cpu", "produce_basis": notes_produce, "compute_basis": compute_basis,
                   "input_wait_mean_us": float(wait_us.mean()),
                   "compute_mean_us": compute_mean, "step_method": steps.method}
    if sidecar is not None:
        notes.update(torch_version=sidecar.torch_version, device=sidecar.device)
    name = trace_path.parent.name or trace_path.name
    meta = Meta(name=name, sources=sources,
                traces=[str(trace_path)] + ([str(sidecar_path)] if sidecar_path else []),
                steps_used=[s.number for s in steps], measured_step_us=[float(v) for v in step_us],
                warnings=warnings, notes=notes)
    return StepModel(loader=LoaderParams(**lp), host=host, meta=meta)


def loader_settings(sidecar: Sidecar) -> dict:
    """The DataLoader's settings recorded in the sidecar, as LoaderParams fields (PyTorch's
    defaults where the run used none: ``prefetch_factor=2``, ``in_order=True``)."""
    ls = sidecar.loader
    return dict(num_workers=ls.num_workers, prefetch_factor=ls.prefetch_factor or 2,
                pin_memory=ls.pin_memory, persistent_workers=ls.persistent_workers,
                in_order=True if ls.in_order is None else ls.in_order, batch_size=ls.batch_size)


def fit_produce(recs, num_workers: int, host_cores: int | None, main_threads: int = 1):
    """The produce-time distribution from steady-state records.

    Returns ``(DurationSpec, threads_per_worker, basis)``. ``threads_per_worker`` is the
    median ratio of a worker's process CPU time to its wall time, rounded (1 unless library
    threads ran). When the calibration run had no more producer and host threads than cores,
    each batch's **wall** time × threads is used: it is what producing cost on this machine as
    it was, other load included. Otherwise the wall time is inflated by the run's own
    contention, which the simulator models itself, so the CPU time is used.
    """
    par = float(np.median([r.work_us / r.wall_us for r in recs if r.wall_us > 0] or [1.0]))
    tpw = int(round(par)) if par > 1.3 else 1
    threads = num_workers * tpw + main_threads
    if host_cores is not None and threads > host_cores:
        return DurationSpec.from_samples([r.work_us for r in recs]), tpw, "cpu_time"
    return DurationSpec.from_samples([r.wall_us * tpw for r in recs]), tpw, "wall_time"


def steady_records(sidecar: Sidecar, num_workers: int):
    """The produce records that represent the steady state: those of the right producer (the
    main thread when ``num_workers`` is 0), finished inside the profiled window when the
    sidecar has the instants (at least 3 of them), and never a producer's first batch (it
    carries the worker's start-up)."""
    recs = [r for r in sidecar.produce if (r.worker < 0) == (num_workers == 0)]
    prof = [s for s in sidecar.steps if s.profiled and s.t_start_us is not None]
    if prof and all(r.t_end_us is not None for r in recs):
        lo, hi = prof[0].t_start_us, prof[-1].t_start_us + prof[-1].wall_us
        window = [r for r in recs if lo <= r.t_end_us <= hi]
        if len(window) >= 3:
            recs = window
    seen: set[int] = set()
    steady = []
    for r in sorted(recs, key=lambda r: (r.pid, r.seq)):
        if r.pid in seen:
            steady.append(r)
        seen.add(r.pid)
    return steady or recs


def _guess_workers(table: EventTable) -> int:
    """num_workers=1 is the least assumption when the trace shows a multi-process loader."""
    multi = any("_MultiProcessingDataLoaderIter" in n for n in table.names[:])
    return 1 if multi else 0
