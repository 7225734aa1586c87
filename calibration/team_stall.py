"""How hard torch's intra-op team stalls beside more runnable threads than cores
(``host.team_stall``, ``γ``; :class:`models.cpu.CpuPool`), from the capture sidecar.

A training step on ``T`` intra-op threads advances only while every thread of the team holds
a core. Each runnable thread holds a core a share ``s`` of the time; the model's team advances
at ``s^(1 + γ (T − 1))`` of full speed. ``γ = 1`` is the team's threads holding cores
independently of each other; measured here the team stalls harder (see
:data:`TEAM_STALL_PRIOR`).

The sidecar measures ``s`` of a step itself: its threads are runnable through it (working or
spinning at a barrier), so ``s = CPU ÷ (T × wall)`` of the step's part outside ``next()``. A
probe at a second ``num_workers`` beside a calibration setting whose team had a core per
thread (``W0``, the step's wall alone) gives, per probe step of wall ``W1`` and share ``s1``,

    W0 = W1 × s1^(1 + γ (T − 1))   →   γ = (ln(W0 / W1) / ln(s1) − 1) / (T − 1)

(:func:`fit_team_stall`, the mean of ``W1`` and of the CPU over the probe's steps, its P10–P90
over a bootstrap of both settings' steps). The share is averaged over the step, while beside
DataLoader workers the stall comes in their bursts: the fit is a floor (a lower ``γ`` than the
simulator needs to give the probe's wall; on the CNN of :data:`TEAM_STALL_PRIOR`, 1.26 from a
probe at 2 workers, where 6–10 gives the re-measured steps). Where the capture cannot show it
(no probe, a probe whose threads held their cores), the stated prior is taken and calibration
says so. A calibration setting that was itself contended has its step's work inverted at
``γ`` (:func:`contended_team_stall`): ``γ`` is drawn with the work re-inverted, and a probe is
a second equation of the same work (:func:`joint_gamma`).
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.calibration.probe_steps import probe_base_steps, uniform_with_p10_p90
from stepsim.models.warning_record import prior_said, said

TEAM_STALL_PRIOR = (1.0, 10.0)
"""Stated prior range of ``γ`` without a probe that shows it (uniform). Measured here (2 cores,
2026-12-04, load 1.2-1.6): a small CNN step on torch's default 2 threads, alone against
beside one always-runnable thread (stopped and resumed in turn, 16 pairs), took ×3.77 its wall
(P10–P90 ×2.21–6.41): ``γ`` 2.27 (0.96–3.58) by ``(2/3)^(1 + γ) = 1 / ratio``. Beside a real
DataLoader worker (21 ms of CPU a batch, a step of 30–36 ms alone) the step took 72.5–75.9 ms
at 1 worker and 63.1–67.1 ms at 2 (3 runs each) against 49.5–55.5 at 0: the simulator gives
57.4 / 57.5 at ``γ`` 2.25, 62.0 at 3.5, 67.4 at 6 and 69.2 / 69.3 at 10, where the team
stops whenever a worker runs (20: 69.5). The range runs from independent threads (1) to that
limit; a time-averaged share cannot tell them apart (the stall comes in the workers' bursts),
so a probe raises only its floor (:func:`calibration.sidecar_fit.team_stall_from_sidecar`)."""
BOOTSTRAP = 200
"""Bootstrap resamples behind a fitted ``γ``'s range."""
MIN_STALL = 0.03
"""A probe whose team threads held their cores more than ``1 − MIN_STALL`` of its wall shows
no stall to fit (``ln s1`` near 0 makes ``γ`` any value)."""
GAMMA_BOUNDS = (0.0, 20.0)
"""``γ`` is kept inside these (``HostParams.team_stall``'s own bounds)."""


def gamma_of(w0_us: float, w1_us: float, share: float, threads: int) -> float | None:
    """``γ`` from a step's wall alone ``w0_us``, its wall ``w1_us`` beside co-runners and its
    threads' share of a core ``share`` there (see the module docstring); None when the share
    shows no stall or the walls cannot be (``w1 < w0``: the probe ran faster than alone)."""
    if threads <= 1 or not 0 < share < 1 - MIN_STALL or w0_us <= 0 or w1_us <= w0_us:
        return None
    g = (math.log(w0_us / w1_us) / math.log(share) - 1) / (threads - 1)
    return float(min(max(g, GAMMA_BOUNDS[0]), GAMMA_BOUNDS[1]))


def _steps(steps) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the wall and the process CPU outside ``next()`` (µs), steps with a wall."""
    w = np.array([s.wall_us - s.next_wall_us for s in steps], dtype=float)
    c = np.array([s.compute_cpu_us for s in steps], dtype=float)
    keep = w > 0
    return w[keep], c[keep]


def fit_team_stall(cal_steps, probe_steps, threads: int, seed: int = 0
                   ) -> tuple[float, tuple[float, float]] | None:
    """``(γ, (P10, P90))`` from the calibration setting's steps (each team thread with a core:
    their wall is the team's alone) and the probe's steps beside co-runners; None when either
    has fewer than 2 steps or the probe shows no stall (see :func:`gamma_of`)."""
    w0, _ = _steps(cal_steps)
    w1, c1 = _steps(probe_steps)
    if len(w0) < 2 or len(w1) < 2:
        return None

    def one(a, b, c):
        return gamma_of(float(a.mean()), float(b.mean()), float(c.mean() / (threads * b.mean())),
                        threads)

    point = one(w0, w1, c1)
    if point is None:
        return None
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(BOOTSTRAP):
        i, j = rng.integers(0, len(w0), len(w0)), rng.integers(0, len(w1), len(w1))
        g = one(w0[i], w1[j], c1[j])
        if g is not None:
            boots.append(g)
    if len(boots) < BOOTSTRAP // 2:
        return None
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    return point, (lo, hi)


def team_spin_from_sidecar(side) -> tuple[dict, dict, list[str]]:
    """``(host fields, sources, warnings)`` for ``host.team_spin_us``: how long the step's
    other intra-op threads keep spinning (runnable) after its last parallel region, measured
    where nothing else runs then: in a 0-worker capture's ``next()``, the process's CPU time
    beyond the main thread's (the team's other threads, the main thread producing the batch),
    per other thread, the median over the unprofiled steps (the profiler's own threads are
    out). Measured on a user's CNN (torch's 2 threads, 2 cores, 2026-12-05): 7.4–8.0 ms in a
    16 ms ``next()``, libgomp's spin count before a waiting thread sleeps. When it lasts
    through the whole ``next()`` it is a floor, or the batch's own work on the team (a
    user's dataset of torch ops per item, 2026-12-06, h-fresh11: at 0 workers each batch's
    process CPU 31–40 ms against its thread's 16–19 ms, in a 1-thread worker 18–21 ms), said
    in a warning; a capture with workers
    cannot separate it from the pin-memory thread's and the workers' hand-over: 0, assumed.
    Unprofiled here is ``profiled`` false, as in :func:`calibration.sidecar_fit.probe_base_steps`
    but with no start-up steps left out: a 0-worker capture has no workers to start."""
    team = (side.torch_num_threads or 1) if side is not None else 1
    if team <= 1:
        return {}, {}, []
    steps = [s for s in side.steps if not s.profiled and s.next_proc_cpu_us is not None]
    if side.loader.num_workers > 0 or not steps:
        return {}, {"host.team_spin_us": "assumed"}, [said(
            "intra-op team spin not measured (it needs a 0-worker capture with the process's "
            "CPU time): the step's other threads are taken to sleep at once after its last "
            "parallel region, so a what-if with workers may price the team's stall low",
            "team_spin_assumed", noted=True, summary="intra-op team spin not measured: it "
            "needs a 0-worker capture with the process's CPU time")]
    from stepsim.calibration.calm import calm_among

    steps = calm_among(side, steps)     # not those another process's load stalled
    spin = float(np.median([max(s.next_proc_cpu_us - s.next_cpu_us, 0.0) / (team - 1)
                            for s in steps]))
    nxt = float(np.median([s.next_wall_us for s in steps]))
    warn = []
    if spin >= 0.9 * nxt:
        warn.append(f"intra-op team spin {spin / 1e3:.1f} ms per other thread lasted "
                    f"through next() ({nxt / 1e3:.1f} ms): the team's spin after the step, "
                    "a floor, or the batch's own work on the team's threads where the "
                    "dataset's items run torch ops (next()'s process CPU cannot tell them "
                    "apart); taken as spin (measured), what-ifs with workers may price the "
                    "team's stall high or low")
    return {"team_spin_us": spin}, {"host.team_spin_us": "measured"}, warn


def preempted_share(steps) -> float:
    """Of the main thread's context switches outside ``next()`` over ``steps``, the share that
    were involuntary (preempted while runnable, i.e. waiting for a core, not blocking); 0 when
    the sidecar did not record them."""
    vol = sum(s.vcsw or 0 for s in steps)
    inv = sum(s.ivcsw or 0 for s in steps)
    return inv / (vol + inv) if vol + inv else 0.0


CONTENDED_PRIOR = (0.3, 3.6)
"""Stated range of ``γ`` where the calibration setting was itself contended and no probe pins
it (uniform; point 1, the closed form's independent threads). Each end measured here (2
cores): 0.30, the least of the time-averaged ``γ`` of fresh6's JPEG job at 2 workers
(h-zero17, separate runs, 2026-12-06: 0.30–0.98, 0.76–1.03 at 1 worker); 3.58, the P90 of
the CNN beside one always-runnable thread (:data:`TEAM_STALL_PRIOR`); between them the CNN
beside two always-busy workers, 0.65–1.06 (:mod:`models.cpu_place`). The step's work is
inverted at each drawn ``γ`` (:func:`models.team_inversion.reinverted`), so the range moves
the work and the stall together."""


def joint_gamma(wa_us: float, sa: float, wb_us: float, sb: float, threads: int
                ) -> float | None:
    """``γ`` that makes one step's work the same at two settings, each of wall ``w`` (µs) with
    its team's share of a core ``s``: ``wa × sa^e = wb × sb^e``, ``e = 1 + γ (T − 1)``, so
    ``e = ln(wb / wa) / ln(sa / sb)``; None where the shares are too alike to tell ``e``
    (``|ln(sa / sb)|`` under :data:`MIN_STALL`) or a value is not positive. Not kept inside
    :data:`GAMMA_BOUNDS`: below 0 the team advanced faster than its threads' shares allow
    even together (``e`` under 1), a failed test of the model's family."""
    if threads <= 1 or min(wa_us, wb_us, sa, sb) <= 0:
        return None
    d = math.log(sa / sb)
    if abs(d) < MIN_STALL:
        return None
    return float((math.log(wb_us / wa_us) / d - 1) / (threads - 1))


