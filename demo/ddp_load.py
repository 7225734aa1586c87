"""Outside load on the DDP demo's re-measured (timed) runs, read from the runs themselves, and
the rows it sets apart from the score, as ``stepsim demo`` sets a loaded setting apart (‡).

A setting's repeats are the same work, so each repeat is read against the **median of its
setting's repeats** with :func:`calibration.ddp_runs.off_runs` (past
:data:`models.load_bound.LOAD_WARN`), on two readings from :mod:`demo.ddp_job`'s records:

* the share of a core its ranks' processes held: every thread's CPU (``threads``, the
  kernel's schedstat between the first step and the run's closing barrier) over the run's
  wall (first to last step start), per rank. The DDP demo's quiet repeats held 0.77-0.90 at
  the defaults and both bucket caps, 0.61-0.64 with the straggler; the loaded ones of
  2026-12-05 09:33-09:45 (a whole run at 33-37 ms a step where its repeats took 18-25) held
  0.48-0.52;
* the training thread's CPU per step (``phases``: its thread CPU at the step's start and end):
  work that slows the host without taking its cores raises it (at 10:24 one repeat of the
  defaults took 16.8 ms a step against 12.9 and 13.0).

* the share of the machine's cores other processes were busy (:func:`outside_share`, from
  ``/proc/stat`` around the run), past ``LOAD_WARN``: this one needs no median, so it holds
  where most repeats were loaded (11:59: two of three of every setting).

A row with a loaded repeat that was measured slower than predicted is set apart (``‡``, left
out of the score): the load could explain its error; faster than predicted, it stays (load only
slows a run). Every repeat stays in the row's measured mean; the mean over the quiet repeats
is shown beside it, so nothing is dropped unmarked.

The mirror case: every row's point stands on the replay's timed repeats (:mod:`demo.ddp_level`),
so a loaded repeat of the replay raises every row's point by as much as it slowed that repeat.
Where it did (the replay's mean over all its repeats above its quiet repeats' mean, or no quiet
repeat), a row measured *faster* than predicted is set apart too: that load could explain its
error (``level_loaded``). Measured: ddp20's demo of 2026-12-07 08:54 ran with every replay
repeat under 64-72 % outside load (the replay 53.3 ms where quiet demos measure 19-22); its
bucket_cap_mb=1 row, whose repeats were less loaded (18-67 %), measured 31.0 ms and was the
one row scored, at +80.6 %. The old +39.4 % worst row of the 26 kept demos (demo-br-2's
bucket_cap_mb=25: one replay repeat at 36 ms against 21.6 and 23.6, the row's own quiet) was
this case too (offset19, docs/measurements.md).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.ddp_runs import off_runs
from stepsim.calibration.machine_stat import busy_share


def outside_share(ranks: list[dict]) -> float | None:
    """The share of the machine's cores' time other processes were busy over one run (every
    rank's :class:`demo.ddp_job.RunResult` as a dict): the machine's busy CPU (rank 0's
    ``machine``, ``/proc/stat``, steal included) less every rank's threads' CPU over the same
    span, over ``cores × wall``; None without the records (runs recorded before them)."""
    if not all(r.get("threads") for r in ranks):
        return None
    return busy_share(ranks[0].get("machine"),
                      sum(t["cpu_us"] for r in ranks for t in r["threads"]))


def repeat_readings(ranks: list[dict]) -> tuple[float | None, float | None]:
    """One timed run's (every rank's :class:`demo.ddp_job.RunResult` as a dict): the mean
    share of a core its ranks' processes held, and the training thread's mean CPU µs per
    step; None where the run lacks the records."""
    shares, cpus = [], []
    for r in ranks:
        starts = r.get("step_starts_us") or []
        wall = starts[-1] - starts[0] if len(starts) > 1 else 0.0
        if wall > 0 and r.get("threads"):
            shares.append(sum(t["cpu_us"] for t in r["threads"]) / wall)
        steps = [p[10] - p[5] for p in r.get("phases") or [] if len(p) >= 11]
        if steps:
            cpus.append(float(np.mean(steps)))
    return (float(np.mean(shares)) if len(shares) == len(ranks) else None,
            float(np.mean(cpus)) if len(cpus) == len(ranks) else None)


def loaded_repeats(repeats: list[list[dict]]) -> dict[int, str]:
    """The repeats (index) of one setting that ran under outside load against the others,
    each with why (:func:`calibration.ddp_runs.off_runs`; needs three repeats)."""
    readings = [repeat_readings(r) for r in repeats]
    shares = [s for s, _ in readings]
    cpus = [c for _, c in readings]
    return off_runs(shares, [] if any(c is None for c in cpus) else cpus,
                    ref="the setting's repeats' median", span="its steps",
                    work="its training thread's CPU per step",
                    outside=[outside_share(r) for r in repeats])


def mark_row(row: dict, means_us: list[float], repeats: list[list[dict]],
             level_raised: bool = False) -> dict:
    """``row`` (a step row of the demo's table) with its loaded repeats (``loaded``: index and
    why), the mean over its quiet ones (``quiet_measured_ms``, ``quiet_error``) and whether
    it is set apart from the score (``load_set_apart``: a loaded repeat and measured slower
    than predicted, or ``level_raised``, the replay's level raised by outside load
    (:func:`level_loaded`), and measured faster; the latter also as ``level_set_apart``)."""
    off = loaded_repeats(repeats)
    mirror = level_raised and row["error"] > 0
    row = dict(row, loaded=[{"repeat": k, "why": why} for k, why in sorted(off.items())],
               load_set_apart=(bool(off) and row["error"] < 0) or mirror,
               level_set_apart=mirror)
    quiet = [m for k, m in enumerate(means_us) if k not in off]
    if off and quiet:
        q = float(np.mean(quiet)) / 1e3
        row.update(quiet_measured_ms=q, quiet_error=row["predicted_ms"] / q - 1.0)
    return row


def level_loaded(replay_row: dict) -> bool:
    """Whether outside load raised the level every row's point stands on: the replay's row
    (marked by :func:`mark_row`) has a loaded repeat and either no quiet one or a mean over
    all its repeats above its quiet repeats' mean (see the module docstring)."""
    if not replay_row.get("loaded"):
        return False
    quiet = replay_row.get("quiet_measured_ms")
    return quiet is None or replay_row["measured_ms"] > quiet
