"""Whether a single-process CPU capture's profiled window represents its run: the check of
:mod:`calibration.gloo_window` on one process (its :func:`~calibration.gloo_window.drift_between`).

With ``f`` a factor on the window's CPU, ``C_p`` the mean main-thread CPU a step outside
``next()`` of the profiled steps without a system-CPU spike
(:func:`calibration.sys_spikes.spikes`, as the training step's durations are) and ``C_u`` that
of the settled unprofiled steps after the window (:func:`calibration.run_drift.settled_after`,
the steps a validation scores; at ``num_workers=0`` those whose intra-op team did not wait for
a core, :func:`calibration.calm.calm_among`),

    d = C_u / (f · C_p)

off 1 beyond two standard errors of the difference of the means is said. gloo_window's ``f``
is the profiler factor at the window's edges (:func:`calibration.profiler_edges.edge_factor`),
and its ranks' ops are scaled by ``d``. Here calibrate passes the factor the step is priced at
(:func:`calibration.profiler_overhead.step_factor`'s ``f``: the median unprofiled ÷ profiled
CPU over every unprofiled step, which holds the run's drift), so ``d`` says how far the step
as priced misses the run's later steps (``meta.notes['window_drift']``), and it is not applied.

**Measured** (88 calibration-setting runs of 11 stored plain demos, 2026-12-06 08:51-19:37, 2
cores, one intra-op thread; ``bench/window_drift.py``): with the edge factor ``d`` read
0.81-1.33 (geometric mean 1.052, log sd 0.107), beyond its noise in 38 of 88: the window
drifts against its run as on the gloo path. Against the step as priced it read geometric mean
1.006, log sd 0.050, beyond noise in 6 of 88: the drift is in the model already. demo10's
"window 1.25× its unprofiled steps" was the step's *wall* time at ``num_workers=1``, set by
the batches (produce 196.0 ms a batch in the window, 164.3 ms after it), which
:func:`calibration.host_noise.window_speed` takes out; the training thread's CPU was 97.4
against 97.0 ms a step. Pricing the step at ``C_u`` instead (gloo's ``f · d``), rescored on the
same runs, moved the slow demos' rows further off (demo10's +5.5 / +4.9 / +13.0 / +5.7 % to
+7.1 / +6.5 / +14.6 / +7.6 %; fresh5's +12.4 / +5.8 / +15.9 / +8.6 % to +15.4 / +8.3 / +18.9 /
+11.2 %, 3 of 4 inside to 2 of 4); over 20 rows of 5 demos |error| grew in 14, the inside
count stayed 15 of 20 and every demo's max grew; it helped most rows only in s3 and s4,
whose chosen step as priced missed its run beyond noise (×1.101, ×1.080; docs/measurements.md
"The plain demo's slow rows").
"""
from __future__ import annotations

from stepsim.calibration.gloo_window import WindowDrift, beyond_speed, drift_between, drift_text
from stepsim.models.param_meta import MAX_WINDOW_SPEED

__all__ = ["single_drift", "single_drift_warning", "WINDOW_DRIFT_SOURCE"]

WINDOW_DRIFT_SOURCE = ("measured: mean main-thread CPU a step outside next() of the settled "
                       "unprofiled steps after the window ÷ the profiled steps' (no system-CPU "
                       "spike) × the factor the training step is priced at "
                       "(calibration.profiler_overhead.step_factor); a check, not applied "
                       "(calibration.single_window)")
"""``meta.notes['window_drift_source']`` beside ``meta.notes['window_drift']`` (``d``)."""
PRICED = ("as priced (the profiler's cost and the run's drift taken out: the median "
          "unprofiled ÷ profiled CPU a step over every unprofiled step)")
"""What the window's CPU times the applied factor is, in :func:`single_drift_warning`."""


def single_drift(side, factor: float | None = None, warnings: list[str] | None = None
                 ) -> WindowDrift | None:
    """The capture's :class:`calibration.gloo_window.WindowDrift` against the window's CPU
    times ``factor`` (see the module docstring; None: the profiler factor at the window's
    edges, gloo_window's ``d``), or None where it cannot be measured (no sidecar or step
    records, a team of intra-op threads, too few steps on a side) or reads beyond a host's
    speed (:func:`calibration.gloo_window.beyond_speed`: records that cannot be right, said in
    ``warnings`` where given; a hostile sidecar's later steps at 0.05 ms of CPU, ``d`` 0.0025,
    were left out without a word, break16)."""
    from stepsim.calibration.calm import calm_among
    from stepsim.calibration.profiler_edges import edge_factor
    from stepsim.calibration.profiler_overhead import overhead_factor
    from stepsim.calibration.run_drift import settled_after
    from stepsim.calibration.sys_spikes import spikes

    if side is None or not side.steps or (side.torch_num_threads or 1) > 1:
        return None
    if factor is None:
        edge = edge_factor(side) or overhead_factor(side, calm=True)
        factor = min(edge.factor, 1.0) if edge is not None else 1.0
    spiked = spikes(side) or [False] * len(side.steps)
    prof = [s for s, x in zip(side.steps, spiked) if s.profiled and not x]
    w = drift_between(0, prof, calm_among(side, settled_after(side).steps), factor)
    if w is not None and beyond_speed([w]):
        if warnings is not None:
            warnings.append(
                f"ignored the window check: the capture sidecar's {w.n_unprofiled} unprofiled "
                f"steps after the window took ×{w.d:.3g} the training thread's CPU a step of "
                f"its {w.n_profiled} profiled ones as priced ({w.unprofiled_us / 1e3:.3g} "
                f"against {w.factor * w.profiled_us / 1e3:.3g} ms), beyond the "
                f"{1 / MAX_WINDOW_SPEED:g}-{MAX_WINDOW_SPEED:g}× a host's speed moves: step "
                "records that cannot be right "
                "(calibration.single_window)")
        return None
    return w


def single_drift_warning(w: WindowDrift | None) -> str | None:
    """calibrate's line when the training step as priced (the window × the factor
    :func:`calibration.profiler_overhead.step_factor` measured, ``w.factor``) misses the
    run's settled unprofiled steps beyond their noise (None otherwise)."""
    if w is None or not w.beyond_noise:
        return None
    return ("the training step as priced misses the run's later steps: the main thread's CPU "
            f"a step, {drift_text(w, PRICED)}; "
            "the window's work cost the host another CPU time later in the run (its speed, or "
            "other load, changed). Kept as priced: pricing the step at the later steps' mean "
            "moved 14 of 20 rows of 5 stored demos further off (calibration.single_window)")
