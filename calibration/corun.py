"""Co-run load and interference, read from the capture sidecar.

CPU work gets slower per unit when other threads run beside it (shared caches, memory
bandwidth), beyond the sharing of cores. The simulator models it as a slowdown
``1 + interference × o`` of CPU work with ``o`` the busy share of the other cores (0–1:
threads that wait on a run queue take no cache or bandwidth; :class:`models.cpu.CpuPool`),
relative to the share ``corun_ref`` each duration was captured under. This module measures
that share and fits the coefficient (the slowdown with every other core busy):

* :func:`corun_loads`: for every record (a worker's batch, the main thread's training step),
  the busy share of the other cores beside it, averaged over its wall interval, from the
  sidecar's instants (``t_end_us - wall_us .. t_end_us`` for a batch, ``t_start_us +
  next_wall_us .. t_start_us + wall_us`` for a step). Threads count as runnable as
  :func:`calibration.outside_load.busy_spans` counts them: for their CPU plus run-queue wait
  (the sidecar's ``run_wait_us``; a thread waiting for a core is a co-runner, as in the
  simulator), and a step's ``team`` intra-op threads throughout unless its main thread blocked
  (sidecars without the wait), so a step's own threads count as each other's co-runners. Only
  batches inside their setting's recorded steps are fitted (:func:`activities`).
* :func:`fit_interference`: with a probe at a second ``num_workers`` (the harness records a few
  steps of it into the same sidecar), the coefficient that explains how the median CPU time
  per batch and per step (a step less its page faults') changed with the share, and its
  P10–P90 over a bootstrap of the records. A probe at 0 workers moves both (the batch from
  about 0.5 to 0, the step from about 1); one at 2 or more workers moves the batch's only
  (the step's other core is busy at 1 worker already), from about 0.96 to 1 on 2 cores: a
  change of load too small for the records' scatter to give a slope (:func:`slope_se` above
  :data:`PRIOR_SD`), so the prior is kept and calibration says why.
  Without a probe, :data:`INTERFERENCE_PRIOR`.

A step on torch's intra-op threads (``team`` > 1 in :func:`activities`, kind ``team_step``)
counts as its threads' load beside the batches, but its CPU time is not fitted: beside more
runnable threads than cores its threads spin at the parallel regions' barriers (libgomp's
default wait policy), and that spinning is process CPU time that does no work. The simulator
prices it as the team's stall (:class:`models.cpu.CpuPool`); read as interference it would be
counted twice. Measured here (2 cores, the CNN step alone against beside co-runners stopped
and resumed in turn, 16 pairs each, 2026-12-04, load 1.2): on one thread the step's CPU time
changed ×0.99 / ×1.05 / ×1.00 beside 1 always-runnable / 2 always-runnable / 1 half-busy
co-runner; on torch's default 2 threads ×2.36 / ×2.00 / ×1.21, and ×1.03 / ×1.05 / ×1.04 with
``OMP_WAIT_POLICY=PASSIVE`` (threads that sleep at a barrier instead of spinning). A probe of
such a run fitted 1.0, the grid's bound, from the step's CPU alone; a worker's batch beside the
2-thread loop took ×1.17 its CPU alone (P10–P90 0.98–1.45, 24 pairs), beside a 1-thread loop
×0.99: interference the batches still show.

CPU time, not wall time, is compared: waiting for a core does not advance a thread's CPU time,
interference (cache misses, memory stalls) does. For the same reason the load is taken over a
record's running time, not its wall interval (:func:`corun_loads`): the simulator slows each
quantum of work by the load while it runs. fresh13's worker batches (2026-12-07, 2 cores, a
2-thread step beside 1 worker) held 84 ms of run-queue wait in 345 ms of wall, all of it at
the other core busy; over the wall the capture read 0.84 against the 2-worker probe's 1.00,
over the running time 0.78 against 0.99. A fit that reaches the top of :data:`FIT_GRID` is
refused (a bound of the search, not a measurement) and the prior kept.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.outside_load import runnable_share

INTERFERENCE_PRIOR = (0.0, 0.16)
"""Stated prior range of the interference coefficient without a probe (the slowdown of CPU
work with every other core busy). Measured on a 2-core host (issue 10): the training step's
CPU time rose 6–11 % when workers ran beside it (the other core busy), on the CPU demo and on
a real V100 host; the range runs from none to about twice that. (The demo's 98 runs of
2026-12-05 later read 0.09–0.11, docs/measurements.md "Co-run interference": inside it.)"""
FIT_GRID = np.linspace(-0.2, 1.0, 481)
"""Coefficients tried by the fit (slowdown with the other cores busy). Below 0 too: interference cannot
be negative, but a probe's CPU per work can fall as the load rises when the host sped up
between the settings' steps; a grid cut at 0 then piled the fit and every bootstrap on the
cut (a demo's probe of 2026-12-05 07:44 fitted 0.000, P10–P90 0.000–0.000, and its interval
drew no interference at all). :func:`calibration.sidecar_fit.interference_from_sidecar`
reads a fit whose P90 is not above 0 as the probe not separating interference."""
BOOTSTRAP = 200
"""Bootstrap resamples behind a fitted coefficient's range."""


