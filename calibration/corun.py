"""Co-run load and interference, read from the capture sidecar.

CPU work gets slower per unit when other threads run beside it (shared caches, memory
bandwidth), beyond the sharing of cores. The simulator models it as a slowdown
``1 + interference × o`` of CPU work with ``o`` other runnable threads per core
(:class:`models.cpu.CpuPool`), relative to the load ``corun_ref`` each duration was captured
under. This module measures that load and fits the coefficient:

* :func:`corun_loads`: for every record (a worker's batch, the main thread's training step),
  the other threads runnable beside it per core, averaged over its wall interval, from the
  sidecar's instants (``t_end_us - wall_us .. t_end_us`` for a batch, ``t_start_us +
  next_wall_us .. t_start_us + wall_us`` for a step). Threads count as runnable as
  :func:`calibration.outside_load.busy_spans` counts them: for their CPU plus run-queue wait
  (the sidecar's ``run_wait_us``; a thread waiting for a core is a co-runner, as in the
  simulator), and a step's ``team`` intra-op threads throughout unless its main thread blocked
  (sidecars without the wait), so a step's own threads count as each other's co-runners. Only
  batches inside their setting's recorded steps are fitted (:func:`activities`).
* :func:`fit_interference`: with a probe at a second ``num_workers`` (the harness records a few
  steps of it into the same sidecar), the coefficient that explains how the CPU time per batch
  and per step changed with the load, and its P10–P90 over a bootstrap of the records.
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
interference (cache misses, memory stalls) does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.outside_load import _runnable

INTERFERENCE_PRIOR = (0.0, 0.16)
"""Stated prior range of the interference coefficient without a probe (per other runnable
thread per core). Measured on a 2-core host (issue 10): a worker's CPU time per batch rose
about 8 % from 2 to 4 workers (one more co-runner per core), the training step's 6–11 % when
workers ran beside it; the range runs from none to twice that."""
FIT_GRID = np.linspace(-0.2, 1.0, 481)
"""Coefficients tried by the fit (per co-runner per core). Below 0 too: interference cannot
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
    other record's load either way."""

    start_us: float
    end_us: float
    threads: float
    cpu_us: float
    kind: str
    fitted: bool = True


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
        return max(team, 1) * _runnable(s.cpu_us - s.next_cpu_us, s.run_wait_us, b - a)
    if (s.vcsw or 0) > (s.ivcsw or 0):
        return max(s.compute_cpu_us / (b - a), 1.0)
    return float(max(team, 1))


def activities(produce, steps, workers: bool, team: int = 1, fitted_steps=None) -> list[Activity]:
    """The activities of one loader setting: its batches (worker batches when ``workers``,
    else the main thread's) and its main-thread steps (outside ``next()``; kind ``team_step``
    when they ran on ``team`` > 1 intra-op threads, whose CPU time holds their spinning and is
    not fitted, see the module docstring). Records without instants are left out.

    ``steps`` are all the setting's recorded steps (every one is a co-runner of the batches
    beside it); ``fitted_steps``, their indices whose CPU may be fitted (None: all). A batch
    is fitted only when it lies inside the recorded steps' span: before the first step or
    after the last, what ran beside it is not in the sidecar (counted, it read as alone)."""
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
            thr = (tpw * _runnable(r.cpu_us, r.run_wait_us, r.wall_us)
                   if r.run_wait_us is not None else max(r.work_us / r.wall_us, 1.0))
        else:
            thr = _runnable(r.cpu_us, r.run_wait_us, r.wall_us)
        inside = lo is not None and lo <= start and r.t_end_us <= hi
        out.append(Activity(start, r.t_end_us, thr, r.work_us, "batch", inside))
    for i, s in enumerate(steps):
        if s.t_start_us is None:
            continue
        a, b = s.t_start_us + s.next_wall_us, s.t_start_us + s.wall_us
        if b > a:
            out.append(Activity(a, b, _step_threads(s, team), s.compute_cpu_us,
                                "step" if team <= 1 else "team_step",
                                fitted_steps is None or i in fitted_steps))
    return out


