"""Whether a gloo job's profiled window represents its run: each rank's training-thread CPU a
step in the window against its unprofiled steps after it, as :mod:`calibration.run_drift`
checks a single-rank capture.

The model's host ops come from the trace's profiled steps, while a re-measured run is scored
on its unprofiled steps after the window (:func:`calibration.run_drift.settled_after`). On a
user's 2-rank gloo job (one DataLoader worker a rank, one intra-op thread, 2 vCPUs;
ddpload12's capture A, 2026-12-06 14:07, ``tests/data/gloo_loader_job``) the 8 profiled steps
used 23.1 and 24.2 ms of training-thread CPU a step (ranks 0, 1), the 30 unprofiled steps after
them 16.3 and 16.7 ms (×1.42, ×1.45), and every prediction of the model was 17-27 % slow
against quiet replicates of the same setting. **Not the profiler's per-op cost**: the
unprofiled steps right before the window and right after it used as much (the edge factor,
:mod:`calibration.profiler_edges`, reads 0.965 and 0.858), and the drop came 4 steps after the
profiler stopped, at one instant on both ranks (steps 18-19, about 0.3 s after the window). **The
host's speed**: in that first second of the run the workers' batches (fixed work, in
unprofiled processes) took 1.66 and 1.61 ms of CPU against 1.34 ms after the drop (×1.24,
×1.20); system CPU was about 1.0 against 0.6 ms a step (not the 7 ms), and the thread's
CPU time holds no wait for a core. The window was a slow phase of the host, and the run's later steps
did the same work for less CPU.

Per rank with one intra-op thread (the main thread's CPU is then its work; with a team it is
not) and at least :data:`calibration.run_drift.MIN_AFTER_STEPS` settled unprofiled steps, with
``f`` the rank's profiler factor (:mod:`calibration.profiler_overhead`, 1 where not measured)
and ``C_p``, ``C_u`` the mean CPU a step outside ``next()`` of the profiled and of the settled
unprofiled steps,

    d = C_u / (f · C_p)

is the run's CPU for the window's work, the profiler's cost taken out: the host's drift
between the window and the run (``measured``). A ``d`` off 1 by more than two standard errors
of the difference of the means (:func:`calibration.run_drift.drift_noise` of ``C_u``'s steps
against ``f`` × ``C_p``'s) is said, with the numbers. Where the ops are priced from the
training thread's CPU (:mod:`calibration.gloo_cpu_price`), every host duration of the rank is
scaled by ``d`` too, so its step's CPU is the unprofiled steps' ``C_u``; the replay of the
capture takes the window's speed back (``meta.notes['window_speed']``, the ranks' geometric
mean of ``1/d``: :func:`models.host_speed.at_capture_speed`). Where walls are the price (a
core for each busy thread: the DDP demo) they are kept, and only the check is made. A ``d``
beyond :data:`models.param_meta.MAX_WINDOW_SPEED` either way (0.73-0.81 measured) is not
the host's speed moving: the rank's step records cannot be right, its ops keep the window's
durations, and a warning says so (a sidecar whose unprofiled steps' training-thread CPU was
100 µs a step read ``d`` 0.0043 and priced the rank's host ops at 0.1 ms a step, the replay
+689 % off; its profiled steps at 100 µs read 163).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stepsim.calibration.page_faults import step_work_us
from stepsim.calibration.run_drift import MIN_AFTER_STEPS, drift_noise, settled_after
from stepsim.models.param_meta import MAX_WINDOW_SPEED, within_host_speed

__all__ = ["WindowDrift", "window_drift", "drift_between", "drift_text", "drift_warning",
           "rank_drifts", "host_drift", "scaled_comm", "beyond_speed"]


@dataclass(frozen=True)
class WindowDrift:
    """One rank's window against its run (CPU µs a step outside ``next()``, means).

    Attributes:
        d: ``C_u / (f · C_p)``, the host's drift (see the module docstring).
        noise: two standard errors of the difference of the means, a fraction of ``C_u``.
    """

    rank: int
    profiled_us: float
    unprofiled_us: float
    factor: float
    n_profiled: int
    n_unprofiled: int
    d: float
    noise: float

    @property
    def beyond_noise(self) -> bool:
        return abs(self.d - 1) > self.noise


def window_drift(rank: int, side, factor: float = 1.0) -> WindowDrift | None:
    """The rank's :class:`WindowDrift`, or None where its sidecar has no step records, runs a
    team of intra-op threads, or has fewer than ``MIN_AFTER_STEPS`` settled unprofiled steps
    after its window or profiled steps with CPU time. ``factor``: its profiler factor."""
    if side is None or not side.steps or (side.torch_num_threads or 1) > 1:
        return None
    return drift_between(rank, [s for s in side.steps if s.profiled],
                         settled_after(side).steps, factor if 0 < factor <= 1 else 1.0)


def drift_between(rank: int, profiled: list, after: list, factor: float = 1.0
                  ) -> WindowDrift | None:
    """:class:`WindowDrift` of the step rows ``profiled`` (the window) against ``after``
    (its settled unprofiled steps), CPU outside ``next()``, the window's CPU times
    ``factor`` (> 0: a gloo rank's profiler factor, at most 1, :func:`window_drift`; the
    factor the single-rank step is priced at, :mod:`calibration.single_window`); None with
    fewer than ``MIN_AFTER_STEPS`` rows with CPU time on either side."""
    prof = np.array([step_work_us(s) for s in profiled])
    after_us = np.array([step_work_us(s) for s in after])
    prof, after_us = prof[prof > 0], after_us[after_us > 0]
    if min(prof.size, after_us.size) < MIN_AFTER_STEPS:
        return None
    cp, cu = float(prof.mean()), float(after_us.mean())
    return WindowDrift(rank, cp, cu, factor, int(prof.size), int(after_us.size),
                       cu / (factor * cp), drift_noise(after_us, factor * prof))


def drift_warning(drifts: list[WindowDrift], corrected: bool) -> str | None:
    """calibrate's line naming the ranks whose window drifted beyond its noise (None when
    none did); ``corrected``: their host ops were scaled to the unprofiled steps' CPU."""
    off = [w for w in drifts if w.beyond_noise]
    if not off:
        return None
    each = "; ".join(f"rank {w.rank}: {drift_text(w)}" for w in off)
    what = ("its host ops are priced at the unprofiled steps' CPU (×d, measured; the replay "
            "of the capture keeps the window's)" if corrected else
            "the model keeps the window's durations (walls are the price here)")
    return ("the profiled window does not represent the run: the training thread's CPU a "
            f"step, the profiler's cost taken out, moved between the window and the later "
            f"steps, which a validation scores ({each}); the same work cost the host another "
            f"CPU time then (its speed, or other load, changed within the run): {what}")