@dataclass(frozen=True)
class Activity:
    """One thread group's busy interval (µs, monotonic clock): ``threads`` runnable threads,
    ``cpu_us`` of CPU; ``kind`` is ``batch`` or ``step``. ``fitted``: whether its CPU time may
    enter the interference fit (False for a record whose co-runners were not all recorded,
    e.g. a batch that ran before its setting's first recorded step); it counts in every
    other record's load either way. ``wait_us``: the µs of its interval its thread waited on a
    run queue (0 where not recorded): every core was busy then, and its CPU did not advance
    (:func:`corun_loads` takes the load over the rest)."""

    start_us: float
    end_us: float
    threads: float
    cpu_us: float
    kind: str
    fitted: bool = True
    wait_us: float = 0.0


def _step_threads(s, team: int) -> float:
    """A step's runnable threads outside ``next()``, counted as
    :func:`calibration.outside_load.busy_spans` counts them: its ``team`` threads for the share
    ``(CPU + run-queue wait) ÷ wall`` of the main thread (µs ÷ µs) when the sidecar has the
    wait; without it, runnable throughout unless the main thread blocked (more voluntary context
    switches than involuntary ones), when its CPU ÷ wall is all that is known. Its CPU ÷ wall
    alone counted a thread that waited for a core as not there, which beside a worker read a
    2-thread team as 1.5 threads and inflated the coefficient (:func:`fit_interference`)."""
    a, b = s.t_start_us + s.next_wall_us, s.t_start_us + s.wall_us
    if s.run_wait_us is not None:
        return max(team, 1) * runnable_share(s.cpu_us - s.next_cpu_us, s.run_wait_us, b - a)
    if (s.vcsw or 0) > (s.ivcsw or 0):
        return max(s.compute_cpu_us / (b - a), 1.0)
    return float(max(team, 1))


def activities(produce, steps, workers: bool, team: int = 1, fitted_steps=None,
               per_fault_us: float = 0.0) -> list[Activity]:
    """The activities of one loader setting: its batches (worker batches when ``workers``,
    else the main thread's) and its main-thread steps (outside ``next()``; kind ``team_step``
    when they ran on ``team`` > 1 intra-op threads, whose CPU time holds their spinning and is
    not fitted, see the module docstring). Records without instants are left out.

    ``steps`` are all the setting's recorded steps (every one is a co-runner of the batches
    beside it); ``fitted_steps``, their indices whose CPU may be fitted (None: all). A batch
    is fitted only when it lies inside the recorded steps' span: before the first step or
    after the last, what ran beside it is not in the sidecar (counted, it read as alone).
    ``per_fault_us`` (the capture's CPU per page fault, :mod:`calibration.page_faults`): a
    step's CPU is taken less its faults' (``minflt``, outside ``next()``), which the model
    prices apart (``refault_share``) and which follow each process's heap, not its
    co-runners."""
    out = []
    timed = [s for s in steps if s.t_start_us is not None]
    lo = min((s.t_start_us for s in timed), default=None)
    hi = max((s.t_start_us + s.wall_us for s in timed), default=None)
    for r in produce:
        if (r.worker >= 0) != workers or r.t_end_us is None or r.wall_us <= 0:
            continue
        start = r.t_end_us - r.wall_us
        if r.worker >= 0:
            tpw = max(round(r.work_us / r.cpu_us), 1) if r.cpu_us > 0 else 1
            thr = (tpw * runnable_share(r.cpu_us, r.run_wait_us, r.wall_us)
                   if r.run_wait_us is not None else max(r.work_us / r.wall_us, 1.0))
        else:
            thr = runnable_share(r.cpu_us, r.run_wait_us, r.wall_us)
        inside = lo is not None and lo <= start and r.t_end_us <= hi
        out.append(Activity(start, r.t_end_us, thr, r.work_us, "batch", inside,
                            r.run_wait_us or 0.0))
    for i, s in enumerate(steps):
        if s.t_start_us is None:
            continue
        a, b = s.t_start_us + s.next_wall_us, s.t_start_us + s.wall_us
        if b > a:
            cpu = max(s.compute_cpu_us - per_fault_us * (s.minflt or 0), 0.0)
            wait = (max(s.run_wait_us - (s.next_run_wait_us or 0.0), 0.0)
                    if s.run_wait_us is not None else 0.0)
            out.append(Activity(a, b, _step_threads(s, team), cpu,
                                "step" if team <= 1 else "team_step",
                                fitted_steps is None or i in fitted_steps, wait))
    return out


