"""The host's run-to-run speed noise, measured from replicate captures of one setting.

One capture cannot tell how fast the host will be in the next run: on a shared or virtual
machine the CPU time of *identical* work changes from minute to minute (measured on the 2-core
demo machine with every other process paused: a training step's thread CPU time 93 → 122 ms
and a batch's produce CPU time 154 → 238 ms, seconds apart). Replicates, other captures of the
same setting recorded at other times, measure it: each run's CPU time per unit of identical
work is

    w = mean(produce CPU per batch) + mean(training-step CPU per step)   (µs)

(thread/process CPU time, so waiting for a core or for the loader does not count), and the
run's host speed relative to the calibration capture is ``w_j / w_0``. Means, not medians: what
is predicted and scored is a run's mean step, ``work × mean(speed over its batches)``, and a
median leaves a run's slow stretch out (:data:`CENTRE`). The model keeps them
(``host.speed_runs``) and ``host.cpu_scale`` = exp(c), ``c`` the mean of their logs (the runs'
mean speed, source "measured"); prediction intervals draw the next run's speed from the
Student-t predictive distribution of :mod:`models.host_speed`: the runs' own spread (from 3
runs, where it is the wider), else their spread pooled with the stated prior range, which
``meta.ranges['host.cpu_scale']`` keeps (per run, not per step, and for the pooled mean of as
many runs as a validation has). A replicate that ran under
outside load past :data:`models.load_bound.LOAD_WARN` is left out (:func:`drop_loaded`): the
interval covers runs without such load, as the ledger scores a loaded re-measured run apart.
"""
from __future__ import annotations

from pathlib import Path


from stepsim.calibration.calm import calm_produce
from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_cross import step_window
from stepsim.models.warning_record import prior_said, said
from stepsim.calibration.sidecar_fit import after_startup
from stepsim.calibration.work_gauge import (CENTRE, MAX_SPEED_RATIO,  # noqa: F401
                                            at_one_fault_cost, calm_steps, identical_work_us,
                                            per_fault_us, pooled_per_fault)
from stepsim.models.host_speed import HOST_NOISE_PRIOR, PRIOR_DOF, own_spread, speed_interval
from stepsim.models.load_bound import LOAD_WARN
from stepsim.models.param_meta import MAX_WINDOW_SPEED, within_host_speed
from stepsim.models.params import StepModel
from stepsim.simcore.errors import InputError


def window_speed(side: Sidecar) -> float | None:
    """The host's speed in the capture's profiled window relative to the whole run: the mean
    (:data:`CENTRE`) CPU µs of a batch's produce among the batches finished inside the window ÷
    among all the run's batches (a worker's first batch left out: :func:`calibration.sidecar_fit.after_startup`).

    The model's durations are the window's (a second or so of the run), while the run as a
    whole measures the host longer: on a virtual host the CPU time of identical work moved
    0.75–1.20× between a run's window and the run (an H200 machine's 16 cores, 2026-12-04;
    0.93–1.02× on a quiet 2-core machine). Produce is the gauge: the same work per batch,
    CPU time (waiting for a core does not count), and in worker processes the profiler does
    not slow; at ``num_workers=0`` a batch whose intra-op team waited for a core another
    process held is left out (:func:`calibration.calm.calm_produce`). None without produce
    instants, with fewer than 3 batches in the window, with
    none outside it, or with a centre of 0 (:func:`at_run_speed` bounds the rest by
    :data:`MAX_WINDOW_SPEED`)."""
    nw = side.loader.num_workers
    recs = calm_produce(side, after_startup(
        [r for r in side.produce if (r.worker < 0) == (nw == 0)]))
    span = step_window(side.steps)
    if span is None or not recs or any(r.t_end_us is None for r in recs):
        return None
    lo, hi = span
    window = [r.work_us for r in recs if lo <= r.t_end_us <= hi]
    whole = [r.work_us for r in recs]
    if len(window) < 3 or len(window) == len(whole) or min(CENTRE(whole), CENTRE(window)) <= 0:
        return None
    return float(CENTRE(window) / CENTRE(whole))