def fit_joint_stall(cal_steps, probe_steps, threads: int, probe_free: bool, seed: int = 0
                    ) -> tuple[float, tuple[float, float]] | None:
    """``(γ, (P10, P90))`` of :func:`joint_gamma` from a contended calibration setting's steps
    and a probe's (``probe_free``: the probe's team had a core per thread, so its share is 1
    and its wall is the work). P10–P90 over a bootstrap of the steps; the host's speed between
    the two is not in it (each setting's wall is taken as it was: a batch's CPU is no gauge of
    the step's, measured on fresh6's w1p0 capture, whose probe's batches took 1.35× the
    capture's CPU while its step's wall matched the 0.76–1.03 of ``γ`` h-zero17 measured in
    one process, 0.94 raw against 1.52 over the batches' CPU). None as :func:`joint_gamma`, or
    with fewer than 2 steps a setting."""
    wa, ca = _steps(cal_steps)
    wb, cb = _steps(probe_steps)
    if len(wa) < 2 or len(wb) < 2:
        return None

    def one(a, b, c, d):
        sb = 1.0 if probe_free else float(d.mean() / (threads * c.mean()))
        return joint_gamma(float(a.mean()), float(b.mean() / (threads * a.mean())),
                           float(c.mean()), sb, threads)

    point = one(wa, ca, wb, cb)
    if point is None:
        return None
    rng = np.random.default_rng(seed)
    boots = [g for _ in range(BOOTSTRAP)
             for i, j in [(rng.integers(0, len(wa), len(wa)), rng.integers(0, len(wb), len(wb)))]
             if (g := one(wa[i], ca[i], wb[j], cb[j])) is not None]
    if len(boots) < BOOTSTRAP // 2:
        return None
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    return point, (lo, hi)