def probe_activities(side) -> tuple[list[Activity], list[Activity]]:
    """The activities of a sidecar's calibration setting and of its probe, as every probe fit
    compares them: every recorded step is a co-runner; the profiled ones (the profiler's cost)
    and the first unprofiled ones (the workers' start-up) are not fitted; a step's page faults
    are taken out at the capture's CPU per fault where it is measured
    (:func:`calibration.page_faults.refault_fit`: they are priced apart)."""
    from stepsim.calibration.page_faults import refault_fit
    from stepsim.calibration.probe_steps import after_startup, probe_base_steps

    team = side.torch_num_threads or 1
    rf = refault_fit(side)
    pf = rf.per_fault_us if rf is not None else 0.0
    cal = activities(after_startup(side.produce), side.steps, side.loader.num_workers > 0, team,
                     set(probe_base_steps(side)), pf)
    probe = activities(after_startup(side.probe.produce), side.probe.steps,
                       side.probe.num_workers > 0, team, per_fault_us=pf)
    return cal, probe


def corun_loads(acts: list[Activity], cores: int) -> np.ndarray:
    """Per activity, the busy share of the other cores beside it (0–1, the simulator's ``o``,
    :class:`models.cpu.CpuPool`), averaged over its wall interval: ``min(R(t) − x, c − 1) /
    (c − 1)``, with ``R(t)`` the runnable threads of every activity at ``t`` and ``x`` the
    activity's own running thread (``min(threads, 1)``; its extra threads are co-runners);
    0 on one core. A thread waiting on a run queue holds no core, so more runnable threads
    than cores add nothing: the old count of other threads per core (the integral of ``R``)
    read the training step at 1 worker as 0.48 and at 2–8 workers as 0.87–1.02, where its
    CPU did not move, while 0 workers ran 8 % cheaper (docs/measurements.md "Co-run
    interference").

    Taken over the activity's running time: its ``wait_us`` of run-queue wait were at every
    other core busy (a thread waits only when every core is taken) and its CPU did not
    advance then, so they are taken out of the busy integral and the interval, ``(B − w) ÷
    (wall − w)`` with ``B`` the busy µs over the wall (the wait-free share where no wait is
    recorded).

    ``R`` is a step function of the sorted instants; each activity's share is summed over the
    steps inside it (O(n log n + overlaps), in blocks of at most :data:`_BLOCK` pairs)."""
    n = len(acts)
    if n == 0 or cores <= 1:
        return np.zeros(n)
    starts = np.array([a.start_us for a in acts], dtype=float)
    ends = np.array([a.end_us for a in acts], dtype=float)
    thr = np.array([a.threads for a in acts], dtype=float)
    t0 = starts.min()          # µs from the first start: the sums keep their precision
    s, e = starts - t0, ends - t0
    t = np.concatenate([s, e])
    order = np.argsort(t, kind="stable")
    ts = t[order]
    rate = np.cumsum(np.concatenate([thr, -thr])[order])      # R on [ts[k], ts[k + 1])
    k0 = np.searchsorted(ts, s, side="right") - 1
    cnt = np.maximum(np.searchsorted(ts, e, side="left") - k0, 0)
    own = np.minimum(thr, 1.0)
    out = np.zeros(n)
    lo = 0
    while lo < n:                          # blocks of activities, at most _BLOCK pairs each
        csum = np.cumsum(cnt[lo:])
        hi = lo + max(int(np.searchsorted(csum, _BLOCK, side="right")), 1)
        idx = np.repeat(np.arange(lo, hi), cnt[lo:hi])
        first = np.repeat(np.cumsum(cnt[lo:hi]) - cnt[lo:hi], cnt[lo:hi])
        k = k0[idx] + np.arange(idx.size) - first
        nxt = ts[np.minimum(k + 1, ts.size - 1)]
        w = np.maximum(np.minimum(nxt, e[idx]) - np.maximum(ts[k], s[idx]), 0.0)
        busy = np.clip(rate[k] - own[idx], 0.0, cores - 1)
        out[lo:hi] = np.bincount(idx - lo, weights=w * busy, minlength=hi - lo)
        lo = hi
    wall = np.maximum(e - s, 1e-12)
    wait = np.clip(np.array([a.wait_us for a in acts], dtype=float), 0.0, wall)
    run = wall - wait
    busy = out / (cores - 1) - wait            # the waits' µs were at every other core busy
    return np.where(run > 1e-9, np.clip(busy / np.maximum(run, 1e-12), 0.0, 1.0),
                    out / wall / (cores - 1))


