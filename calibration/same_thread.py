"""The main thread's own cost of making its batches (``host.same_thread``,
:mod:`models.same_thread`), from the capture sidecar.

A capture on one side of ``num_workers=0`` cannot see it: with workers the main thread never
makes a batch, and at 0 workers it never receives one. Two sources:

* a probe on the other side (``probe_workers=0`` beside a capture with workers, or a probe with
  workers beside one at 0): the main thread's median CPU per batch and per step (less its page
  faults where the capture prices them) in the probe against the capture's, less the co-run
  interference the model already prices between the two settings' loads (at
  ``host.interference``'s point, :mod:`calibration.corun`), weighted by the two kinds' CPU:
  ``1 + same_thread = (b₁ + s₁) / (b₀ g_b + s₀ g_s)``, ``g`` each kind's interference factor
  ``(1 + k o₁) / (1 + k o₀)``; its P10–P90 over a bootstrap of the records (inferred). Such a
  probe moves the batch onto (or off) the main thread and the co-runners at once, so it cannot
  tell the two apart; it measures their product, which is what a ``num_workers=0`` what-if
  needs. A negative interference fit from such a probe (the demo's −0.033 on 2026-12-06) is
  this cost read as interference, not host drift. A step on torch's intra-op threads
  (``team_step``) is not fitted (its CPU holds their spinning), so such a probe gives no fit,
  and calibration says why and how its batches compared (fresh6's capture of 2026-12-06:
  ×1.358 the capture's median CPU), not that no probe is there.
* else :data:`SAME_THREAD_PRIOR` with its point :data:`SAME_THREAD_POINT` (0: no cost found
  in isolation, neither page faults, nor the caches after the decode, nor the thread), stated,
  which widens the interval of a what-if that moves the batch onto or off the main thread,
  and calibration says so.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.corun import BOOTSTRAP, corun_loads, probe_activities
from stepsim.calibration.probe_steps import uniform_with_p10_p90
from stepsim.models.param_types import MAX_SAME_THREAD
from stepsim.models.warning_record import prior_said, said

SAME_THREAD_PRIOR = (0.0, 0.04)
"""Stated prior range of ``host.same_thread`` without a probe across ``num_workers=0``
(assumed, drawn uniformly by the interval): what the cost measured in isolation leaves
(:data:`SAME_THREAD_POINT`), its bootstrap P90 on the batch (×1.036) rounded up; below 0 is
read as 0, as a probe's fit is. Until 2026-12-06 11:00 it was 0–0.2, point 0.1, inferred from
the demos of 2026-12-06 05:16–05:33, in sample for it (docs/measurements.md "The final demos
of 2026-12-06"): at 0 workers the main thread's batch took 1.006–1.029× and its step
1.035–1.064× their CPU at 1 worker, a cost of about 0.10 at the interference prior's point,
0.16 at its top. No measurement since has reproduced it, and none found a mechanism; with it,
three captured sets' 0-worker rows (calibrated at 1 worker) were 12–21 % high, 0 of 3 inside,
their intervals' low ends above the re-measured means."""

SAME_THREAD_POINT = 0.0
"""The prior's point (measured in isolation; docs/measurements.md "The main thread's own
batches: no heap, cache or same-thread cost", 2026-12-06 10:42–10:57, h-heap10):

* page faults: in the demo's captures at 0 workers the step re-faulted as much as at 1 worker
  (per run medians 6,112 against 6,139 pages over 9 and 18 runs of three captured sets) and
  the batch made in ``next()`` none; a probe's fit (:func:`fit_same_thread`) takes the faults'
  CPU out already. Only in bare processes without the harness did the 0-worker step re-fault
  more (6,624–11,232 against 26–5,115 a step, 1.95 µs each);
* cache and TLB after the decode, and the thread itself: in one process with glibc's
  thresholds held (no step re-faults), the step after the main thread decoded its batch took
  ×0.993 (bootstrap P10–P90 0.982–1.009) the step after a worker's hand-over, a step with no
  decode before it ×1.012, and the batch on the main thread ×1.009 (0.990–1.036) a worker's.

The morning's demos were in sample for the former point 0.1; three captured sets of 10:44–10:56
(calibrated at 1 worker, 0 workers re-measured) ran the main thread's work at 0 workers
0.75–0.90× the capture's (below 1: the co-run interference, ``host.interference``, not this).

At torch's default 2 intra-op threads too (docs/measurements.md "The 0-worker row at torch's
default threads", 2026-12-06 20:29–20:32, ``bench/inline_threads.py``, a transformer with a
hashing Dataset): the main thread's batch took ×0.900 / ×0.979 a worker's, and libgomp's
team, which spins 6.0–7.2 ms into the 0-worker ``next()``, cost it nothing (×0.99–1.01
against ``OMP_WAIT_POLICY=passive``): the point stays 0 there."""


def _kinds(acts, loads):
    """Per kind (batch, step): rows of (CPU µs, co-run load) of the fitted records."""
    out = {}
    for kind in ("batch", "step"):
        rows = [(a.cpu_us, x) for a, x in zip(acts, loads)
                if a.kind == kind and a.cpu_us > 0 and a.fitted]
        if len(rows) >= 2:
            out[kind] = np.array(rows)
    return out


def same_side_workers(nw: int, cores: int) -> int | None:
    """The ``num_workers`` of a probe that calibrates co-run interference alone beside a
    capture at ``nw`` workers on ``cores`` cores: on the capture's side of ``num_workers=0``
    (so the batches stay off the main thread), with the other share of the other cores busy
    (``min(w, cores − 1)`` of ``cores − 1``: 1 worker where the capture fills them, else
    ``cores − 1``). None where there is none: a 0-worker capture (any probe moves the batches
    off the main thread), or 2 cores or fewer (every setting with workers fills the one other
    core: the demo's 1 and 2 workers gave loads 0.90 and 1.00, too near to fit)."""
    if nw == 0 or cores < 3:
        return None
    return 1 if min(nw, cores - 1) == cores - 1 else cores - 1


def probe_rule(nw: int, cores: int) -> str:
    """What a probe can calibrate beside a capture at ``nw`` workers on ``cores`` cores, in
    the words every probe note ends with (one rule, so that no note asks for the probe
    another note says cannot calibrate it; fresh7, 2026-12-07): a probe on the capture's
    side of ``num_workers=0`` (:func:`same_side_workers`) calibrates co-run interference
    alone; a probe across it calibrates the main thread's own cost together with that
    interference, which is what a what-if across ``num_workers=0`` needs, and neither alone.
    One capture holds one probe."""
    same = same_side_workers(nw, cores)
    across = 0 if nw > 0 else max(cores - 1, 1)
    alone = (f"a probe at num_workers={same} calibrates co-run interference alone"
             if same is not None else
             "no probe calibrates co-run interference alone here ("
             + ("a 0-worker capture's probe moves the batches off the main thread"
                if nw == 0 else f"on {cores} cores every setting with workers fills the "
                "other core") + ")")
    return (f"{alone}; a probe at num_workers={across} calibrates the main thread's own cost "
            "of making its batches together with the interference between the settings (what "
            "a what-if across num_workers=0 needs), not either alone; a capture holds one probe")


def _unfitted(cal, probe, side) -> str:
    """Why a probe across ``num_workers=0`` gives no fit: a kind (batch, step) without two
    fitted records on each side, e.g. the step on torch's intra-op threads (``team_step``:
    its CPU holds their spinning at the barriers, :mod:`calibration.corun`, so it is not
    fitted, and the batch alone cannot stand for the step the factor also prices)."""
    k0, k1 = _kinds(cal, np.zeros(len(cal))), _kinds(probe, np.zeros(len(probe)))
    team = side.torch_num_threads or 1
    gone = [k for k in ("batch", "step") if k not in k0 or k not in k1]
    why = (f"the probe at num_workers={side.probe.num_workers} has no "
           + " or ".join(f"{k}{'es' if k == 'batch' else 's'}" for k in gone)
           + " to fit in both settings"
           + (f": the training step ran on torch's {team} intra-op threads, whose CPU time "
              "holds their spinning at the barriers, so it is not fitted, and the batch "
              "alone cannot stand for the step the factor also prices"
              if "step" in gone and team > 1 else ""))
    if "batch" in k0 and "batch" in k1:
        b0, b1 = (float(np.median(k[kind][:, 0])) for k, kind in ((k0, "batch"), (k1, "batch")))
        why += (f"; its batches took {b1 / b0:.3f}x the capture's median CPU (not priced: "
                "this mixes the main thread's own cost with the co-run interference)")
    return why


def fit_same_thread(cal, probe, cores: int, interference: float, inline_probe: bool,
                    seed: int = 0) -> tuple[float, tuple[float, float]] | None:
    """``(point, (P10, P90))`` of ``same_thread`` from the capture's activities ``cal`` and the
    probe's ``probe`` (:func:`calibration.corun.activities`; ``inline_probe``: the probe made
    its batches on the main thread), at the interference point ``interference`` (see the module
    docstring); None unless both settings have batches and steps."""
    k0, k1 = _kinds(cal, corun_loads(cal, cores)), _kinds(probe, corun_loads(probe, cores))
    if set(k0) != {"batch", "step"} or set(k1) != {"batch", "step"}:
        return None

    def one(pick0, pick1) -> float:
        num = den = 0.0
        for kind in ("batch", "step"):
            a0, a1 = k0[kind][pick0[kind]], k1[kind][pick1[kind]]
            g = (1 + interference * a1[:, 1].mean()) / (1 + interference * a0[:, 1].mean())
            num += float(np.median(a1[:, 0]))
            den += float(np.median(a0[:, 0])) * g
        r = num / den                   # probe over capture: 1 + s, or 1 / (1 + s)
        return r - 1 if inline_probe else 1 / r - 1

    every = {k: slice(None) for k in k0}
    point = one(every, every)
    rng = np.random.default_rng(seed)
    boots = [one({k: rng.integers(0, len(v), len(v)) for k, v in k0.items()},
                 {k: rng.integers(0, len(v), len(v)) for k, v in k1.items()})
             for _ in range(BOOTSTRAP)]
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    return point, (lo, hi)


def same_thread_from_sidecar(side, interference: float, seed: int = 0):
    """``(host fields, sources, warnings)`` for ``host.same_thread``, its range and
    ``host.same_thread_ref`` (see the module docstring); ``interference``: the calibrated
    point of ``host.interference``. Nothing without a sidecar."""
    if side is None:      # no sidecar: which thread made the batches is not recorded
        return {}, {}, []
    nw = side.loader.num_workers
    host: dict = {"same_thread_ref": 1.0 if nw == 0 else 0.0}
    fit = None
    across = (side.probe is not None and not side.batch_probe
              and side.host_cores and (side.probe.num_workers == 0) != (nw == 0))
    if across:
        cal, probe = probe_activities(side)
        fit = fit_same_thread(cal, probe, side.host_cores, interference, nw > 0, seed)
    past = None
    if across and fit is None:
        past = _unfitted(cal, probe, side)
    if fit is not None and not uniform_with_p10_p90(max(fit[1][0], 0.0),
                                                    max(fit[1][1], 0.0))[1] <= MAX_SAME_THREAD:
        # (a fit past HostParams' bound refused the model being built: a traceback)
        past = (f"the probe at num_workers={side.probe.num_workers} fits a batch and step "
                f"{1 + fit[0]:.3g}x their CPU with workers (P10–P90 {1 + fit[1][0]:.3g}–"
                f"{1 + fit[1][1]:.3g}x), past any cost of making the batches on the main "
                f"thread (the most {1 + MAX_SAME_THREAD:g}x): the host's speed changed "
                "between the settings, or its records cannot be right")
        fit = None
    if fit is not None:
        point, (p10, p90) = fit
        host["same_thread"] = max(point, 0.0)
        host["same_thread_range"] = uniform_with_p10_p90(max(p10, 0.0), max(p90, 0.0))
        # noted: the capture's own step is as measured either way; it prices the what-ifs
        # that move the batches across num_workers=0 (fresh6: this line was neither)
        warn = said(f"the main thread's own cost of making its batches, fitted from the probe at "
                f"num_workers={side.probe.num_workers}: its batch and step take "
                f"{1 + host['same_thread']:.3f}x their CPU with workers (P10–P90 "
                f"{1 + p10:.3f}–{1 + p90:.3f}x, inferred; after the co-run interference "
                f"{interference:.3f} priced between the settings)"
                + (" (below 1 read as 1)" if point < 0 else ""), "same_thread_fit", noted=True,
                summary=f"the main thread's own cost of making its batches (host.same_thread) "
                        f"fitted at num_workers={side.probe.num_workers}: ×"
                        f"{1 + host['same_thread']:.3f}, what-ifs across num_workers=0")
        return host, {"host.same_thread": "inferred"}, [warn]
    lo, hi = SAME_THREAD_PRIOR
    host["same_thread"], host["same_thread_range"] = SAME_THREAD_POINT, (lo, hi)
    want = "0" if nw > 0 else "N > 0"
    warn = prior_said(f"the main thread's own cost of making its batches not calibrated ("
            f"{past or f'no probe at num_workers={want}'}): a prior of {lo:g}–{hi:g}, point "
            f"{SAME_THREAD_POINT:g} (its batch and step take 1 + that times their CPU with "
            "workers; none measured in isolation) widens the interval of a what-if that moves "
            "the batches "
            f"{'onto' if nw > 0 else 'off'} the main thread"
            + ("" if past else f" (capture with probe_workers={want.split()[0]} to "
               "calibrate it, together with the co-run interference)"), "host.same_thread",
                      "the main thread's own cost of making its batches", lo, hi)
    return host, {"host.same_thread": "assumed"}, [warn]
