"""The profiler's own cost in a capture, measured from unprofiled steps of the same run.

The Kineto profiler costs the profiled thread CPU time per recorded op (the op's record, its
``Input Dims`` with ``record_shapes``), so a training step of many small ops runs slower
profiled than not: on the DDP demo's MLP (2 gloo ranks, 2 vCPUs) the main thread's CPU time
per step was 30.7 ms profiled against 22–24 ms unprofiled (+30 %). The trace's durations are
the profiled ones; the run a user re-measures is not profiled.

The capture records the main thread's CPU time (``time.thread_time``) of every step in the
sidecar, with whether the profiler ran (``steps[].profiler_on``): the harness's
``skip_first + wait`` steps just before the profiler starts are unprofiled, and the DDP demo's
job adds unprofiled steps right before and after its profiled window, in the same process on
the same data. Per rank, the factor

    f = median(unprofiled CPU per step) / median(profiled CPU per step)

(CPU time outside ``next()``; the run's first step is left out, it carries start-up) scales
the host-side durations calibrated from the profiled steps (source ``measured``). CPU time,
not wall time, is compared: waiting for a core or for a peer rank is no part of the
profiler's cost. The host's speed drifts from minute to minute; steps seconds apart share it,
and what remains is in the factor's uncertainty: with ``s_u``, ``s_p`` the sample standard
deviations of log CPU per step over ``n_u`` unprofiled and ``n_p`` profiled steps, the
log-factor's standard error is ``1.2533 × sqrt(s_u²/n_u + s_p²/n_p)`` (1.2533: a median's
standard error over a mean's, for normal samples), and its 80 % interval
``± t(0.9, min(n_u, n_p) − 1) × se``, stated as the uniform factor range whose P10–P90 it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stepsim.calibration.page_faults import step_work_us
from stepsim.calibration.sidecar import Sidecar
from stepsim.models.warning_record import said

__all__ = ["OverheadFactor", "overhead_factor", "step_factor", "MIN_STEPS", "unprofiled_views",
           "team_overhead_note"]

MIN_STEPS = 2
"""Fewest unprofiled and profiled steps a factor is measured from."""
MEDIAN_SE = math.sqrt(math.pi / 2)
"""A median's standard error over a mean's, for normal samples (1.2533)."""
P10_P90_OF_UNIFORM = 0.8
"""The P10–P90 of a uniform draw spans 80 % of its support."""


@dataclass(frozen=True)
class OverheadFactor:
    """One rank's measured profiler-overhead factor (CPU µs are per step, medians).

    Attributes:
        factor: unprofiled ÷ profiled CPU time per step of the main thread.
        half_log: half-width, in log space, of the uniform factor range whose P10–P90 is the
            factor's 80 % interval (the range is ``factor × exp(±half_log)``).
    """

    factor: float
    half_log: float
    unprofiled_cpu_us: float
    profiled_cpu_us: float
    n_unprofiled: int
    n_profiled: int
    unprofiled_wall_us: float = 0.0
    profiled_wall_us: float = 0.0
    """Wall time per step outside ``next()`` (medians): what the step took each way (it also
    holds waits for a core and for the peer ranks, which the factor leaves out)."""

    def lo(self) -> float:
        """The low end of the factor's range as :meth:`describe` states it."""
        return self.factor * math.exp(-self.half_log)

    def describe(self) -> str:
        lo, hi = self.lo(), self.factor * math.exp(self.half_log)
        return (f"{self.factor:.3f} (P10–P90 {lo:.3f}–{hi:.3f}; main-thread CPU per step "
                f"{self.unprofiled_cpu_us / 1e3:.1f} ms over {self.n_unprofiled} unprofiled "
                f"steps ÷ {self.profiled_cpu_us / 1e3:.1f} ms over {self.n_profiled} profiled; "
                f"wall {self.unprofiled_wall_us / 1e3:.1f} ms unprofiled, "
                f"{self.profiled_wall_us / 1e3:.1f} ms profiled)")