def corun_loads(acts: list[Activity], cores: int) -> np.ndarray:
    """Per activity, the other runnable threads per core beside it, averaged over its wall
    interval (its own extra threads included).

    With ``R(t)`` the runnable threads of every activity at ``t`` and ``F`` its integral (a
    piecewise linear function of the sorted instants, found by binary search), the thread-µs
    beside activity ``i`` are ``F(end) − F(start) − threads_i × wall_i``: O(n log n) in the
    records, where comparing every pair took over 120 s on 500,000 records."""
    if not acts:
        return np.zeros(0)
    starts = np.array([a.start_us for a in acts], dtype=float)
    ends = np.array([a.end_us for a in acts], dtype=float)
    thr = np.array([a.threads for a in acts], dtype=float)
    t0 = starts.min()          # µs from the first start: F's sums keep their precision
    t = np.concatenate([starts, ends]) - t0
    order = np.argsort(t, kind="stable")
    ts = t[order]
    rate = np.cumsum(np.concatenate([thr, -thr])[order])      # R on [ts[k], ts[k + 1])
    area = np.concatenate([[0.0], np.cumsum(rate[:-1] * np.diff(ts))])   # F(ts[k])

    def integral(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ts, x, side="right") - 1
        return area[k] + rate[k] * (x - ts[k])

    wall = ends - starts
    beside = integral(ends - t0) - integral(starts - t0) - thr * wall
    others = np.maximum(beside, 0.0) / wall + np.maximum(thr - 1, 0.0)
    return others / cores


def mean_load(acts: list[Activity], loads: np.ndarray, kind: str) -> float:
    """The mean co-run load of the activities of one ``kind`` (0 when there are none)."""
    sel = [x for a, x in zip(acts, loads) if a.kind == kind]
    return float(np.mean(sel)) if sel else 0.0


def _fit(groups) -> float:
    """Least squares on log CPU-time ratios over ``groups`` of (cal cpu, cal load, probe cpu,
    probe load) means."""
    err = np.zeros_like(FIT_GRID)
    for c0, o0, c1, o1 in groups:
        pred = np.log(np.maximum(1 + FIT_GRID * o1, 1e-3) / np.maximum(1 + FIT_GRID * o0, 1e-3))
        err += (np.log(c1 / c0) - pred) ** 2
    return float(FIT_GRID[int(np.argmin(err))])


def fit_interference(cal: list[Activity], probe: list[Activity], cores: int,
                     seed: int = 0) -> tuple[float, tuple[float, float]] | None:
    """The interference coefficient from a calibration setting and a probe setting, with its
    P10–P90 over a bootstrap of the records, on :data:`FIT_GRID` (below 0 where the CPU per
    work fell with the load); None when no kind of activity appears in both with a different
    load (the probe then cannot tell interference from nothing). A ``team_step`` counts in the
    loads, never in the fit (its CPU holds its spinning)."""
    l0, l1 = corun_loads(cal, cores), corun_loads(probe, cores)
    per_kind = []
    for kind in ("batch", "step"):
        a0 = [(a.cpu_us, x) for a, x in zip(cal, l0)
              if a.kind == kind and a.cpu_us > 0 and a.fitted]
        a1 = [(a.cpu_us, x) for a, x in zip(probe, l1)
              if a.kind == kind and a.cpu_us > 0 and a.fitted]
        if len(a0) >= 2 and len(a1) >= 2:
            per_kind.append((np.array(a0), np.array(a1)))
    per_kind = [(a0, a1) for a0, a1 in per_kind
                if abs(a1[:, 1].mean() - a0[:, 1].mean()) > 0.05]
    if not per_kind:
        return None

    def groups(pick0, pick1):
        return [(a0[p0, 0].mean(), a0[p0, 1].mean(), a1[p1, 0].mean(), a1[p1, 1].mean())
                for (a0, a1), p0, p1 in zip(per_kind, pick0, pick1)]

    point = _fit(groups([slice(None)] * len(per_kind), [slice(None)] * len(per_kind)))
    rng = np.random.default_rng(seed)
    boots = [_fit(groups([rng.integers(0, len(a0), len(a0)) for a0, _ in per_kind],
                         [rng.integers(0, len(a1), len(a1)) for _, a1 in per_kind]))
             for _ in range(BOOTSTRAP)]
    lo, hi = (float(v) for v in np.percentile(boots, [10, 90]))
    return point, (lo, hi)
