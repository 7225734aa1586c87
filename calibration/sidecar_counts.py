"""Bounds on the step counts and the barrier releases of a sidecar's DDP records, tied to what
the file itself holds (:func:`calibration.sidecar_cross.cross_check` calls :func:`ddp_counts`).
A record past its bound cannot be right: it is dropped and counted in one warning per list
naming the first, and the rest calibrates. Times in µs.

* ``ddp.bucket_cpu[].steps``: the profiled steps a bucket mark's CPU is summed over. The meter
  (:class:`calibration.ddp_meter.BucketMeter`) counts a step only while it is on, in the
  profiled window, and only when every bucket marked it, so at most the profiled step records
  the file holds. A count of 10^18 beside 8 profiled steps passed the marks' CPU bound (steps
  × the longest wall × cores, :func:`calibration.sidecar_cross._bucket_cpu`) and priced each
  bucket's CPU at 1e-14 µs a step. The marks are one sequence: all are dropped.
* ``ddp.cold_probe[].steps``, ``ddp.barrier_probe[].steps``: the probe's rounds at one pause or
  wait (6 in the DDP demo's job and in ``Capture``), run after the recorded steps; they weigh
  the record in the means pooled over a capture and its replicates
  (:mod:`calibration.gloo_cold`, :mod:`calibration.gloo_barrier`), where 10^18 steps on one
  replicate outweighed every other run. At most :data:`MAX_PROBE_STEPS`. (A count past 2^64
  does not reach here: the JSON reader refuses the file, "number is infinity".)
* ``ddp.barrier_probe[].barrier_us``: a rank's time in the probe's barrier is the wait the last
  rank spun (``wait_us``), plus how far apart the ranks' forwards ended, plus the barrier's
  release. The forwards' ends are at most a step apart (the ranks left the previous step's
  last all-reduce together), and the release, one small collective, takes less than a step,
  which holds an all-reduce per bucket; so at most ``wait_us`` + 2 × the longest step record's
  wall, with the clocks' slack (:func:`calibration.sidecar_records.past_wall`). The demo's
  records: 0.4-2.3 ms of release beside 6-40 ms steps. A release of 1e12 µs (11.6 days) was
  taken and priced every barrier what-if. A file without step records has no wall to bound
  them by: its barrier records are all dropped (a 1e11 µs release on both ranks of a job whose
  sidecars held no steps became ``comm.barrier_exit``, unsaid).
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.sidecar_records import dropped_note, past_wall, remove_records

__all__ = ["ddp_counts", "MAX_PROBE_STEPS"]

MAX_PROBE_STEPS = 1000
"""Most steps one probe record may be the median of (assumed: the harness and ``Capture`` run
6; 1,000 rounds at the cold probe's 10 ms pause spin 10 s on every rank)."""


def _count(n: int) -> str:
    """A step count as a warning says it: whole up to 10^9, else its order (``about 10^18``)."""
    return f"{n:,}" if n < 10 ** 9 else f"about 10^{len(str(n)) - 1}"


def ddp_counts(p: Path, side, profiled: int) -> list[str]:
    """Drop (in place) the DDP records of ``side`` (a validated sidecar) whose counts or
    barrier releases pass their bounds (see the module docstring); ``profiled``: the profiled
    step records the file held. One warning per list that lost records."""
    ddp = side.ddp
    if ddp is None:
        return []
    return (_bucket_steps(p, ddp, profiled) + _probe_steps(p, ddp, "cold_probe")
            + _probe_steps(p, ddp, "barrier_probe") + _releases(p, ddp, side.steps))


def _bucket_steps(p: Path, ddp, profiled: int) -> list[str]:
    marks = ddp.bucket_cpu
    bad = [(i, b) for i, b in enumerate(marks) if b.steps > profiled]
    if not bad:
        return []
    i, b = bad[0]
    ddp.bucket_cpu = []
    rest = "" if len(bad) == len(marks) else \
        f"; {len(marks) - len(bad)} more with them, one sequence"
    return [dropped_note(p, "ddp.bucket_cpu", len(marks), len(marks),
                         f"ddp.bucket_cpu.{i}: steps {_count(b.steps)}, more than the file's "
                         f"{profiled} profiled step record(s), which a mark is summed over",
                         rest)]


def _probe_steps(p: Path, ddp, key: str) -> list[str]:
    why = {i: f"steps {_count(r.steps)}, more than {MAX_PROBE_STEPS:,} (a probe runs 6)"
           for i, r in enumerate(getattr(ddp, key)) if r.steps > MAX_PROBE_STEPS}
    return remove_records(p, ddp, key, why, "ddp.")


def _releases(p: Path, ddp, steps) -> list[str]:
    walls = [s.wall_us for s in steps]
    if not ddp.barrier_probe:
        return []
    if not walls:   # nothing to bound them by (1e11 µs was taken, on every rank alike)
        return remove_records(p, ddp, "barrier_probe", {
            i: f"barrier_us {r.barrier_us:g} µs, which no step record bounds (the file holds "
               "none)" for i, r in enumerate(ddp.barrier_probe)}, "ddp.")
    wall = max(walls)
    why = {i: (f"barrier_us {r.barrier_us:g} µs, past its wait_us of {r.wait_us:g} µs + 2 × "
               f"the longest step's wall_us of {wall:g} µs")
           for i, r in enumerate(ddp.barrier_probe)
           if past_wall(r.barrier_us, r.wait_us + 2 * wall)}
    return remove_records(p, ddp, "barrier_probe", why, "ddp.")