def median_step_wall_us(steps) -> float:
    """The median over ``steps`` (sidecar step records) of each one's wall µs less its
    ``next()`` call's (``next_wall_us``; never below 0)."""
    return float(np.median([max(s.wall_us - s.next_wall_us, 0.0) for s in steps]))


def log_ratio_var(unprof_us: np.ndarray, prof_us: np.ndarray) -> float:
    """Each kind's squared standard error of its mean log CPU per step (µs records), summed
    over the unprofiled and the profiled kind: a median ratio's log has :data:`MEDIAN_SE`²
    times it as its squared standard error."""
    return float(np.log(unprof_us).var(ddof=1) / unprof_us.size
                 + np.log(prof_us).var(ddof=1) / prof_us.size)


def half_log(se: float, n: int) -> float:
    """The factor's ``half_log``: ``± t(0.9, n − 1) × se`` (``se`` of the log-factor, ``n``
    the fewest steps of a kind) stated as a uniform range (:data:`P10_P90_OF_UNIFORM`)."""
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.9, n - 1)) * se / P10_P90_OF_UNIFORM


def overhead_factor(side: Sidecar | None, calm: bool = False,
                    cores: bool = False) -> OverheadFactor | None:
    """The profiler-overhead factor of one capture (see the module docstring), or None when
    its sidecar does not say which steps ran unprofiled (written before ``profiler_on`` was
    recorded) or holds fewer than :data:`MIN_STEPS` of either kind with CPU time. ``calm``:
    of the steps of each kind without a system-CPU spike (:func:`calibration.sys_spikes.spikes`;
    all where the sidecar cannot tell). ``cores``: of the steps of each kind whose intra-op
    team did not wait for a core another process held (:func:`calibration.calm.calm_among`)."""
    from stepsim.calibration.sys_spikes import spikes

    steps = list(side.steps) if side is not None else []
    if not steps or any(s.profiler_on is None for s in steps):
        return None
    spiked = (spikes(side) if calm else None) or [False] * len(steps)
    rows = [s for s, x in zip(steps, spiked) if not x and step_work_us(s) > 0]
    rows_u = [s for s in rows if s is not steps[0] and not s.profiler_on and not s.profiled]
    rows_p = [s for s in rows if s.profiled]
    if cores:
        from stepsim.calibration.calm import calm_among

        rows_u, rows_p = calm_among(side, rows_u), calm_among(side, rows_p)
    unprof = np.array([step_work_us(s) for s in rows_u])
    prof = np.array([step_work_us(s) for s in rows_p])
    if min(unprof.size, prof.size) < MIN_STEPS:
        return None
    mu, mp = float(np.median(unprof)), float(np.median(prof))
    se = MEDIAN_SE * math.sqrt(log_ratio_var(unprof, prof))
    half = half_log(se, min(unprof.size, prof.size))
    return OverheadFactor(mu / mp, half, mu, mp, int(unprof.size), int(prof.size),
                          median_step_wall_us(rows_u), median_step_wall_us(rows_p))


