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

from stepsim.calibration.batch_probe import probe_fields
from stepsim.calibration.events import EventTable
from stepsim.calibration.host_step import (CORE_WAIT_RATIO,  # noqa: F401  (re-exported)
                                           efficiency_range, parallel_efficiency,
                                           split_host_step, stalled_team_wall, waited_for_cores)
from stepsim.calibration.outside_load import outside_load
from stepsim.calibration.page_faults import (FAULT_GROWTH_EXPONENT, FAULT_GROWTH_POINT,
                                             refault_fit)
from stepsim.calibration.profiler_overhead import (step_factor, step_factor_note,
                                                    team_overhead_note)
from stepsim.calibration.run_drift import drift_ratio, profiled_drift
from stepsim.calibration.single_window import (WINDOW_DRIFT_SOURCE, single_drift,
                                               single_drift_warning)
from stepsim.calibration.step_tail import step_tail
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_fit import (STARTUP_UNMEASURED, capture_loads,
                                             interference_from_sidecar, loader_from_sidecar,
                                             team_stall_from_sidecar)
from stepsim.calibration.startup_step import startup_step
from stepsim.calibration.steps import StepList
from stepsim.calibration.sys_spikes import calm_window
from stepsim.calibration.team_stall import preempted_share, team_spin_from_sidecar
from stepsim.calibration.step_fallback import no_step_error
from stepsim.models.params import (DurationSpec, HostOp, HostParams, LoaderParams, Meta, StepModel)
from stepsim.models.warning_record import said

MIN_STEPS = 4
"""Fewer profiled steps than this give a warning."""
BLOCK_NOTE_SHARE = 0.15
"""Share of the training step's wall time without CPU above which calibration says so."""
DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
OPTIMIZER_SPAN = re.compile(r"^Optimizer\.(step|zero_grad)#")
"""The profiler's spans of ``torch.optim.Optimizer.step`` and ``zero_grad``: work per step."""