_BLOCK = 4_000_000
"""Activity–step pairs summed at once by :func:`corun_loads` (bounds its memory)."""


def mean_load(acts: list[Activity], loads: np.ndarray, kind: str) -> float:
    """The mean co-run load of the activities of one ``kind`` (0 when there are none)."""
    sel = [x for a, x in zip(acts, loads) if a.kind == kind]
    return float(np.mean(sel)) if sel else 0.0


PRIOR_SD = (INTERFERENCE_PRIOR[1] - INTERFERENCE_PRIOR[0]) / 12 ** 0.5
"""The standard deviation (0.046) of the coefficient's stated prior, uniform over
:data:`INTERFERENCE_PRIOR`: a probe whose slope has a larger standard error
(:func:`slope_se`) says less than the prior, and the prior is kept. The demo's probe at
num_workers=2 beside its 1-worker capture moved the batches' load from about 0.96 to 1.00
(the other core busy with the training step either way), and its fit read 0.080 / 0.182 /
0.287 in three runs of 2026-12-05 (docs/measurements.md "The demo's score"): a slope over
0.04 of load from medians that move by about 1 %."""
MEDIAN_SE = (np.pi / 2) ** 0.5
"""The standard error of a median of ``n`` normal draws is this × sd / √n (1.2533)."""


def _log_median_se(cpu: np.ndarray) -> float:
    """The standard error of ``log(median(cpu))`` (µs records): :data:`MEDIAN_SE` × the
    records' robust log sd (1.4826 × the median absolute deviation, so one kernel burst does
    not set it) / √n. This is the noise the sidecar itself measures: its records' scatter
    around the run's speed at one load."""
    lg = np.log(cpu)
    sd = 1.4826 * float(np.median(np.abs(lg - np.median(lg))))
    return MEDIAN_SE * sd / len(lg) ** 0.5


def slope_se(a0: np.ndarray, a1: np.ndarray) -> float:
    """The standard error of the coefficient that one kind's records measure: rows of (CPU µs,
    co-run load) in the capture (``a0``) and the probe (``a1``). The fit explains
    ``log(median c1 / median c0)`` by ``log((1 + k o1) / (1 + k o0))``, whose slope in ``k``
    at the prior's middle ``k̄`` is ``o1 / (1 + k̄ o1) − o0 / (1 + k̄ o0)`` (about the change
    of load ``o1 − o0``): the standard error is the log ratio's (:func:`_log_median_se` of
    each, in quadrature) over that slope; infinite when the loads are equal."""
    kb = sum(INTERFERENCE_PRIOR) / 2
    o0, o1 = a0[:, 1].mean(), a1[:, 1].mean()
    d = abs(o1 / (1 + kb * o1) - o0 / (1 + kb * o0))
    se = np.hypot(_log_median_se(a0[:, 0]), _log_median_se(a1[:, 0]))
    return float(se / d) if d > 0 else float("inf")


