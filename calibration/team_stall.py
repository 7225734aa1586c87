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
(no probe, a
calibration setting that was itself contended, a probe whose threads held their cores), the
stated prior is taken and calibration says so.
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.models.warning_record import said
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