def contended_team_stall(side, team: int, seed: int = 0):
    """:func:`calibration.sidecar_fit.team_stall_from_sidecar` where the calibration
    setting's ``team`` threads and workers were more than the cores: its step's work is
    inverted from its wall at ``γ``, so ``γ`` is drawn and the work re-inverted at each draw
    (:mod:`models.team_inversion`). A probe at a second ``num_workers`` (not a second batch
    size) is the second equation of the same work: ``γ`` and the work jointly, in closed form
    (:func:`fit_joint_stall`), drawn over the uniform range whose P10–P90 is the bootstrap's
    where the point is in the family (``γ ≥ 0``); else the stated :data:`CONTENDED_PRIOR`,
    point 1, stretched to the probe's P10–P90 where there is one."""
    nw = side.loader.num_workers
    fit = None
    if side.probe is not None and not side.batch_probe:
        base = [side.steps[i] for i in probe_base_steps(side)]
        fit = fit_joint_stall(base, side.probe.steps, team,
                              side.probe.num_workers + team <= side.host_cores, seed)
    told = "" if fit is None else (
        f"γ {fit[0]:.2f} (P10–P90 {fit[1][0]:.2f}–{fit[1][1]:.2f}) from the calibration "
        f"setting ({team} threads, {nw} worker(s), more than the {side.host_cores} cores) and "
        f"the probe at num_workers={side.probe.num_workers} jointly: one work at both walls, "
        f"wall × s^(1 + γ·{team - 1}), s each thread's share of a core")
    if fit is not None and GAMMA_BOUNDS[0] <= fit[0] <= GAMMA_BOUNDS[1]:
        lo, hi = uniform_with_p10_p90(*fit[1])
        lo, hi = max(lo, GAMMA_BOUNDS[0]), min(hi, GAMMA_BOUNDS[1])
        text = (f"intra-op team stall {told}; drawn over {lo:.2f}–{hi:.2f} (inferred), the "
                "step's work re-inverted at each draw")
        return ({"team_stall": fit[0], "team_stall_range": (lo, hi)},
                {"host.team_stall": "inferred"},
                [said(text, "team_stall_joint", noted=True, summary=f"intra-op team stall γ "
                      f"{fit[0]:.2f} fitted with the step's work from the probe; drawn over "
                      f"{lo:.2f}–{hi:.2f}")])
    lo, hi = CONTENDED_PRIOR
    why = ("its probe is at a second batch_size" if side.batch_probe else
           "the probe's shares are too alike to tell it" if side.probe is not None and fit is None
           else "no probe in the capture" if fit is None else
           f"the probe fails the closed form's test: {told}, outside {GAMMA_BOUNDS[0]:g}–"
           f"{GAMMA_BOUNDS[1]:g} (under 0 the team advanced faster than its threads' shares "
           "allow even together), so one γ does not hold at both settings")
    if fit is not None:       # the prior's range stretched to what the probe said
        lo = max(min(lo, fit[1][0]), GAMMA_BOUNDS[0])
        hi = min(max(hi, fit[1][1]), GAMMA_BOUNDS[1])
    text = (f"intra-op team stall γ not calibrated ({why}): the calibration setting's {team} "
            f"threads and {nw} worker(s) were more than the {side.host_cores} cores, so its "
            f"step's work is inverted from its wall as wall × s^(1 + γ·{team - 1}) at γ 1 and "
            f"re-inverted at each γ drawn over {lo:.2f}–{hi:.2f} (the prior "
            f"{CONTENDED_PRIOR[0]:g}–{CONTENDED_PRIOR[1]:g}, measured on this machine at "
            "contended settings" + (", stretched to the probe's P10–P90)" if fit is not None
                                    else "); a probe at a second num_workers would fit it"))
    return ({"team_stall": 1.0, "team_stall_range": (lo, hi)}, {"host.team_stall": "assumed"},
            [prior_said(text, "host.team_stall", "intra-op team stall γ", lo, hi)])
