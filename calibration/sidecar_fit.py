"""What the capture sidecar says about the DataLoader and the host, for every calibration path
(a CPU loop's trace and a GPU trace read it alike, so no parameter a sidecar measures is left
at its default on one path).

* :func:`loader_from_sidecar`: the loader's settings, per-batch produce time
  (:func:`fit_produce`), threads per worker, batch bytes, the main thread's hand-over time per
  batch (``unpickle_us``), a worker's hand-over CPU per batch (:mod:`calibration.handover`),
  the host's cores and the co-run load the batches were produced under
  (:mod:`calibration.corun`).
* :func:`interference_from_sidecar`: the co-run interference coefficient, fitted from the
  sidecar's probe at a second ``num_workers`` when there is one, else the stated prior
  (:data:`calibration.corun.INTERFERENCE_PRIOR`), and the host's run-to-run noise prior
  (:data:`models.host_speed.HOST_NOISE_PRIOR`).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.corun import (FIT_GRID, INTERFERENCE_PRIOR, activities, corun_loads,
                                       fit_interference, mean_load, probe_activities)
from stepsim.calibration.handover import handover_from_sidecar, probe_unpickle
from stepsim.calibration.oversub import oversub_from_sidecar
from stepsim.calibration.probe_steps import (PROBE_FIRST_STEPS, after_startup,  # noqa: F401
                                             probe_base_steps, uniform_with_p10_p90)
from stepsim.calibration.same_thread import (probe_rule, same_side_workers,
                                             same_thread_from_sidecar)
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_cross import step_window
from stepsim.calibration.sidecar_records import THREAD_SLACK_US
from stepsim.calibration.team_stall import (TEAM_STALL_PRIOR, contended_team_stall,
                                           fit_team_stall)
from stepsim.models.host_speed import HOST_NOISE_PRIOR
from stepsim.models.params import MAX_THREADS, DurationSpec
from stepsim.models.warning_record import prior_said, said



def loader_settings(sidecar: Sidecar) -> dict:
    """The DataLoader's settings recorded in the sidecar, as LoaderParams fields (PyTorch's
    defaults where the run used none: ``prefetch_factor=2``, ``in_order=True``)."""
    ls = sidecar.loader
    return dict(num_workers=ls.num_workers, prefetch_factor=ls.prefetch_factor or 2,
                pin_memory=ls.pin_memory, persistent_workers=ls.persistent_workers,
                in_order=True if ls.in_order is None else ls.in_order, batch_size=ls.batch_size)


def fit_produce(recs, num_workers: int, host_cores: int | None, main_threads: int = 1,
                ranks: int = 1):
    """The produce-time distribution from steady-state records.

    Returns ``(DurationSpec, threads_per_worker, basis)``. ``threads_per_worker`` is the
    median ratio of a worker's process CPU time to its wall time, or to its producing thread's
    CPU time where that is more, rounded (1 unless library threads ran): beside more runnable
    threads than cores a worker's wall holds its threads' waits, so the wall's ratio reads 1
    (fresh7's audio worker, numpy's OpenBLAS at 2 threads that spin: process CPU 363 ms a
    batch against 180 ms of its thread and 359 ms of wall at 1 worker on 2 cores, 2026-12-07;
    with ``OPENBLAS_NUM_THREADS=1`` 102–114 ms, and the step 196–229 ms against 403–461).
    When the calibration run had no more producer and host threads than cores,
    each batch's **wall** time × threads is used: it is what producing cost on this machine as
    it was, other load included. Otherwise the wall time is inflated by the run's own
    contention, which the simulator models itself, so the CPU time is used. ``ranks``: the
    job's ranks on this host, each with its own workers and main threads (a DDP job's ranks
    with a worker each on 2 cores: 4 busy threads, the batches' walls 2.5-3x their CPU).
    """
    par = float(np.median([r.work_us / r.wall_us for r in recs if r.wall_us > 0] or [1.0]))
    own = [r.work_us / r.cpu_us for r in recs   # a thread CPU inside the clocks' slack
           if r.worker >= 0 and r.proc_cpu_us is not None and r.cpu_us > THREAD_SLACK_US]
    par = max(par, float(np.median(own))) if own else par
    tpw = int(round(min(par, MAX_THREADS))) if par > 1.3 else 1   # a loader's most
    threads = ranks * (num_workers * tpw + main_threads)
    if host_cores is not None and threads > host_cores:
        return DurationSpec.from_samples([r.work_us for r in recs]), tpw, "cpu_time"
    return DurationSpec.from_samples([r.wall_us * tpw for r in recs]), tpw, "wall_time"


def steady_records(sidecar: Sidecar, num_workers: int):
    """The produce records that represent the steady state: those of the right producer (the
    main thread when ``num_workers`` is 0), finished inside the profiled window when the
    sidecar has the instants (at least 3 of them), and never a worker process's first batch
    (``seq`` 0 of a worker ≥ 0: it carries the worker's start-up)."""
    return _steady(sidecar, num_workers)[0]


def _steady(sidecar: Sidecar, num_workers: int):
    """``(records, dropped)``: :func:`steady_records` and how many start-up batches it left
    out."""
    recs = [r for r in sidecar.produce if (r.worker < 0) == (num_workers == 0)]
    span = step_window(sidecar.steps)
    if span is not None and all(r.t_end_us is not None for r in recs):
        lo, hi = span
        window = [r for r in recs if lo <= r.t_end_us <= hi]
        if len(window) >= 3:
            recs = window
    kept = after_startup(recs)
    return (kept, len(recs) - len(kept)) if kept else (recs, 0)


def capture_loads(side: Sidecar) -> tuple[float, float]:
    """``(batch, step)``: the mean co-run load (the other cores' busy share) beside the
    steady batches and beside the profiled training steps, in the capture."""
    nw = side.loader.num_workers
    acts = activities(steady_records(side, nw), [s for s in side.steps if s.profiled], nw > 0)
    if not acts:
        return 0.0, 0.0
    loads = corun_loads(acts, side.host_cores or 1)
    return mean_load(acts, loads, "batch"), mean_load(acts, loads, "step")


def loader_from_sidecar(side: Sidecar, main_threads: int = 1, ranks: int = 1):
    """``(fields, sources, warnings, basis)``: LoaderParams fields the sidecar measures, their
    sources, what it could not measure, and the produce basis (``wall_time``/``cpu_time``,
    None without produce records). ``ranks``: the job's ranks on the sidecar's host
    (:func:`fit_produce`)."""
    lp = loader_settings(side)
    sources = {f"loader.{k}": "measured" for k in lp}
    warnings: list[str] = []
    if side.loader.prefetch_factor is None:
        sources["loader.prefetch_factor"] = "assumed"
    nw = lp["num_workers"]
    basis = None
    recs, dropped = _steady(side, nw)
    if dropped:
        warnings.append(said(f"{dropped} produce record(s) left out of loader.produce: a "
                             "worker's first batch (it carries the worker's start-up)",
                             "produce_first_batch", noted=True,
                             summary=f"{dropped} produce record(s) left out: a worker's first "
                                     "batch (its start-up)"))
    if recs:
        lp["produce"], tpw, basis = fit_produce(recs, nw, side.host_cores, main_threads,
                                                  ranks)
        sources["loader.produce"] = "measured"
        if tpw > 1:
            lp["threads_per_worker"] = tpw
            sources["loader.threads_per_worker"] = "inferred"
            warnings.append(f"workers used about {tpw} cores each while producing (library "
                            f"threads, e.g. BLAS): threads_per_worker set to {tpw}")
        nbytes = [r.bytes for r in recs if r.bytes]
        if nbytes:
            lp["batch_bytes"] = int(np.median(nbytes))
            sources["loader.batch_bytes"] = "measured"
        lp["corun_ref"] = capture_loads(side)[0]
        sources["loader.corun_ref"] = "measured"
    if side.host_cores:
        lp["host_cores"] = side.host_cores
        sources["loader.host_cores"] = "measured"
    prof = [s for s in side.steps if s.profiled]
    if nw > 0 and prof:
        # next() blocks without using CPU while it waits for a worker; the CPU it does use is
        # the hand-over of the batch (unpickling, bookkeeping)
        lp["unpickle_us"] = float(np.median([s.next_cpu_us for s in prof]))
        sources["loader.unpickle_us"] = "measured"
    fields, src, warn = handover_from_sidecar(side)
    if nw == 0:   # the main thread's side: measured above from a capture's own workers
        more, src_more = probe_unpickle(side)
        fields.update(more)
        src.update(src_more)
        warnings += warn     # a capture with workers always has their records
    lp.update(fields)
    sources.update(src)
    startup = worker_startup_us(side)
    if startup is not None:
        lp["worker_startup_us"] = startup
        sources["loader.worker_startup_us"] = "measured"
    return lp, sources, warnings, basis


STARTUP_UNMEASURED = ("0, assumed: no instant before iter(loader) was recorded (no capture "
                      "sidecar, one older than that, a Lightning or Hugging Face capture, or "
                      "no worker batch with its instant), so the workers' start-up cannot be "
                      "measured")
"""Why ``loader.worker_startup_us`` is assumed (``meta.notes``), where it is."""


def worker_startup_us(side: Sidecar) -> float | None:
    """The workers' start-up (µs): from just before ``iter(loader)``, where a multi-process
    loader starts them, to the first sample fetch of the earliest worker's first batch (its
    record's ``t_end_us − wall_us``), at least 0; None where the sidecar cannot say (no
    workers, no ``iter_start_us``, no worker batch with its instant)."""
    if side.loader.num_workers == 0 or side.iter_start_us is None:
        return None
    starts = [r.t_end_us - r.wall_us for r in side.produce
              if r.worker >= 0 and r.t_end_us is not None]
    if not starts:
        return None
    return max(0.0, min(starts) - side.iter_start_us)


def outside_prior(fit, side: Sidecar) -> str | None:
    """The warning for a fitted coefficient whose whole P10–P90 lies above
    :data:`calibration.corun.INTERFERENCE_PRIOR` (None inside it), ending with what a probe
    can calibrate beside ``side``'s capture (:func:`calibration.same_thread.probe_rule`). Not
    clamped: the range drawn is widened down to the prior's top instead, so the interval
    carries both the fit and what was measured before it."""
    point, (p10, p90) = fit
    lo, hi = INTERFERENCE_PRIOR
    if p10 <= hi:
        return None
    return (f"co-run interference fitted at {point:.3f} (slowdown with every other core busy; P10–P90 "
            f"{p10:.3f}–{p90:.3f}) is outside its prior {lo:g}–{hi:g} (measured on other "
            f"runs): every what-if that adds co-runners slows CPU work by {100 * point:.0f} % "
            f"with the other cores busy against {100 * hi:.0f} % at the prior's top, so "
            "its prediction can come out that much slower; the interval draws the coefficient "
            "from the prior's top up to the fit's. Other load during the probe, or a batch that "
            "costs more in a worker process than on the main thread, reads as interference: "
            "re-capture on a quiet machine; "
            + probe_rule(side.loader.num_workers, side.host_cores or 1))


def _measuring_probe(side: Sidecar) -> str:
    """The probe that would measure the slope alone (on the capture's side of
    ``num_workers=0``, the other share of the cores busy:
    :func:`calibration.same_thread.same_side_workers`), or a longer one where the probe is
    there already; where there is none, what each probe can calibrate
    (:func:`calibration.same_thread.probe_rule`). A probe at 0 beside a capture with workers
    gives the widest span of load but moves the batches onto the main thread too, so it
    does not measure the slope alone."""
    nw, cores = side.loader.num_workers, side.host_cores or 1
    want = same_side_workers(nw, cores)
    if want is None:
        return probe_rule(nw, cores)
    if side.probe.num_workers == want:
        return (f"a longer probe at num_workers={want} (more records) or a quieter host "
                "would measure it")
    return f"a probe at num_workers={want} would measure it"


def interference_from_sidecar(side: Sidecar | None, seed: int = 0):
    """``(host fields, sources, ranges, warnings)`` for ``host.interference`` (fitted from the
    probe, with the range whose uniform draw has the fit's bootstrap P10–P90, else the prior),
    ``host.oversub`` (the slowdown past the cores, :mod:`calibration.oversub`) and
    ``host.cpu_scale`` (the run-to-run noise prior)."""
    host: dict = {"cpu_scale": 1.0}
    sources = {"host.cpu_scale": "assumed"}
    ranges = {"host.cpu_scale": HOST_NOISE_PRIOR}
    fit = None
    if side is not None and side.probe is not None and not side.batch_probe and side.host_cores:
        nw = side.loader.num_workers
        team = side.torch_num_threads or 1
        cal, probe = probe_activities(side)
        fit = fit_interference(cal, probe, side.host_cores, seed) if cal and probe else None
    close = fit if isinstance(fit, str) else None
    fit = None if close else fit
    drift = fit is not None and fit[1][1] <= 0
    if drift:
        floor = fit[1][1] <= FIT_GRID[0]     # every resample on the grid's floor: no spread
        drift_why = (f"the probe's CPU time per {'batch' if team > 1 else 'batch and step'} "
                     f"fell as its load rose (fit {fit[0]:.3f}, P10–P90 {fit[1][0]:.3f}–"
                     f"{fit[1][1]:.3f}"
                     + (f": pinned at the lowest coefficient tried, {FIT_GRID[0]:g}, by every "
                        "bootstrap resample; the records ask for less, no spread measured"
                        if floor else "") + "): "
                     + ("the main thread's own cost of making its batches, which the probe "
                        "moves across num_workers=0 with the load, host.same_thread's to price "
                        "(below)" if (side.probe.num_workers == 0) != (nw == 0) else
                        "the host's speed changed between the two settings' steps by more "
                        "than interference"))
        fit = None
    if fit is not None:
        fit = max(fit[0], 0.0), (max(fit[1][0], 0.0), fit[1][1])
        host["interference"], host["interference_range"] = fit[0], uniform_with_p10_p90(*fit[1])
        sources["host.interference"] = "inferred"
        far = outside_prior(fit, side)
        if far:
            lo_r, hi_r = host["interference_range"]
            host["interference_range"] = (min(lo_r, INTERFERENCE_PRIOR[1]), hi_r)
        warn = [said(f"co-run interference fitted from the probe at num_workers="
                     f"{side.probe.num_workers}: {fit[0]:.3f} slowdown with every other core busy "
                     f"(P10–P90 {fit[1][0]:.3f}–{fit[1][1]:.3f}, inferred)"
                     + (f", from the batches' CPU time: the training step's on {team} intra-op "
                        "threads holds their spinning at the barriers, which the model prices as "
                        "their stall, not as interference" if team > 1 else ""),
                     "interference_fit", noted=True,
                     summary=f"co-run interference (host.interference) fitted from the probe at "
                             f"num_workers={side.probe.num_workers}: {fit[0]:.3f} (P10–P90 "
                             f"{fit[1][0]:.3f}–{fit[1][1]:.3f})")]
        if far:
            warn.append(far)
    else:
        lo, hi = INTERFERENCE_PRIOR
        host["interference"], host["interference_range"] = (lo + hi) / 2, (lo, hi)
        sources["host.interference"] = "assumed"
        why = (drift_why if drift else
               f"the probe at num_workers={side.probe.num_workers}: {close}; "
               f"{_measuring_probe(side)}" if close else
               "its probe is at a second batch_size, not at a second num_workers"
               if side is not None and side.batch_probe else
               "the probe could not separate interference (too few records in both settings)"
               if side is not None and side.probe is not None else "no probe in the capture")
        ask = ("" if close else " (capture with probe_workers=N to calibrate it)" if side is None
               else f" ({probe_rule(side.loader.num_workers, side.host_cores or 1)})")
        warn = [prior_said(f"co-run interference not calibrated ({why}): a prior of {lo:g}–{hi:g} "
                           "(the slowdown with every other core busy) widens the interval of any "
                           "what-if that changes the co-runners" + ask,
                           "host.interference", "co-run interference", lo, hi)]
    over, over_src, over_warn = oversub_from_sidecar(side, host["interference"], seed)
    host.update(over)
    sources.update(over_src)
    same, same_src, same_warn = same_thread_from_sidecar(side, host["interference"], seed)
    host.update(same)
    sources.update(same_src)
    return host, sources, ranges, warn + over_warn + same_warn


def team_stall_from_sidecar(side: Sidecar | None, seed: int = 0):
    """``(host fields, sources, warnings)`` for ``host.team_stall`` of a capture whose step ran
    on torch's intra-op threads (``torch_num_threads`` > 1; else nothing). With a core per
    thread: the stated prior (:data:`calibration.team_stall.TEAM_STALL_PRIOR`), whose floor a
    probe at a second ``num_workers`` raises to its fit's P10 when that is higher
    (:func:`calibration.team_stall.fit_team_stall`: a time-averaged fit is a floor). A
    calibration setting whose own threads were more than the cores
    (:func:`calibration.team_stall.contended_team_stall`): its step's work is inverted at ``γ``
    (:func:`calibration.cpu.stalled_team_wall`), so ``γ`` is drawn with the work re-inverted."""
    team = (side.torch_num_threads or 1) if side is not None else 1
    if team <= 1:
        return {}, {}, []
    nw = side.loader.num_workers
    if side.host_cores is None:
        return {}, {}, [said(
            f"intra-op team stall γ (host.team_stall) kept at 1 (not varied): the capture did "
            f"not record the host's cores, so whether its {team} threads and {nw} worker(s) "
            "were more than the cores is not known", "team_stall_kept", noted=True,
            summary="intra-op team stall γ (host.team_stall) kept at 1, not varied")]
    if nw + team > side.host_cores:
        return contended_team_stall(side, team, seed)
    lo, hi = TEAM_STALL_PRIOR
    fit = None
    if side.probe is not None and not side.batch_probe:
        cal = [side.steps[i] for i in probe_base_steps(side)]
        fit = fit_team_stall(cal, side.probe.steps, team, seed)
    if fit is not None and fit[1][0] > lo:
        lo = min(fit[1][0], hi)
        host = {"team_stall": (lo + hi) / 2, "team_stall_range": (lo, hi)}
        warn = said(
            f"intra-op team stall: the probe at num_workers={side.probe.num_workers} gives "
            f"γ {fit[0]:.2f} (P10–P90 {fit[1][0]:.2f}–{fit[1][1]:.2f}) from the step's "
            f"time-averaged share of a core, a floor: γ drawn over {lo:.2f}–{hi:g} (the "
            f"prior's top kept; inferred); beside more runnable threads than cores the "
            f"step's {team} threads advance at s^(1 + γ·{team - 1})", "team_stall_floor",
            noted=True, summary=f"intra-op team stall γ drawn over {lo:.2f}–{hi:g}: the "
            f"probe's fit raised the prior's floor (widens what-ifs' intervals)")
        return host, {"host.team_stall": "inferred"}, [warn]
    why = ("its probe is at a second batch_size" if side.batch_probe else
           f"the probe's fit, γ {fit[0]:.2f}, is under the prior's floor" if fit is not None else
           "the probe shows no stall" if side.probe is not None else "no probe in the capture")
    warn = prior_said(
        f"intra-op team stall not calibrated ({why}): a prior γ of {lo:g}–{hi:g} widens the "
        f"interval of any what-if that puts the step's {team} threads beside more runnable "
        "threads than cores (measured on one machine; the step advances at "
        f"s^(1 + γ·{team - 1}), s each thread's share of a core)", "host.team_stall",
        "intra-op team stall γ", lo, hi)
    return ({"team_stall": (lo + hi) / 2, "team_stall_range": (lo, hi)},
            {"host.team_stall": "assumed"}, [warn])
