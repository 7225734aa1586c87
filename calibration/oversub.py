"""The slowdown past the cores (``host.oversub``, :mod:`models.cpu_slowdown`), read from the
capture sidecar.

With ``R`` runnable threads past the ``cores``, CPU work runs ``1 + oversub × f`` times slower,
``f = 1 − cores / R`` (a cache refill per time slice). This module measures ``f`` beside each
record, from the sidecar's instants as :func:`calibration.corun.corun_loads` reads them (the
runnable threads ``R(t)`` of every activity, :func:`calibration.corun.activities`), and fits
the coefficient from a probe at a second ``num_workers`` whose batches ran past the cores:

* the workers' median CPU per batch in the probe ÷ the calibration setting's (after the
  workers' first batches), less the co-run interference the model already prices between the
  two settings' busy shares (``host.interference``'s point), solved for the coefficient; its
  P10–P90 over a bootstrap of the batches;
* without such a probe (none, one within the cores, too few batches, or a calibration setting
  at 0 workers, whose main-thread batches cost 0.95× a worker's), the stated prior
  :data:`OVERSUB_PRIOR`: it widens the interval of any what-if with more runnable threads than
  cores, and calibration says so.

``host.oversub_ref`` is the capture's own ``f`` (its batches' mean; 0 within the cores), so a
replay at the capture's setting is unchanged. A DDP rank's sidecar is left at 0 (not modelled):
its gloo threads' runnable time is not in the activities, so the capture's own ``f`` (two
ranks' threads on the host's cores) cannot be read, and a prior would slow its own replay.
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.corun import BOOTSTRAP, Activity, activities, corun_loads
from stepsim.calibration.probe_steps import after_startup, probe_base_steps, uniform_with_p10_p90
from stepsim.models.param_types import MAX_OVERSUB
from stepsim.models.warning_record import prior_said, said

OVERSUB_PRIOR = (0.0, 0.16)
"""Stated prior range of ``host.oversub`` without a probe above the cores. Measured on this
2-core host (``bench/oversub.py``, the demo's batch in N processes, docs/measurements.md
"Slowdown past the cores"): beside one process running the demo's training step, ×1.03 at 4
runnable and ×1.06 at 8 (0.06 and 0.08 in this form; 2026-12-06 00:37, under load: 0.08–0.12);
N producers alone, none (×0.95–0.99 at 3–8: a slice that follows the same code and data
refills little). The range runs from none to about twice the demo's measure."""
MIN_BATCHES = 4
"""Fewest fitted batches in each setting for a fit."""
MIN_SPREAD = 0.1
"""Least difference of ``f`` between the probe's batches and the calibration's for a fit."""


def oversub_shares(acts: list[Activity], cores: int) -> np.ndarray:
    """Per activity, ``1 − cores / R(t)`` (0 up to the cores) averaged over its wall interval,
    ``R(t)`` the runnable threads of every activity at ``t`` (its own included)."""
    n = len(acts)
    if n == 0:
        return np.zeros(n)
    s = np.array([a.start_us for a in acts], dtype=float)
    e = np.array([a.end_us for a in acts], dtype=float)
    thr = np.array([a.threads for a in acts], dtype=float)
    ts = np.unique(np.concatenate([s, e]))
    mid = (ts[:-1] + ts[1:]) / 2
    r = np.array([thr[(s <= m) & (e > m)].sum() for m in mid])
    f = np.where(r > cores, 1 - cores / np.maximum(r, 1e-12), 0.0)
    out = np.zeros(n)
    for i in range(n):
        k0, k1 = np.searchsorted(ts, s[i]), np.searchsorted(ts, e[i])
        w = np.diff(ts[k0:k1 + 1])
        out[i] = float((f[k0:k1] * w).sum() / w.sum()) if w.sum() > 0 else 0.0
    return out


def _batches(acts: list[Activity], cores: int):
    """(CPU µs, busy share ``o``, oversub share ``f``) of the fitted batches."""
    o, f = corun_loads(acts, cores), oversub_shares(acts, cores)
    return np.array([(a.cpu_us, x, y) for a, x, y in zip(acts, o, f)
                     if a.kind == "batch" and a.fitted and a.cpu_us > 0]).reshape(-1, 3)


def solve(r: float, o_c: float, o_p: float, f_c: float, f_p: float,
          interference: float) -> float:
    """The coefficient that makes the model's CPU per batch at the probe ÷ at the calibration
    equal ``r``: ``(1 + i o_p)(1 + a f_p) / ((1 + i o_c)(1 + a f_c)) = r``, for ``a``."""
    q = r * (1 + interference * o_c) / (1 + interference * o_p)
    return (q - 1) / (f_p - q * f_c)


def fit_oversub(cal: list[Activity], probe: list[Activity], cores: int, interference: float,
                seed: int = 0):
    """``(point, (p10, p90), f_cal)`` of the coefficient, or a string saying why the probe
    cannot give it."""
    b0, b1 = _batches(cal, cores), _batches(probe, cores)
    if len(b0) < MIN_BATCHES or len(b1) < MIN_BATCHES:
        return (f"too few batches ({len(b0)} and {len(b1)}, {MIN_BATCHES} needed in each)")
    f_c, f_p = float(b0[:, 2].mean()), float(b1[:, 2].mean())
    if f_p - f_c < MIN_SPREAD:
        return (f"its batches ran at 1 − cores/runnable {f_p:.2f} against the capture's "
                f"{f_c:.2f}: not past the cores enough to measure the slowdown")
    o_c, o_p = float(b0[:, 1].mean()), float(b1[:, 1].mean())

    def one(c0, c1):
        return solve(float(np.median(c1) / np.median(c0)), o_c, o_p, f_c, f_p, interference)

    point = one(b0[:, 0], b1[:, 0])
    rng = np.random.default_rng(seed)
    boots = [one(rng.choice(b0[:, 0], len(b0)), rng.choice(b1[:, 0], len(b1)))
             for _ in range(BOOTSTRAP)]
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    return point, (lo, hi), f_c