def rank_factors(ranks: list[int], sidecars: dict, warnings: list[str]
                 ) -> tuple[dict[int, float], dict[str, str], float]:
    """Per rank of a job, its factor (1.0 where its sidecar cannot measure one, or reads one
    above 1, which is drift: each with a warning), the model's notes naming the readings
    (``profiler_factor``, its source) and the largest ``half_log`` of the measured ones (0.0
    when none was measured)."""
    from stepsim.calibration.profiler_edges import edge_factor

    # at the profiled window's edges, where the host's load has moved least; else all steps
    got = {r: edge_factor(sidecars.get(r)) or overhead_factor(sidecars.get(r)) for r in ranks}
    missing = [r for r, f in got.items() if f is None]
    if missing:
        warnings.append(
            f"rank(s) {', '.join(map(str, missing))}: the capture sidecar records no unprofiled "
            "steps beside the profiled ones (steps[].profiler_on), so the profiler's own cost "
            "stays in the calibrated host durations (recapture with this version's harness)")
    measured = {r: f for r, f in got.items() if f is not None}
    # Below 1/MAX_STEP_FACTOR the profiled steps cost over 4x the unprofiled ones: not the
    # profiler's cost but records that cannot be right (unprofiled steps of 10 µs of CPU beside
    # 17 ms profiled read 0.0006, and every host duration of that rank came out 0.0006x its
    # profiled one, named only as a measured overhead). As step_factor, they keep factor 1.
    low = [r for r, f in measured.items() if f.factor < 1 / MAX_STEP_FACTOR]
    if low:
        warnings.append(
            "profiler overhead not removed on rank(s) " + ", ".join(map(str, low)) + ": "
            + "; ".join(f"rank {r}: {measured[r].describe()}" for r in low) + f", below "
            f"1/{MAX_STEP_FACTOR:g}: a profiler does not make a step {MAX_STEP_FACTOR:g}x "
            "dearer, so these step records cannot be right; their host durations are kept as "
            "profiled (factor 1)")
        got = {r: None if r in low else f for r, f in got.items()}
        measured = {r: f for r, f in measured.items() if r not in low}
    if not measured:
        return {r: 1.0 for r in ranks}, {}, 0.0
    # The profiler adds work, so its factor is at most 1: a reading above it is the host's
    # or the job's own drift between the steps compared, and no correction is made there.
    # Within the steps' own scatter (the reading's range holds 1) the window is too short to
    # resolve the profiler's cost, which is said as such: a 2-rank Lightning job's 2 unprofiled
    # steps beside 4 profiled read 0.31-2.81 around 0.935 (tests/test_capture_frameworks).
    faster = [r for r, f in measured.items() if f.factor > 1.0]
    scatter = [r for r in faster if measured[r].lo() <= 1.0]
    drift = [r for r in faster if r not in scatter]
    kept = ("their host durations are kept as profiled (factor 1; the interval still draws "
            "the reading's P10–P90: host.cpu_scale_error_log)")
    if scatter:
        warnings.append(
            "profiler overhead not measurable on rank(s) " + ", ".join(map(str, scatter))
            + ": the profiled steps took less main-thread CPU than the unprofiled ones beside "
            "them, within the steps' own scatter (" + "; ".join(
                f"rank {r}: {measured[r].describe()}" for r in scatter) + ": the range holds "
            "1), so the profiler's cost is below what these steps resolve (profile more steps, "
            "with unprofiled ones beside them), and " + kept)
    if drift:
        warnings.append(
            "profiler overhead: the profiled steps of rank(s) " + ", ".join(map(str, drift))
            + " took less main-thread CPU than the unprofiled ones beside them ("
            + "; ".join(f"rank {r}: {measured[r].describe()}" for r in drift) + "); the "
            "profiler cannot make a step faster, so that difference is drift between the steps "
            "compared, and " + kept)
    scaled = [r for r in measured if r not in faster]
    if scaled:
        warnings.append("profiler overhead (measured): host-side durations of the profiled "
                        "steps scaled by unprofiled ÷ profiled main-thread CPU per step, "
                        + "; ".join(f"rank {r}: {measured[r].describe()}" for r in scaled)
                        + " (every interval draws the widest rank's P10–P90 beside the "
                          "host's run-to-run speed: host.cpu_scale_error_log)")
    notes = {"profiler_factor": ",".join(f"{r}:{f.factor:.4f}" for r, f in measured.items()),
             "profiler_factor_source": "measured: median main-thread CPU per step of the "
                                       "sidecar's unprofiled steps (profiler_on false) ÷ of its "
                                       "profiled steps, per rank, at the profiled window's "
                                       "edges where it has unprofiled steps beside them "
                                       "(calibration.profiler_edges)"}
    return ({r: min(f.factor, 1.0) if f is not None else 1.0 for r, f in got.items()}, notes,
            max(f.half_log for f in measured.values()))