def drift_text(w: WindowDrift, what: str = "without the profiler's measured cost") -> str:
    """One window's figures in words (a gloo rank's, or the single-rank capture's); ``what``
    the window's CPU times ``w.factor`` is."""
    return (f"{w.profiled_us / 1e3:.1f} ms over its {w.n_profiled} profiled steps, "
            f"{w.factor * w.profiled_us / 1e3:.1f} ms {what} "
            f"(×{w.factor:.3f}), against {w.unprofiled_us / 1e3:.1f} ms over the "
            f"{w.n_unprofiled} unprofiled steps after them: ×{w.d:.3f} ("
            + ("beyond" if w.beyond_noise else "within") + f" their scatter, "
            f"±{100 * w.noise:.1f} %)")


def rank_drifts(order: list[int], sidecars: dict, factors: dict[int, float],
                priced: bool, warnings: list[str]
                ) -> tuple[dict[int, float], dict[str, object]]:
    """Each rank's scale ``d`` for its host durations (only where ``priced``: the ops are
    the training thread's CPU, :mod:`calibration.gloo_cpu_price`; else none) and the model's
    notes; the check's warning appended to ``warnings``."""
    drifts = [w for r in order if (w := window_drift(r, sidecars.get(r), factors.get(r, 1.0)))
              is not None]
    wild = beyond_speed(drifts)
    drifts = [w for w in drifts if w not in wild]
    said = drift_warning(drifts, priced)
    warnings += [said] if said else []
    warnings += [_wild_warning(wild)] if wild else []
    if not priced or not drifts:
        return {}, {}
    scale = {w.rank: w.d for w in drifts}
    notes: dict[str, object] = {
        "window_drift": ",".join(f"{w.rank}:{w.d:.4f}" for w in drifts),
        "window_drift_source": "measured: mean training-thread CPU a step of the settled "
                               "unprofiled steps after the window ÷ the profiled steps' × the "
                               "profiler factor, per rank; the backend threads' CPU a "
                               "collective times their geometric mean (inferred; "
                               "calibration.gloo_window)",
        "window_speed": 1 / host_drift(scale)}
    return scale, notes


def beyond_speed(drifts: list[WindowDrift]) -> list[WindowDrift]:
    """The ranks whose ``d`` passes :data:`models.param_meta.MAX_WINDOW_SPEED` either
    way: not a host's speed moving, records that cannot be right (the module docstring)."""
    return [w for w in drifts if not within_host_speed(w.d)]


def _wild_warning(wild: list[WindowDrift]) -> str:
    each = "; ".join(f"rank {w.rank}'s sidecar: {w.profiled_us / 1e3:.3g} ms over its "
                     f"{w.n_profiled} profiled steps against {w.unprofiled_us / 1e3:.3g} ms "
                     f"over the {w.n_unprofiled} unprofiled steps after them, ×{w.d:.3g}"
                     for w in wild)
    return (f"ignored the window check of {len(wild)} rank(s) whose training thread's CPU a "
            f"step moved beyond the {1 / MAX_WINDOW_SPEED:g}-{MAX_WINDOW_SPEED:g}× a host's "
            f"speed moves between the window and the later steps ({each}): step records that "
            "cannot be right; their ops keep the window's durations")


def host_drift(scale: dict[int, float]) -> float:
    """The host's drift, one for the ranks that share it: the geometric mean of their ``d``
    (1.0 without any)."""
    return math.exp(float(np.mean([math.log(v) for v in scale.values()]))) if scale else 1.0


def scaled_comm(comm, scale: dict[int, float]):
    """``comm`` (:class:`models.param_comm.CommParams`) with the backend threads' CPU a
    collective (``host_cpu_us``, ``host_cpu_us_per_mb``, measured over the profiled window,
    :mod:`calibration.gloo_cpu`) at the run's speed: times the host's drift
    (:func:`host_drift`; ``inferred``: measured on the training threads, applied to the
    backend's threads on the same host, as the workers' batches moved with them); unchanged
    without a drift."""
    if not scale:
        return comm
    k = host_drift(scale)
    return comm.model_copy(update={"host_cpu_us": comm.host_cpu_us * k,
                                   "host_cpu_us_per_mb": comm.host_cpu_us_per_mb * k})