def step_loader_waits_us(table: EventTable, steps: StepList,
                         pattern: re.Pattern = DATALOADER_NEXT) -> np.ndarray:
    """Per step, µs the step's host thread spent in ``enumerate(DataLoader)#…__next__`` (or in
    the spans whose names match ``pattern``).

    Returns shape (len(steps),) float64.
    """
    is_next = np.fromiter((bool(pattern.match(n)) for n in table.names), bool, len(table))
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
        warnings += [f"capture: {w}" for w in sidecar.warnings] + sidecar.dropped
    if len(steps) < MIN_STEPS:
        warnings.append(f"only {len(steps)} step(s) to calibrate from: the model's numbers are "
                        f"uncertain (profile at least {MIN_STEPS} steps)")
    sources: dict[str, str] = {}
    step_us = np.array([(s.end_ns - s.start_ns) / 1e3 for s in steps])
    wait_us = step_loader_waits_us(table, steps)
    steps, step_us, wait_us, startup = _without_startup(table, steps, step_us, wait_us, sidecar)
    if startup:
        warnings.append(startup)
    compute_us = np.maximum(step_us - wait_us, 0.0)
    if not wait_us.any():
        warnings.append("no DataLoader __next__ events in the steps: input wait taken as 0")

    lp: dict = {}
    notes_produce = None
    torch_threads = (sidecar.torch_num_threads or 1) if sidecar is not None else 1
    if sidecar is not None:
        upd, src, warn, notes_produce = loader_from_sidecar(sidecar, torch_threads)
        lp.update(upd)
        sources.update(src)
        warnings += warn
        nw = lp["num_workers"]
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
        traced, nw = traced_threads(table), lp.get("num_workers", 0)
        lp["host_cores"] = max(1, traced + nw)
        sources["loader.host_cores"] = "assumed"
        warnings.append(f"host cores unknown (no sidecar): assumed {lp['host_cores']}, one per "
                        f"thread the run used ({traced} thread(s) in the trace + {nw} "
                        "worker(s)); what-ifs that add threads are priced on them (record with "
                        "calibration.capture to measure them)")
    load = (outside_load(sidecar, lp["num_workers"], lp.get("threads_per_worker", 1),
                         torch_threads) if sidecar is not None else None)
    threads = lp["num_workers"] * lp.get("threads_per_worker", 1) + torch_threads
    team = torch_threads if sidecar is not None and threads > lp["host_cores"] else 1
    load_warning = (load.warning(team) if team > 1 or torch_threads <= 1 or sidecar is None
                    else load.warning(torch_threads, inverted=False)) if load is not None else None
    if load_warning:
        warnings.append(load_warning)
    preempted_kept = None   # the training step's preempted share, where kept as CPU work
    drift = profiled_drift(sidecar) if sidecar is not None else None
    if drift:
        warnings.append(drift)
    prof = [s for s in sidecar.steps if s.profiled] if sidecar is not None else []
    if startup and prof and prof[0] is sidecar.steps[0]:
        prof = prof[1:]
    # profiled steps with a system-CPU spike are neither the step's work nor the profiler's
    # per-op cost: the step's duration is the others' (calibration.sys_spikes)
    calm, spike_warn = calm_window(sidecar, prof, len(compute_us))
    keep = np.ones(len(compute_us), bool) if calm is None else calm
    if spike_warn:
        warnings.append(spike_warn)
    window_us, window_prof = compute_us, prof      # the whole window, its spikes included
    compute_us, prof = compute_us[keep], [s for s, k in zip(prof, keep) if k] if prof else prof
    for k in LoaderParams.model_fields:
        sources.setdefault(f"loader.{k}", "assumed")

    # The training step's wall time (trace) is its cost on this machine as it was, split into
    # one thread's CPU work, intra-op threads' parallel work and blocking by its measured CPU
    # time (split_host_step), unless the run itself had more runnable threads than cores: then
    # the wall time already holds the waits for a core that the simulator adds again, and the
    # CPU time is used.
    compute_basis, split = "wall_time", {"threads": torch_threads}
    ranges: dict[str, tuple[float, float]] = {}
    if sidecar is not None and torch_threads > 1:
        split.update(capture_threads=torch_threads, parallel_efficiency=parallel_efficiency(
            torch_threads))
        ranges["host.ops[1].parallel_efficiency"] = efficiency_range(torch_threads)
        sources["host.ops[1].parallel_efficiency"] = "assumed"
    stall_host, stall_src, stall_warn = team_stall_from_sidecar(sidecar)
    sources.update(stall_src)
    warnings += stall_warn
    spin_host, spin_src, spin_warn = team_spin_from_sidecar(sidecar)
    stall_host = {**stall_host, **spin_host}
    sources.update(spin_src)
    warnings += spin_warn
    if prof:
        if threads > lp["host_cores"]:
            compute_basis = "cpu_time"
            gamma = stall_host.get("team_stall", 1.0)
            compute_us, share = _cpu_basis_us(prof, torch_threads, gamma)
            if calm is not None:    # the whole window on the same basis, for the replay
                window_us = _cpu_basis_us(window_prof, torch_threads, gamma)[0]
            split["parallel_fraction"] = 1.0 if torch_threads > 1 else 0.0
            sources["host.ops[1].parallel_fraction"] = "assumed"
            sources["host.ops[1].block_fraction"] = "assumed"
            if torch_threads > 1:
                stall_host["team_stall_share"] = max(share, 1e-6)   # re-inverted at each γ
                warnings.append(said(
                    f"torch used {torch_threads} intra-op threads beside {lp['num_workers']} "
                    f"worker(s) on {lp['host_cores']} cores: the training step's wall time holds "
                    "its threads' stalls (a parallel region waits for a thread without a core, "
                    f"the others spinning), so it is modelled as parallel work on {torch_threads} "
                    f"threads of its wall × s^(1 + γ·{torch_threads - 1}) at γ {gamma:.2f}, "
                    f"s = CPU ÷ ({torch_threads} × wall) "
                    f"= {share:.2f} each thread's share of a core (blocking 0)",
                    "team_parallel", noted=True,
                    summary=f"torch's {torch_threads} intra-op threads beside "
                            f"{lp['num_workers']} worker(s) on {lp['host_cores']} cores: step "
                            f"modelled as parallel work (share {share:.2f})"))
        else:
            cpu_compute = _step_cpu_us(prof, torch_threads)
            wall = float(np.mean([s.wall_us - s.next_wall_us for s in prof]))
            pf, bf = split_host_step(wall, float(cpu_compute.mean()), torch_threads)
            preempted = preempted_share(prof)
            if bf * preempted > BLOCK_NOTE_SHARE and load_warning is None:
                preempted_kept = preempted   # meta.notes.capture_preempted
                # off-core time spent preempted (waiting for a core: other load, as the run
                # was uncontended) is the machine as it was: kept as CPU work
                warnings.append(
                    f"the training step was preempted in {100 * preempted:.0f} % of its context "
                    f"switches ({wall / 1e3:.1f} ms wall, {cpu_compute.mean() / 1e3:.1f} ms CPU "
                    "although every thread had a core): other load on the machine slowed the "
                    "run; that share of its off-core time is modelled as CPU work")
            bf *= 1 - preempted
            switches = any(s.vcsw is not None for s in prof)
            if not switches:
                # an older sidecar without context switches cannot tell blocking from
                # waiting for a core behind other load: the off-core time stays CPU work
                bf = 0.0
            split.update(parallel_fraction=pf, block_fraction=bf)
            sources["host.ops[1].parallel_fraction"] = "inferred"
            sources["host.ops[1].block_fraction"] = "inferred" if switches else "assumed"
            if bf > BLOCK_NOTE_SHARE:
                warnings.append(
                    f"the training step used no core for {100 * bf:.0f} % of its wall time "
                    f"({wall / 1e3:.1f} ms wall, {cpu_compute.mean() / 1e3:.1f} ms CPU on "
                    f"{torch_threads} thread(s)): modelled as blocking (a sync, I/O), which does "
                    "not compete with workers for cores")
        split["corun_ref"] = capture_loads(sidecar)[1]
        sources["host.ops[1].corun_ref"] = "measured"
    stepf = step_factor(sidecar)     # the profiler's cost on the step, measured
    # gloo_window's check on the step as priced: does it miss the run's later steps?
    window = single_drift(sidecar, stepf[1].factor, warnings) if stepf is not None else None
    if stepf is not None:
        compute_us = compute_us * stepf[0]
        if abs(stepf[0] - 1) > 0.02:
            warnings.append(step_factor_note(*stepf, float(compute_us.mean())))
        warnings += [w for w in [single_drift_warning(window)] if w]
    elif (team_note := team_overhead_note(sidecar)) is not None:
        warnings.append(team_note)
    profiler_measured = stepf is not None
    # the run's own steps where the window does not represent them (calibration.step_tail)
    tail = None if profiler_measured else step_tail(sidecar, float(compute_us.mean()))
    if tail is not None:
        compute_us = compute_us * tail.factor
        warnings = [w for w in warnings if w != drift] + [tail.describe()]
    # its page faults, measured: on one thread beside the profiler's measured cost, and on a
    # team (whose profiler cost is not measured) from the main thread's CPU, which holds the
    # faults it takes; a user's 2-thread CNN re-faulted 6,126 pages a step at 1 worker and
    # 0-15 at 0 and 2 workers, which the kept step had predicted +33 / +21 % (2026-12-05)
    rf = refault_fit(sidecar) if profiler_measured or torch_threads > 1 else None
    refault: dict = {}
    if rf is not None and rf.refault_us > 0 and rf.unprofiled_us > 0:
        g = rf.fault_free_us / rf.unprofiled_us     # to the fault-free work, then the share
        compute_us = compute_us * g
        split.update({f"{k}_us": v / rf.fault_free_us * float(compute_us.mean()) for k, v in
                      (("refault", rf.refault_us), ("touched", rf.touched_us))})  # its bound
        refault = {"refault_share": 0.5, "refault_share_range": (0.0, 1.0)}
        sources.update({"host.ops[1].refault_us": "measured", "host.refault_share": "assumed",
                        "host.ops[1].touched_us": "measured"})
        # what the replay undoes (models.host_speed.at_capture_speed)
        stepf = ((stepf[0] if stepf else 1.0) * g,) + (tuple(stepf[1:]) if stepf else ())
        warnings.append(rf.describe(refault["refault_share"]))
    compute_mean = float(compute_us.mean())
    replay_f = (stepf[0] if stepf is not None else 1.0) * (tail.factor if tail else 1.0)
    replay_f = None if stepf is None and tail is None else replay_f
    # the window's steps without a spike ÷ all of it, both on the step's basis (wall or CPU)
    calm_ratio = (float(window_us[keep].mean()) / float(window_us.mean())
                  if calm is not None else None)
    if calm_ratio is not None:    # the replay of the captured window gets its spikes back
        replay_f = (replay_f or 1.0) * calm_ratio
    opt_us = step_loader_waits_us(table, steps, OPTIMIZER_SPAN)[keep]
    wall_compute = float(np.maximum(step_us - wait_us, 0.0)[keep].sum())
    if opt_us.any() and wall_compute > 0:
        # the optimizer's share of the step's wall outside next() (it does not grow with the
        # batch), applied to the op's duration whatever its basis
        split["per_step_fraction"] = min(float(opt_us.sum()) / wall_compute, 1.0)
        sources["host.ops[1].per_step_fraction"] = "measured"
    probed = probe_fields(sidecar)
    if probed is not None:   # measured at two batch sizes: it replaces the optimizer's share
        split.update(probed.split)
        lp.update(probed.loader)
        sources.update(probed.sources)
        warnings += probed.warnings
    if refault and probed is None:     # a batch-size probe measures the growth instead
        refault.update(refault_growth=FAULT_GROWTH_POINT,
                       refault_growth_range=FAULT_GROWTH_EXPONENT)
        sources["host.refault_growth"] = "assumed"
    host_fields, src, more, warn = interference_from_sidecar(sidecar)
    host_fields.update(stall_host, **refault)
    ranges.update(more)
    sources.update(src)
    warnings += warn
    host = HostParams(ops=[HostOp(kind="next_batch", name="next(DataLoader)"),
                           HostOp(kind="cpu", name="training step", dur_us=compute_mean,
                                  samples_us=[float(v) for v in compute_us], category="train",
                                  **split)],
                      **host_fields)
    sources["host.ops[1].dur_us"] = "measured"
    sources["host.ops[1].threads"] = "measured" if sidecar is not None else "assumed"
    notes: dict = {"kind": "cpu", "produce_basis": notes_produce, "compute_basis": compute_basis,
                   "input_wait_mean_us": float(wait_us.mean()),
                   "compute_mean_us": compute_mean, "step_method": steps.method}
    if window is not None:
        notes.update(window_drift=window.d, window_drift_source=WINDOW_DRIFT_SOURCE)
    if replay_f is not None:   # undone by models.host_speed.at_capture_speed for the replay
        notes["step_profiler_factor"] = replay_f
    if calm_ratio is not None:   # the window's steps without a spike ÷ all of it (mean wall)
        notes["calm_window_ratio"] = calm_ratio
    if drift and not profiler_measured and tail is None:   # the model is of that window (input_caveats)
        notes["profiled_drift"] = drift_ratio(sidecar)
    if sidecar is not None:
        notes.update(torch_version=sidecar.torch_version, device=sidecar.device)
    if load is not None:
        notes["outside_load_held"] = load.held
        if team > 1 and load_warning:   # the stall's inversion compounds the load
            notes["outside_load_team"] = team
    if preempted_kept is not None:   # the baseline holds that load (capture_load_phrase)
        notes["capture_preempted"] = preempted_kept
    if probed is not None and probed.note:
        notes["batch_probe"] = probed.note
    if lp["num_workers"] > 0 and sources.get("loader.worker_startup_us") == "assumed":
        notes["loader.worker_startup_us"] = STARTUP_UNMEASURED     # why it is assumed
    name = trace_path.parent.name or trace_path.name
    meta = Meta(name=name, sources=sources,
                traces=[str(trace_path)] + ([str(sidecar_path)] if sidecar_path else []),
                steps_used=[s.number for s in steps], measured_step_us=[float(v) for v in step_us],
                warnings=warnings, notes=notes, ranges=ranges)
    return StepModel(loader=LoaderParams(**lp), host=host, meta=meta)