def unprofiled_views(sides: list[Sidecar]) -> list[Sidecar]:
    """The sidecars of one rank's capture and replicates, each holding only its unprofiled
    steps (``profiler_on`` false), when every one has more than :data:`MIN_STEPS` of them;
    else unchanged. The host's speed in a replicate against the capture is compared on them
    (:func:`calibration.host_noise.replicate_speeds`): the model's host durations are the
    capture's *unprofiled* ones (scaled by its factor above), and the profiler's own cost
    differs from run to run (on the DDP demo, 2026-12-05: 1.8-2.0 ms of main-thread CPU a
    step in the capture, the plan's first profiled run, against 0.8-1.4 ms in its three
    replicates), so profiled CPU takes that difference for the host's speed (there, a centre
    of 0.944 against 0.967 from the unprofiled steps, which predicts every row 0.4-0.5 ms
    slower). ``profiler_on`` false, not ``profiled`` false: the warm-up steps run the profiler.
    """
    views = [[s for s in side.steps if s.profiler_on is False] for side in sides]
    if any(len(v) <= MIN_STEPS for v in views):
        return list(sides)
    return [side.model_copy(update={"steps": v}) for side, v in zip(sides, views)]


def step_factor(side: Sidecar | None) -> tuple[float, OverheadFactor, float] | None:
    """``(p, factor, s)`` for a CPU capture's training step (one intra-op thread), or None
    where the sidecar cannot measure it: ``p = f × s`` scales the step's durations from the
    profiled window to the unprofiled steps a re-measured run is scored on, ``f`` the
    measured unprofiled ÷ profiled main-thread CPU per step (:func:`overhead_factor`) and
    ``s`` the window's speed against the whole run from the batches' produce
    (:func:`calibration.host_noise.window_speed`, 1 where it cannot be measured), which
    calibration applies to every CPU duration already: ``f`` holds the host's drift between
    the window and the rest of the run too, and ``s`` takes it back out, so the step ends at
    its unprofiled CPU time and the batches at the run's (``p · (1/s) = f``).

    Measured on the demo (2026-12-05, 2 cores, docs/measurements.md#the-demos-score): the
    capture's 8 profiled steps took 1.16–1.40× the main-thread CPU of its unprofiled ones in
    six runs, where the batches' window speed was 0.94–1.14; the model's step had been the
    profiled one (62.3 ms against 47.0 ms unprofiled). ``f`` is of the steps without a
    system-CPU spike (:mod:`calibration.sys_spikes`), on both sides, as the step's durations
    it scales are (:func:`calibration.cpu.fit_cpu_model`): at 14:00 3 of 8 profiled steps
    held 50–208 ms of system CPU, the median ratio 0.911 met a window mean of 99 ms (median
    54), and the model's step came out 63 ms (plus 19 of re-faulting) against 48 ms
    unprofiled; without them ``f`` is 1.019 and the step 33 + 10 ms. On torch's intra-op threads the
    process CPU holds the team's spinning, so the main thread's ratio is not the step's: None.
    A ``p`` beyond 1/4–4 (:data:`MAX_STEP_FACTOR`, assumed) is not a profiler's cost: None."""
    from stepsim.calibration.host_noise import window_speed

    if side is None or (side.torch_num_threads or 1) > 1:
        return None
    f = overhead_factor(side, calm=True)   # the steps without a system-CPU spike
    if f is None:
        return None
    s = window_speed(side) or 1.0
    p = f.factor * s
    if not 1 / MAX_STEP_FACTOR <= p <= MAX_STEP_FACTOR:
        return None
    return p, f, s


MAX_STEP_FACTOR = 4.0
"""Bound on :func:`step_factor` (assumed): a profiled step more than 4× its unprofiled ones, or
under a quarter, is a run that changed its work, not the profiler's cost."""


