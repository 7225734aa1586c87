"""Checks of a validated sidecar's fields against each other (:func:`calibration.sidecar.
load_sidecar` calls :func:`cross_check`): each field can be in range while two together cannot
be right. A batch record that cannot be right is dropped and counted, as one with a field out
of range; an instant that cannot be right is taken as not recorded; a file-level contradiction
refuses the file.

What the capture harness guarantees (:mod:`calibration.produce`, :mod:`calibration.capture`):
a batch's process CPU is at most its wall times the cores the process may run on
(``host_cores``, its CPU affinity, itself at most ``cpu_count``); a worker's id is below its
loader's ``num_workers``; ``iter_start_us`` is read before ``iter(loader)`` starts the workers,
so before any worker's first fetch and before the first step.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.sidecar_counts import ddp_counts
from stepsim.calibration.sidecar_records import (drop_overrunning_steps, dropped_note, past_wall,
                                                 remove_records)
from stepsim.simcore.errors import InputError

CPU_PAST_WALL = 10
"""A batch whose process CPU passes this many times its cores × its wall cannot be right (real
captures: at most 0.86 of cores × wall, over 9,273 batches on the machine of 2026-12-05; 50×
had set threads_per_worker to 50). Not 1: a worker's process holds threads besides the one
that produces (its queue's feeder thread)."""

def step_window(steps, profiled: bool = True) -> tuple[float, float] | None:
    """``(start, end)`` (µs, the sidecar's clock) of the timed step records among ``steps``
    (only the profiled ones unless ``profiled`` is False): the first one's start to the last
    one's start plus its wall (a loop runs its steps in turn, :func:`_steps`); None when none
    is timed."""
    timed = [s for s in steps if (s.profiled or not profiled) and s.t_start_us is not None]
    if not timed:
        return None
    return timed[0].t_start_us, timed[-1].t_start_us + timed[-1].wall_us


def _bad_batch(r, num_workers: int, cores: int | None) -> str | None:
    """Why a produce record cannot be right, or None."""
    if r.worker >= num_workers and r.worker >= 0:
        return f"worker {r.worker}, its loader has num_workers={num_workers}"
    if past_wall(r.cpu_us, r.wall_us):
        return f"thread CPU {r.cpu_us:g} µs past its wall_us of {r.wall_us:g} µs"
    if cores is not None and r.work_us > CPU_PAST_WALL * cores * r.wall_us:
        return (f"process CPU {r.work_us:g} µs past {CPU_PAST_WALL} × {cores} core(s) × its "
                f"wall_us of {r.wall_us:g} µs")
    if r.worker >= 0 and r.proc_cpu_us is not None and past_wall(r.cpu_us, r.proc_cpu_us):
        return (f"process CPU {r.proc_cpu_us:g} µs below its producing thread's "
                f"{r.cpu_us:g} µs (the process holds the thread)")
    return None


def _drop(p: Path, owner, num_workers: int, cores: int | None, where: str) -> list[str]:
    why = {i: w for i, r in enumerate(owner.produce)
           if (w := _bad_batch(r, num_workers, cores)) is not None}
    return remove_records(p, owner, "produce", why, where)


def cross_check(p: Path, side, given: int | None = None) -> list[str]:
    """Check ``side`` (a validated :class:`calibration.sidecar.Sidecar`, changed in place);
    return a warning per thing dropped or ignored (the DDP records' counts and barrier
    releases: :mod:`calibration.sidecar_counts`). ``given``: the ``produce`` records the file
    held before those that cannot be right were dropped (None: as many as are left).

    Raises:
        InputError: ``host_cores`` above ``cpu_count``; a step whose thread CPU passes its
            wall; batches that leave workers idle where a loader cannot
            (:func:`_round_robin`).
    """
    if side.host_cores is not None and side.cpu_count is not None \
            and side.host_cores > side.cpu_count:
        raise InputError(p, f"bad sidecar field host_cores: {side.host_cores} usable cores "
                            f"on a machine of cpu_count {side.cpu_count}")
    cores = side.host_cores or side.cpu_count
    profiled = sum(1 for s in side.steps if s.profiled)   # the file's, before any is dropped
    _steps(p, side.steps, "")
    notes = drop_overrunning_steps(p, side)
    notes += _drop(p, side, side.loader.num_workers, cores, "")
    notes += _overlapping(p, side, "")
    _round_robin(p, side, len(side.produce) if given is None else given)
    if side.probe is not None:
        _steps(p, side.probe.steps, "probe.")
        notes += drop_overrunning_steps(p, side.probe, "probe.")
        notes += _drop(p, side.probe, side.probe.num_workers, cores, "probe.")
        notes += _overlapping(p, side.probe, "probe.")
        notes += _probe_after_steps(p, side)
    notes += _whole_dataset(p, side)
    notes += _iter_start(p, side)
    notes += ddp_counts(p, side, profiled)   # (before the marks' CPU bound, which steps scale)
    notes += _ddp_threads(p, side)
    notes += _cold_probe(p, side)
    notes += _bucket_cpu(p, side, cores)
    return notes


def _ddp_threads(p: Path, side) -> list[str]:
    """Drop (in place) a backend thread whose CPU over the profiled steps passes their span
    (one thread runs on one core at a time; real gloo threads held at most 0.23 of it, over
    1,368 records of 2026-12-04/05): 1e308 µs on one thread gave an infinite CPU per MiB and
    refused the job."""
    threads = side.ddp.threads if side.ddp is not None else []
    window = step_window(side.steps)
    if not threads or window is None:
        return []
    span = window[1] - window[0]
    why = {i: f"{t.name or t.tid} CPU {t.cpu_us:g} µs past the profiled steps' span of "
              f"{span:g} µs" for i, t in enumerate(threads) if past_wall(t.cpu_us, span)}
    return remove_records(p, side.ddp, "threads", why, "ddp.")


def _cold_probe(p: Path, side) -> list[str]:
    """Drop (in place) a cold-resume probe record (``ddp.cold_probe``) whose backward's or
    optimizer's CPU, after the pause or without it, passes the longest wall of the loop's
    step records: the probe's steps are steps of the same loop
    (:func:`demo.ddp_job.cold_probe`), and one thread's CPU over a part of a step cannot pass
    the step's wall. A cold backward refetches
    data every step fetches; the probe measured it 0.04-0.33 over the hot one, 1.1-1.4 ms
    against step walls of 6-9 ms (2026-12-06), so the bound holds it with room (inferred).
    A cold CPU of 1e11 µs (28 h) calibrated silently into a share of 8.5e7, and a 20 ms
    straggler what-if predicted a 3.8-day step."""
    probe = side.ddp.cold_probe if side.ddp is not None else []
    walls = [s.wall_us for s in side.steps]
    if not probe or not walls:
        return []
    wall = max(walls)
    why = {}
    for i, c in enumerate(probe):
        for name in ("hot_cpu_us", "cold_cpu_us", "hot_opt_cpu_us", "cold_opt_cpu_us"):
            if getattr(c, name) is not None and past_wall(getattr(c, name), wall):
                why[i] = (f"{name} {getattr(c, name):g} µs past the longest step's wall_us "
                          f"of {wall:g} µs (a backward or optimizer is part of a step)")
                break
    return remove_records(p, side.ddp, "cold_probe", why, "ddp.")


def _bucket_cpu(p: Path, side, cores: int | None) -> list[str]:
    """Drop (in place) the bucket marks (``ddp.bucket_cpu``) where one's backend CPU passes
    what the host's ``cores`` could run in its ``steps`` steps: each mark's interval lies in a
    step, so its threads' CPU is at most steps x the longest step wall x cores (with the
    clocks' slack). The marks are one sequence (bucket k's interval ends at bucket k+1's
    readiness; :mod:`calibration.gloo_preempt` reads all but the last), so all are dropped and
    the job is calibrated as one without marks. A mark of 1e12 µs over 4 steps of 20 ms on 2
    cores calibrated with exit 0, half of each backward taken out as preemption."""
    marks = side.ddp.bucket_cpu if side.ddp is not None else []
    walls = [s.wall_us for s in side.steps]
    if not marks or not walls or not cores:
        return []
    wall = max(walls)
    bad = [(i, b) for i, b in enumerate(marks) if past_wall(b.cpu_us, b.steps * wall * cores)]
    if not bad:
        return []
    i, b = bad[0]
    side.ddp.bucket_cpu = []
    rest = "" if len(bad) == len(marks) else \
        f"; {len(marks) - len(bad)} more with them, one sequence"
    return [dropped_note(p, "ddp.bucket_cpu", len(marks), len(marks), f"ddp.bucket_cpu.{i}: "
                         f"CPU {b.cpu_us:g} µs past {b.steps} step(s) x the longest step's "
                         f"wall_us of {wall:g} µs x {cores} core(s)", rest)]


def _steps(p: Path, steps, where: str) -> None:
    """Refuse a step record whose main thread's CPU passes its wall, in the step or in its
    ``next()``; a step record is not dropped here: its place is its step's number (one out of
    its place in time, a copy, or one whose wall runs into the next step is, its number kept
    where it has one: :func:`calibration.sidecar_records.drop_overrunning_steps`; real
    captures: each starts at least 10 µs after the one before ended, over 26,000 pairs)."""
    for i, s in enumerate(steps):
        for cpu, wall in (("cpu_us", "wall_us"), ("next_cpu_us", "next_wall_us")):
            if past_wall(getattr(s, cpu), getattr(s, wall)):
                raise InputError(p, f"bad sidecar record {where}steps.{i}: {cpu} "
                                    f"{getattr(s, cpu):g} µs past its {wall} of "
                                    f"{getattr(s, wall):g} µs (one thread cannot run longer "
                                    "than its wall time)")


def _probe_after_steps(p: Path, side) -> list[str]:
    """Drop (in place) a probe whose first step starts before its run's last step ends: the
    probe's loader is made after the run's own steps (:meth:`calibration.capture.Capture.
    steps`), so it is another run's probe copied in, or from another clock, and fitting it
    against this run's steps reads two processes' speeds as co-run interference (break20: r1's
    probe in r3's sidecar pooled as a fourth run, interference 0.070 where the three real
    runs gave 0.047). Real captures: each probe started 0.26–0.31 s after its run's last step
    ended (10 runs of 2026-12-07); none of 36 kept sidecars with a probe started earlier."""
    steps = step_window(side.steps, profiled=False)
    probe = step_window(side.probe.steps, profiled=False)
    if steps is None or probe is None or probe[0] >= steps[1]:
        return []
    side.probe = None
    return [f"{p.name}: dropped its probe, which cannot be right: its first step starts "
            f"{(steps[1] - probe[0]) / 1e3:.1f} ms before the run's last step ends (a probe "
            "follows its run's steps: another run's probe?)"]


def _iter_start(p: Path, side) -> list[str]:
    """``iter_start_us`` after the first step's start or a worker's first fetch: taken as
    not recorded (the workers' start-up is then assumed, not measured 0)."""
    t = side.iter_start_us
    if t is None:
        return []
    later = [(s.t_start_us, "the first step's start") for s in side.steps[:1]
             if s.t_start_us is not None]
    later += [(r.t_end_us - r.wall_us, f"worker {r.worker}'s first fetch")
              for r in side.produce if r.worker >= 0 and r.t_end_us is not None]
    if not later:
        return []
    first, what = min(later)
    if t <= first:
        return []
    side.iter_start_us = None
    return [f"{p.name}: ignored iter_start_us, which cannot be right ({(t - first) / 1e3:.1f} "
            f"ms after {what}), taken as not recorded"]


OVERLAP_SHARE = 0.5
"""The share of a batch's wall time that may lie before the end of the batch before it from
the same process: more than half of it made while its maker made another is a copied record
or another worker's batch under its id; less may be a wall time edited in place (a slower run
modelled as longer walls at the same instants), which the fits take as it is."""


def _overlapping(p: Path, owner, where: str) -> list[str]:
    """Drop (in place) each batch of which more than :data:`OVERLAP_SHARE` lies before the end
    of the one before it from the same producer (worker id and process): a worker's fetch
    loop, or the main thread's ``next()``, makes one batch at a time (:mod:`calibration.
    produce`), so two at once cannot be right. The first of an overlapping pair is kept;
    records without ``t_end_us`` are not checked."""
    last: dict[tuple[int, int], float] = {}
    why: dict[int, str] = {}
    timed = sorted((r.t_end_us - r.wall_us, i) for i, r in enumerate(owner.produce)
                   if r.t_end_us is not None)
    for start, i in timed:
        r = owner.produce[i]
        key = (r.worker, r.pid)
        if key in last and last[key] - start > OVERLAP_SHARE * r.wall_us:
            why[i] = (f"worker {r.worker} (pid {r.pid}) makes it while it makes another; one "
                      "process makes one batch at a time")
        else:
            last[key] = r.t_end_us
    return remove_records(p, owner, "produce", why, where)


def _round_robin(p: Path, side, given: int) -> None:
    """Refuse the batches of a map-style loader (a dataset length) that come from fewer of its
    ``num_workers`` workers than its round robin allows. ``DataLoader``'s iterator hands batch
    ``k`` of an epoch to worker ``k mod num_workers`` (``_worker_queue_idx_cycle``), and at
    ``iter()`` sends ``prefetch_factor`` batches to each, so once an epoch holds
    ``num_workers`` batches and twice as many were made, every worker made some. Only the
    records dropped as ones that cannot be right may account for a missing worker. An
    iterable dataset without a length may leave workers idle: not checked. An epoch is counted
    short (whole batches of the rank's share of a DDP job's dataset)."""
    ld = side.loader
    nw, n, bs = ld.num_workers, ld.dataset_len, ld.batch_size
    if nw < 2 or not n or not bs:
        return
    # a rank of a DDP job samples its share of the dataset (DistributedSampler): the least
    # whole batches an epoch may hold, so a short epoch never counts as a long one
    per_epoch = n // (side.ddp.world_size if side.ddp is not None else 1) // bs
    recs = [r for r in side.produce if r.worker >= 0]
    seen = sorted({r.worker for r in recs})
    missing = nw - len(seen)
    if per_epoch < nw or len(recs) < 2 * nw or missing <= given - len(side.produce):
        return
    ids = ", ".join(map(str, seen[:8])) + (", …" if len(seen) > 8 else "")
    raise InputError(p, f"bad sidecar: its {len(recs)} worker batches come from {len(seen)} "
                        f"worker(s) ({ids}) of the loader's num_workers={nw}, whose "
                        f"{per_epoch} batches an epoch go round robin to every worker (a map-"
                        "style DataLoader): the batches or num_workers cannot be right")


def _whole_dataset(p: Path, side) -> list[str]:
    """A ``batch_size`` (the loader's or the probe's) above the dataset's length: each batch is
    the whole dataset (``BatchSampler`` yields what the sampler holds), so its samples are
    ``dataset_len``, taken as the batch size (changed in place) and said; with ``drop_last``
    no batch is made, so no step ran: refused. A probe at 10^12 samples was fitted as a
    3e10x batch before."""
    n, notes = side.loader.dataset_len, []
    if not n:
        return []
    owners = [(side.loader, "loader.batch_size")]
    if side.probe is not None and side.probe.batch_size is not None:
        owners.append((side.probe, "probe.batch_size"))
    for owner, name in owners:
        bs = owner.batch_size
        if bs is None or bs <= n:
            continue
        if side.loader.drop_last:
            raise InputError(p, f"bad sidecar field {name}: {bs} samples with drop_last on a "
                                f"dataset of {n} (loader.dataset_len) make no batch at all")
        owner.batch_size = n
        notes.append(f"{p.name}: {name} {bs} is above the dataset's {n} samples "
                     f"(loader.dataset_len): each batch is the whole dataset, taken as {n}")
    return notes