def _unmeasured(a0: np.ndarray, a1: np.ndarray, kind: str) -> str:
    """Why one kind's records do not measure the slope: its loads and the standard error."""
    se = slope_se(a0, a1)
    return (f"the {kind}{'es' if kind == 'batch' else 's'}' co-run load {a0[:, 1].mean():.2f} "
            f"in the capture and {a1[:, 1].mean():.2f} in the probe give "
            + (f"a slope with standard error {se:.3g} from the records' scatter, above the "
               f"prior's {PRIOR_SD:.3f}" if np.isfinite(se) else "no slope (the same load)"))


def _fit(groups) -> float:
    """Least squares on log CPU-time ratios over ``groups`` of (cal cpu, cal load, probe cpu,
    probe load) means."""
    err = np.zeros_like(FIT_GRID)
    for c0, o0, c1, o1 in groups:
        pred = np.log(np.maximum(1 + FIT_GRID * o1, 1e-3) / np.maximum(1 + FIT_GRID * o0, 1e-3))
        err += (np.log(c1 / c0) - pred) ** 2
    return float(FIT_GRID[int(np.argmin(err))])


def fit_interference(cal: list[Activity], probe: list[Activity], cores: int,
                     seed: int = 0) -> tuple[float, tuple[float, float]] | str | None:
    """The interference coefficient from a calibration setting and a probe setting, with its
    P10–P90 over a bootstrap of the records, on :data:`FIT_GRID` (below 0 where the CPU per
    work fell with the load), from the kinds of activity whose slope the probe measures
    (:func:`slope_se` at most :data:`PRIOR_SD`). A string, the reason, when a kind appears in
    both but none is measurable (the loads too close for the records' scatter: the prior says
    more), or when the fit or its P90 reaches the top of :data:`FIT_GRID` (a bound of the
    search is no measurement: fresh13's probe at 2 workers beside a 2-thread team on 2 cores,
    2026-12-07, read 1.000, P10–P90 1.000–1.000, where the batches' CPU on the main thread
    says about 0.04); None when no kind of activity appears in both. A ``team_step`` counts in
    the loads, never in the fit (its CPU holds its spinning)."""
    l0, l1 = corun_loads(cal, cores), corun_loads(probe, cores)
    per_kind, kinds = [], []
    for kind in ("batch", "step"):
        a0 = [(a.cpu_us, x) for a, x in zip(cal, l0)
              if a.kind == kind and a.cpu_us > 0 and a.fitted]
        a1 = [(a.cpu_us, x) for a, x in zip(probe, l1)
              if a.kind == kind and a.cpu_us > 0 and a.fitted]
        if len(a0) >= 2 and len(a1) >= 2:
            per_kind.append((np.array(a0), np.array(a1)))
            kinds.append(kind)
    if not per_kind:
        return None
    measurable = [(a0, a1) for a0, a1 in per_kind if slope_se(a0, a1) <= PRIOR_SD]
    if not measurable:
        return "; ".join(_unmeasured(a0, a1, kind) for (a0, a1), kind in zip(per_kind, kinds))
    per_kind = measurable

    def groups(pick0, pick1):   # the median CPU: one step's kernel burst is no interference
        return [(np.median(a0[p0, 0]), a0[p0, 1].mean(), np.median(a1[p1, 0]), a1[p1, 1].mean())
                for (a0, a1), p0, p1 in zip(per_kind, pick0, pick1)]

    point = _fit(groups([slice(None)] * len(per_kind), [slice(None)] * len(per_kind)))
    rng = np.random.default_rng(seed)
    boots = [_fit(groups([rng.integers(0, len(a0), len(a0)) for a0, _ in per_kind],
                         [rng.integers(0, len(a1), len(a1)) for _, a1 in per_kind]))
             for _ in range(BOOTSTRAP)]
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    top = FIT_GRID[-1]
    if point >= top or hi >= top:
        return (f"the fit reached the top of the coefficients tried, {top:g} (fit {point:.3f}, "
                f"P10–P90 {lo:.3f}–{hi:.3f}): a bound of the search, not a measurement; "
                "refused, the prior kept")
    return point, (lo, hi)