def at_run_speed(model: StepModel, side: Sidecar, speeds: list[float] | None) -> StepModel:
    """``model`` predicting at the runs' speed rather than its window's
    (:func:`window_speed` ``s``): the runs' speed factors (``speeds``, the capture's 1.0 and
    its replicates', against the capture's whole run) become factors against the window,
    ``speeds / s``, and ``host.cpu_scale`` their centre (:func:`apply_replicates`); with no
    replicate, ``cpu_scale = 1 / s`` and the interval keeps the stated prior. The replay of the
    captured window still runs at the window's speed (``meta.notes['window_speed']``;
    :func:`models.host_speed.at_capture_speed`). Unchanged where ``s`` is None."""
    s = window_speed(side)
    if s is not None and not within_host_speed(s):
        model = apply_replicates(model, speeds) if speeds else model
        note = (f"the profiled window's batches took {s:.3g}× the run's CPU time of identical "
                f"work, beyond the {1 / MAX_WINDOW_SPEED:g}–{MAX_WINDOW_SPEED:g}× a host's speed "
                "moves: records that cannot be right; predictions keep the window's speed")
        return model.model_copy(update={"meta": model.meta.model_copy(
            update={"warnings": [*model.meta.warnings, note]})})
    factors = [v / s for v in speeds or [1.0]] if s is not None else []
    if not factors:
        return apply_replicates(model, speeds) if speeds else model
    if speeds:
        model = apply_replicates(model, factors, against="the capture's profiled window's")
    else:
        model = model.model_copy(update={"host": model.host.model_copy(
            update={"cpu_scale": 1.0 / s})})
    meta = model.meta
    runs = (f"the mean speed of the capture's whole run and its {len(speeds) - 1} "
            f"replicate(s) against the window" if speeds and len(speeds) > 1
            else "the whole run's speed against the window")
    note = said(f"the host ran at {s:.3f}× the run's CPU time of identical work (a batch's "
                f"produce) in the profiled window: the model's durations are the window's, and "
                f"predictions take {runs} (host.cpu_scale {model.host.cpu_scale:.3f}, measured)",
                "window_speed", summary=f"profiled window ran ×{s:.3f} the runs' CPU time: "
                f"predictions take host.cpu_scale {model.host.cpu_scale:.3f}")
    # (its effect on the step is simulated by the caller: stepsim.api.calibrate)
    meta = meta.model_copy(update={
        "sources": {**meta.sources, "host.cpu_scale": "measured"},
        "notes": {**meta.notes, "window_speed": s},
        "warnings": [*meta.warnings, note] if abs(s - 1) > 0.02 else list(meta.warnings)})
    return model.model_copy(update={"meta": meta})


def _same_setting(a: Sidecar, b: Sidecar) -> str | None:
    """What differs between two captures' settings (None: the same setting)."""
    la, lb = a.loader, b.loader
    for name in ("num_workers", "batch_size", "prefetch_factor", "pin_memory"):
        if getattr(la, name) != getattr(lb, name):
            return f"{name} is {getattr(lb, name)!r}, the capture's is {getattr(la, name)!r}"
    if (a.torch_num_threads or 1) != (b.torch_num_threads or 1):
        return f"torch_num_threads is {b.torch_num_threads}, the capture's is {a.torch_num_threads}"
    if (a.ddp is None) != (b.ddp is None):    # (one without became the DDP job's capture)
        return (f"it {'has no' if b.ddp is None else 'has a'} DDP record (ddp), the capture "
                f"{'has' if b.ddp is None else 'has none'}")
    # a DDP rank's: DDP's own setting, as the ranks of one job must agree on it (a replicate
    # of bucket_cap_mb=1 beside a capture of 25 was taken as a run of the same setting)
    from stepsim.calibration.rank_agree import MUST_AGREE, field_of, agree_text

    for name in (f for f in MUST_AGREE if f.startswith("ddp.")):
        va, vb = field_of(a, name), field_of(b, name)
        if va is not None and vb is not None and va != vb:
            return f"{name} is {agree_text(name, vb)}, the capture's is {agree_text(name, va)}"
    # the run-to-run speed is of one host: another machine's (or device's) ratio is not it
    for name in ("host_name", "device", "host_cores"):
        va, vb = getattr(a, name, None), getattr(b, name, None)
        if va is not None and vb is not None and va != vb:
            return (f"{name} is {vb!r}, the capture's is {va!r} (the host's run-to-run speed is "
                    "measured by runs on the capture's host)")
    return None