def team_overhead_note(side: Sidecar | None) -> str | None:
    """calibrate's line for a training step on torch's intra-op threads, whose profiler cost
    :func:`step_factor` cannot measure (the main thread's CPU holds the team's spinning), so
    the model keeps the profiled step: the unprofiled ÷ profiled wall time per step outside
    ``next()`` (medians, :class:`OverheadFactor`), said when it is off 1 by more than 2 %
    (the threshold of :func:`step_factor_note`); None otherwise. A fresh user's CNN at torch's
    default 2 threads (2026-12-05): 89.0 ms unprofiled against 93.9 ms profiled (×0.948),
    unsaid before, and the re-measured runs are scored on unprofiled steps. Unprofiled steps
    slower than the profiled ones (a fresh user's Lightning capture, ×1.147: the steps before
    the window, the only unprofiled ones it had) are not the profiler's cost, and the line
    says so instead of naming it, as a warning, not a note: fresh13's capture (2026-12-07, a
    CNN on 2 threads beside 1 worker on 2 cores) kept a window of 8 steps at 237.6 ms outside
    ``next()`` where its 42 unprofiled ones took 311.0 (×1.306; the steps scatter 155-800 ms),
    and the model's replay ran 5.7 % faster than the setting's re-measured runs."""
    if side is None or (side.torch_num_threads or 1) <= 1:
        return None
    f = overhead_factor(side, cores=True)   # a user's 20 loaded steps had made it ×2.045
    if f is None or f.profiled_wall_us <= 0 or f.unprofiled_wall_us <= 0:
        return None
    r = f.unprofiled_wall_us / f.profiled_wall_us
    if abs(r - 1) <= 0.02:
        return None
    return said(f"profiler overhead not removed: on {side.torch_num_threads} intra-op threads the "
            "main thread's CPU time holds the team's spinning, so the profiler's cost on the "
            "training step is not measured and the model keeps the profiled step; its "
            f"unprofiled steps took ×{r:.3f} the profiled ones' wall time outside next() "
            f"({f.unprofiled_wall_us / 1e3:.1f} ms median over {f.n_unprofiled} unprofiled "
            f"steps, {f.profiled_wall_us / 1e3:.1f} ms over {f.n_profiled} profiled: "
            + ("the profiler's cost plus the host's drift" if r < 1 else "slower unprofiled, "
               "which the profiler's cost, that only adds, cannot make: the run changed "
               "between them, its first steps' warm-up, outside load or the host's speed")
            + "), and a re-measured run is scored on its unprofiled steps after the window "
            "(Capture.steps(after=N), the callbacks' after=N; without them on its profiled "
            "window)" + ("" if r < 1 else
                         ": the model follows the profiled window's steps, so its replay and "
                         "every what-if can run faster than the run's unprofiled steps, what "
                         "validate scores"), "profiler_not_removed", noted=r < 1,
            summary=f"profiler overhead not removed ({side.torch_num_threads} intra-op threads): "
                    f"step kept as profiled; unprofiled {'slower' if r > 1 else 'faster'}, "
                    f"×{r:.3f}")


def step_factor_note(p: float, f: OverheadFactor, s: float, step_us: float | None = None
                     ) -> str:
    """calibrate's line for a training step scaled by :func:`step_factor`'s ``p``, sized on
    the scaled training step ``step_us`` (µs): it adds ``step_us × (1 − 1/p)``."""
    return said(f"profiler overhead (measured): the training step's durations are the profiled "
            f"window's × {p:.3f}, two factors. The profiler's: the unprofiled ÷ profiled "
            f"main-thread CPU per step {f.describe()}. The window's speed: {s:.3f}, the host's "
            "drift in the window, which every duration takes apart. A re-measured run is "
            "scored on unprofiled steps; the replay of the capture keeps the profiled ones",
            "profiler_step", effect_us=None if step_us is None or p <= 0 else
            step_us * (1 - 1 / p), summary="profiler overhead (measured): the training step's "
            f"durations scaled ×{p:.3f}")