def _step_cpu_us(prof: list, torch_threads: int) -> np.ndarray:
    """Per profiled sidecar step, the training step's CPU time (µs) outside ``next()``: its
    thread's on one intra-op thread, its threads' together on more."""
    if torch_threads == 1:
        return np.array([max(s.cpu_us - s.next_cpu_us, 0.0) for s in prof])
    return np.array([s.compute_cpu_us for s in prof])


def _cpu_basis_us(prof: list, torch_threads: int, gamma: float
                  ) -> tuple[np.ndarray, float | None]:
    """``(per step µs, mean share)`` of the profiled steps ``prof`` on the ``cpu_time`` basis
    (more runnable threads than cores): one thread's CPU time (share None), or a team's wall
    with a core per thread (:func:`calibration.host_step.stalled_team_wall` at ``gamma``)."""
    cpu = _step_cpu_us(prof, torch_threads)
    if torch_threads == 1:
        return cpu, None
    walls = np.array([s.wall_us - s.next_wall_us for s in prof])
    return stalled_team_wall(walls, cpu, torch_threads, gamma)


def traced_threads(table: EventTable) -> int:
    """Distinct threads with CPU events in the trace (Kineto's own spans, at negative ids,
    left out): evidence from the run itself, whatever machine reads it."""
    mask = (table.ph == "X") & (table.pid >= 0) & (table.tid >= 0)
    return len(set(zip(table.pid[mask].tolist(), table.tid[mask].tolist())))