def replicate_speeds(side_path: Path, side: Sidecar, replicates: list[tuple[Path, Sidecar]]
                     ) -> list[float]:
    """The host speed factors of the capture (1.0, its sidecar ``side`` read from
    ``side_path``) and of each replicate (path, sidecar), checked before any calibration.

    Raises:
        InputError: (naming the file) the capture or a replicate without the records that
            measure identical work, a replicate of another setting, the capture itself or a
            copy of it (or of another replicate), or a speed that cannot be right.
    """
    per = per_fault_us(side)     # the capture's own cost per fault, for the checks
    w0 = identical_work_us(side, per)
    if w0 is None or w0 <= 0:
        raise InputError(side_path, "the calibration capture's sidecar has no produce or step "
                                    "records with CPU time to compare replicates with")
    seen = {_records(side): side_path}
    instants = [(side_path, _instants(side))]
    for path, rep in replicates:
        why = _same_setting(side, rep)
        if why is not None:
            raise InputError(path, f"not a replicate of the capture: {why}")
        common, w, w0, parts = at_one_fault_cost(side, rep, per)
        if not common or w <= 0 or w0 <= 0:
            raise InputError(path, "no produce or step records with CPU time"
                             + (" of the kinds the capture has" if parts else "")
                             + ": it cannot measure the host's speed")
        first = seen.setdefault(_records(rep), path)
        if first is not path:
            raise InputError(path, f"has the same records as {first}: a replicate is another "
                                   "run of the setting, not the capture or a copy")
        _not_a_copy(path, _instants(rep), instants)
        instants.append((path, _instants(rep)))
    # one cost per fault for every run, fitted over all of them (work_gauge.pooled_per_fault)
    per = pooled_per_fault(side, [rep for _, rep in replicates])
    speeds = [1.0]
    for path, rep in replicates:
        _, w, w0, _ = at_one_fault_cost(side, rep, per)
        if not 1 / MAX_SPEED_RATIO <= w / w0 <= MAX_SPEED_RATIO:
            raise InputError(path, f"its identical work took {w / w0:.3g}× the capture's CPU "
                                   "time: not a run of the same work")
        speeds.append(w / w0)
    return speeds


COPY_SHARE = 0.5
"""A replicate sharing at least this fraction of its step and batch instants with the capture
(or another replicate) is a copy of that run, edited: instants on the host's monotonic clock,
to the µs, of two runs never coincide (a run's steps start some ms apart), so the edits went
to the values, not the run."""


def _instants(side: Sidecar) -> set[float]:
    """The instants (µs, the host's monotonic clock) of a capture's steps and batches."""
    return ({s.t_start_us for s in side.steps if s.t_start_us is not None}
            | {r.t_end_us for r in side.produce if r.t_end_us is not None})


def _not_a_copy(path: Path, mine: set[float], others: list[tuple[Path, set[float]]]) -> None:
    """Raise InputError when the instants ``mine`` of the replicate at ``path`` are largely
    those of an earlier run (:data:`COPY_SHARE`)."""
    for other, theirs in others:
        k = len(mine & theirs)
        if mine and theirs and k >= COPY_SHARE * min(len(mine), len(theirs)):
            raise InputError(path, f"{k} of its {len(mine)} step and batch instants are those "
                                   f"of {other} (to the µs): a copy of that run with edited "
                                   "values, not another run; capture the replicate as a run "
                                   "of its own")


def _records(side: Sidecar) -> str:
    """The produce and step records of a capture (what two runs never share)."""
    return repr((side.produce, side.steps))


def loaded_replicates(replicates: list[tuple[Path, Sidecar]]) -> list[tuple[Path, float]]:
    """The replicates (path, sidecar) that ran under outside load past
    :data:`models.load_bound.LOAD_WARN`, each with its held share of core time
    (:func:`calibration.run_load.remeasured_load`, read as a re-measured run's is); a replicate
    whose sidecar cannot tell is not among them.

    Such a run's CPU time per identical work is not the host's alone: another process
    time-sharing a core refills its caches (measured on the 2-core demo machine, a batch's
    produce and a training step pinned to one core with a busy loop or a conv loop sharing
    that core: ×1.03–1.07 CPU time per unit, docs/interval.md), on top of the wall time it
    waited for the core, which CPU time leaves out. And a re-measured run like it is scored apart
    (``scenarios.validate.LedgerRecord.load_explains``), so the run-to-run noise the interval
    carries is of runs without such load: :func:`drop_loaded` leaves these out of it
    while a quiet replicate is left."""
    from stepsim.calibration.run_load import remeasured_load

    out = []
    for path, rep in replicates:
        load = remeasured_load(rep)
        if load is not None and load.slowdown > LOAD_WARN:
            out.append((path, load.held))
    return out


def no_replicate_said():
    """The noted warning of a capture calibrated without ``--replicate``: the host's
    run-to-run speed is the stated prior :data:`models.host_speed.HOST_NOISE_PRIOR`, and how to
    measure it (the README lists it among what ``calibrate``'s warnings say when missing;
    fresh11, 2026-12-07, was told only of the probes, which its Hugging Face callback cannot
    take)."""
    lo, hi = HOST_NOISE_PRIOR
    return prior_said(f"the host's run-to-run speed not measured (no --replicate): a stated "
                      f"prior of {lo:g}–{hi:g}× (host.cpu_scale) is in every interval; run the "
                      "same training at the same setting again into another folder and pass "
                      "it: stepsim calibrate RUN --replicate RUN2", "host.cpu_scale",
                      "host speed run to run", lo, hi)