def cal_activities(side) -> list[Activity]:
    """The calibration setting's activities as the fit reads them (its profiled and first
    unprofiled steps left out of the fit, :func:`calibration.probe_steps.probe_base_steps`)."""
    return activities(after_startup(side.produce), side.steps, side.loader.num_workers > 0,
                      side.torch_num_threads or 1, set(probe_base_steps(side)))


def probe_side_activities(side) -> list[Activity]:
    """The probe's activities as the fit reads them."""
    return activities(after_startup(side.probe.produce), side.probe.steps,
                      side.probe.num_workers > 0, side.torch_num_threads or 1)


def oversub_from_sidecar(side, interference: float, seed: int = 0):
    """``(host fields, sources, warnings)`` for ``host.oversub``, ``oversub_range`` and
    ``oversub_ref`` (see the module docstring); ``interference``: the calibrated point of
    ``host.interference``.

    No page-fault cost enters (:mod:`calibration.page_faults`): the fit reads the workers'
    batches' CPU, whose records hold no faults, and the steps only as co-runners (their
    runnable threads, :func:`calibration.corun.activities`), never their CPU, the one thing
    a per-fault cost would change. (A ``per_fault_us`` argument, 0 by default and never
    given, changed nothing.)"""
    if side is not None and side.ddp is not None:
        return {}, {}, []     # a DDP rank: see the module docstring
    cores = side.host_cores if side is not None else None
    fit, f_c = None, 0.0
    why = "no probe in the capture"
    if side is not None and cores:
        nw = side.loader.num_workers
        cal = cal_activities(side)
        b0 = _batches(cal, cores)
        f_c = float(b0[:, 2].mean()) if len(b0) else 0.0
        if side.probe is None:
            pass
        elif side.batch_probe:
            why = "its probe is at a second batch_size, not at a second num_workers"
        elif nw == 0:
            why = ("the capture is at num_workers=0, whose main-thread batches cost less than "
                   "a worker's")
        else:
            got = fit_oversub(cal, probe_side_activities(side), cores, interference, seed)
            if isinstance(got, str):
                why = f"the probe at num_workers={side.probe.num_workers}: {got}"
            elif got[1][1] <= 0:
                why = (f"the probe at num_workers={side.probe.num_workers}: its batches' CPU "
                       f"fell past the cores (fit {got[0]:.3f}, P10–P90 {got[1][0]:.3f}–"
                       f"{got[1][1]:.3f}): the host's speed changed between the settings")
            elif not got[0] <= MAX_OVERSUB or not got[1][1] <= MAX_OVERSUB:
                # (a fit past HostParams' bound refused the model calibration builds from it)
                why = (f"the probe at num_workers={side.probe.num_workers}: its batches' CPU "
                       f"grew past the cores by more than any slowdown (fit {got[0]:.3g}, "
                       f"P10–P90 {got[1][0]:.3g}–{got[1][1]:.3g}, the most {MAX_OVERSUB:g}): "
                       "the host's speed changed between the settings, or its records "
                       "cannot be right")
            else:
                fit = got
    host = {"oversub_ref": min(max(f_c, 0.0), 1.0)}
    src = {"host.oversub_ref": "measured"} if side is not None and cores else {}
    if fit is not None:
        point, (p10, p90), _ = fit
        host["oversub"] = max(point, 0.0)
        host["oversub_range"] = uniform_with_p10_p90(max(p10, 0.0), p90)
        lo, hi = host["oversub_range"]
        return host, {"host.oversub": "inferred", **src}, [said(
            f"slowdown past the cores fitted from the probe at num_workers="
            f"{side.probe.num_workers}: {host['oversub']:.3f} × (1 − cores/runnable) "
            f"(the fit's P10–P90 {p10:.3f}–{p90:.3f}; a slowdown is never below 0, so "
            f"what-ifs with more runnable threads than cores draw it over {lo:.3f}–{hi:.3f}; "
            "inferred)", "oversub_fit", noted=True,
            summary=f"slowdown past the cores (host.oversub) fitted from the probe at "
                    f"num_workers={side.probe.num_workers}: {host['oversub']:.3f}, what-ifs draw "
                    f"{lo:.3f}–{hi:.3f}")]
    lo, hi = OVERSUB_PRIOR
    host["oversub"], host["oversub_range"] = (lo + hi) / 2, (lo, hi)
    return host, {"host.oversub": "assumed", **src}, [prior_said(
        f"slowdown past the cores not calibrated ({why}): a prior of {lo:g}–{hi:g} "
        "(× (1 − cores/runnable), a cache refill per time slice) widens the interval of any "
        "what-if with more runnable threads than cores (capture with probe_workers=N past the "
        "cores to calibrate it)", "host.oversub", "slowdown past the cores", lo, hi)]