def _without_startup(table: EventTable, steps: StepList, step_us: np.ndarray,
                     wait_us: np.ndarray, sidecar: Sidecar | None):
    """``(steps, step_us, wait_us, note)`` without the worker start-up step when the trace
    holds it, by validation's rule (:func:`calibration.startup_step.startup_step`), so the
    calibrated and the re-measured means count the same steps; ``note`` says so ("" when
    there was none)."""
    multi = any("_MultiProcessingDataLoaderIter" in n for n in table.names)
    up = startup_step(sidecar, step_us, wait_us, multi and steps[0].number == 0)
    if up is None or not up.in_trace:
        return steps, step_us, wait_us, ""
    note = (f"the worker start-up step (step {steps[0].number}: {up.step_us / 1e3:.1f} ms, its "
            f"next() {up.next_us / 1e3:.1f} ms against {up.later_next_us / 1e3:.2f} ms after "
            "it) is left out of the calibrated steps, as validation leaves it out")
    return (StepList(list(steps)[1:], steps.warnings, steps.method), step_us[1:], wait_us[1:],
            note)


def _guess_workers(table: EventTable) -> int:
    """num_workers=1 is the least assumption when the trace shows a multi-process loader."""
    multi = any("_MultiProcessingDataLoaderIter" in n for n in table.names[:])
    return 1 if multi else 0