def drop_loaded(speeds: list[float], replicates: list[tuple[Path, Sidecar]]
                ) -> tuple[list[float], str | None]:
    """``speeds`` (the capture's 1.0, then each replicate's, :func:`replicate_speeds`) without
    the replicates that ran under outside load (:func:`loaded_replicates`), and the warning
    that counts them (None when none did).

    When every replicate ran under load they are all kept, and the warning says so: their
    speed is CPU time per identical work, which the core time other processes took is not in
    (a co-runner time-sharing the run's core added 3–7 %, measured), and the replicates of
    two loaded demos spread 0.92–1.25×, as wide as quiet ones (1.00–1.31×), so they measure
    the host's noise where the stated prior (±6 %) is far narrower than this host's."""
    loaded = dict(loaded_replicates(replicates))
    if not loaded:
        return speeds, None
    kept = [speeds[0]] + [v for v, (path, _) in zip(speeds[1:], replicates)
                          if path not in loaded]
    held = ", ".join(f"{path.name if path.name != 'sidecar.json' else path.parent.name}: "
                     f"{100 * h:.0f} %" for path, h in loaded.items())
    said = (f"{len(loaded)} of {len(replicates)} replicate(s) ran under outside load, their "
            f"threads holding less than {100 / (1 + LOAD_WARN):.0f} % of the core time they "
            f"could have held ({held})")
    if len(kept) > 1:
        return kept, (f"{said}: left out of the host's run-to-run noise, which covers runs on a "
                      f"machine without outside load past {100 * LOAD_WARN:.0f} % (a "
                      "re-measured run under such load is scored apart); "
                      f"{len(kept) - 1} replicate(s) measure it; re-capture them on a quiet "
                      "machine")
    return speeds, (f"{said}: no quiet replicate is left, so they measure the host's "
                    "run-to-run noise all the same (CPU time per identical work, which the "
                    "core time other processes took is not in; a co-runner on the run's core "
                    "adds a few %, so the noise can be overstated); re-capture them on a "
                    "quiet machine")


def apply_replicates(model: StepModel, speeds: list[float],
                     against: str = "the capture's") -> StepModel:
    """``model`` with ``host.cpu_scale`` and ``host.speed_runs`` measured from the host speed
    factors ``speeds`` of the capture and its replicates (:func:`replicate_speeds`);
    ``meta.ranges['host.cpu_scale']`` stays the stated prior range (the predictive pools the
    runs with it; :data:`models.host_speed.HOST_NOISE_PRIOR` where the model has none), and a
    warning states the next run's P10–P90."""
    meta = model.meta
    prior = tuple(meta.ranges.get("host.cpu_scale", HOST_NOISE_PRIOR))
    centre, p10, p90 = speed_interval(speeds, prior)
    host = model.host.model_copy(update={"cpu_scale": centre, "speed_runs": list(speeds)})
    sources = {**meta.sources, "host.cpu_scale": "measured", "host.speed_runs": "measured"}
    ranges = {**meta.ranges, "host.cpu_scale": prior}
    note = said(f"the host's speed varies from run to run: over {len(speeds)} runs of this setting "
            f"the CPU time of identical work was {', '.join(f'{s:.3f}' for s in speeds)}× "
            f"{against}; the next run's P10–P90 is {p10:.3f}–{p90:.3f}× (Student t, "
            + (f"{len(speeds) - 1} degrees of freedom, the runs' own spread, wider than the "
               f"stated range {prior[0]:.2f}–{prior[1]:.2f}'s"
               if own_spread(speeds, prior) else
               f"{PRIOR_DOF + len(speeds) - 1} degrees of freedom: {len(speeds) - 1} from the "
               f"runs, {PRIOR_DOF} from the stated range {prior[0]:.2f}–{prior[1]:.2f}")
            + "; in every interval, once per run)", "host_speed_runs", noted=True,
            summary=f"host speed varies run to run ({len(speeds)} runs): the next run's P10–P90 "
                    f"{p10:.3f}–{p90:.3f}×, in every interval")
    notes = {**meta.notes, "host_speed_runs": ", ".join(f"{s:.4f}" for s in speeds)}
    meta = meta.model_copy(update={"sources": sources, "ranges": ranges, "notes": notes,
                                   "warnings": [*meta.warnings, note]})
    return model.model_copy(update={"host": host, "meta": meta})
