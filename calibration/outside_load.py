"""Outside load on a CPU capture: whether other processes held the cores the run's own threads
were waiting for while it was captured, read from the sidecar's own measurements.

While ``R`` of the run's own threads are runnable on a host of ``c`` cores, they can hold at
most ``min(c, R)`` cores between them, and on a machine that runs nothing else they hold that
many: a runnable thread gets a core whenever one is free, and the run's threads take turns
only with each other. Over the captured window, then,

    held = Σ CPU time of the run's busy intervals ÷ ∫ min(c, R(t)) dt      (µs ÷ µs)

is 1 on a quiet machine, whatever the setting (more workers than cores included: they share
the cores, and the cores stay busy). ``L`` other runnable threads sharing the cores fairly
hold it to ``R / (R + L)`` when ``R ≥ c`` and to ``c / (R + L)`` when ``R < c < R + L`` (with
the scheduler's fair share per thread; per session group, as Linux's autogroup shares, it
falls further), so
a capture whose threads held less than ``1 / (1 + LOAD_WARN)`` of it ran at least
``LOAD_WARN`` slower than the same run alone. Its times are those of a loaded machine, which
calibration takes as the host's speed (and, where the run had more threads than cores,
divides by the run's own contention only), so its replay and every what-if are off by the
load, which no model parameter holds.

Measured here (2 shared cores; demo CNN at 2 workers and the tests' fixture at 2, one thread
each, so calibrated on CPU time): a capture's replay ÷ its measured step followed ``held``,
0.858 / 0.854, 0.358 / 0.350, 0.325 / 0.314, 0.250 / 0.246, 0.238 / 0.238, 0.480 / 0.468; on 2
intra-op threads the replay fell further (0.107 / 0.199, 0.214 / 0.310, 0.381 / 0.490: the
team's stall is inverted as ``s^T``); quiet captures held 0.997 and 0.998.

The busy intervals are each batch (``t_end_us − wall_us .. t_end_us``, the worker process's
CPU time, on ``threads_per_worker`` threads; at ``num_workers=0`` on the main thread), each
training step outside ``next()`` (the main process's CPU time, on torch's intra-op threads:
the team spins at its barriers, so its threads stay runnable, as
:func:`calibration.cpu.stalled_team_wall` takes them; a step with a long serial part on
several threads reads as slightly loaded, e.g. 0.95 for the demo's CNN on 2 threads alone)
and, with workers, the main thread's own work inside ``next()`` (unpickling the batch) and each
worker's between its batches (its queue's feeder thread pickling the last one: 1-2 ms of CPU
a batch in the demo, 2-3 % of the cores at 8 workers). Each
counts its threads as runnable for the share of its wall time they ran or waited on the run
queue, ``(cpu_us + run_wait_us) / wall_us`` (the sidecar's ``run_wait_us``, from the kernel's
``schedstat``); the rest they blocked (I/O, a queue, a sync), which holds no core. Sidecars
written before ``run_wait_us`` count a batch or a step runnable throughout (``next()`` for its
CPU time only) and leave out a step whose main thread blocked (more voluntary context switches
than involuntary ones). A thread that ran was runnable while it ran, so an interval counts at
least its CPU over its wall as runnable threads: a step's process CPU holds threads the
training thread's share leaves out (a DDP rank's gloo worker and TCP threads, which run the
all-reduce while the training thread blocks), and counted otherwise a 2-rank gloo job at
0 workers held 1.072, past 1 (fresh12's nw0_a; now 0.980, and its other run, beside other
processes on 24.5 % of the cores by ``/proc/stat``, 0.939 where it read 0.998; tidy23). With
the run's threads within the cores the share is then at most 1 by construction; past them,
each interval's CPU spread evenly over its wall can read a hair over 1 (12 of 384 kept demo
runs' windows, at most 1.019, against 55 before; none over its scored steps). Only the parts
inside the profiled window count, each interval's CPU time pro rata: a batch that began before
the window ran beside a training step that is not counted, and counted whole it read the
demo's quiet 2-core machine as loaded (held 0.82-0.92 at 2-8 workers; counted as now,
0.92-0.99, where ``/proc/stat`` gave the run 0.97-1.00 of the CPU time used; the batches' and
steps' wall time was their CPU plus run-queue wait within 1 %, so they did not block;
2026-12-04, load average 1.1-1.9).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stepsim.calibration.sidecar import Sidecar
from stepsim.calibration.sidecar_cross import step_window
from stepsim.models.load_bound import LOAD_WARN



@dataclass(frozen=True)
class OutsideLoad:
    """What the capture's busy intervals say about the cores they held.

    Attributes:
        held: CPU time ÷ the core time the run's runnable threads could have held (1: quiet).
        cpu_us / could_us: the two sides of ``held`` (µs).
        mean_threads: the run's runnable threads, averaged over the time any was busy.
        batches / steps: the busy intervals counted.
        cores: the host's usable cores.
        where: the span read, in words.
    """

    held: float
    cpu_us: float
    could_us: float
    mean_threads: float
    batches: int
    steps: int
    cores: int
    where: str = "its profiled window"

    @property
    def slowdown(self) -> float:
        """How much slower the run's threads advanced than alone (``1 / held − 1``)."""
        return 1 / self.held - 1 if self.held > 0 else float("inf")

    def warning(self, team: int = 1, inverted: bool = True) -> str | None:
        """The calibration warning (what was seen, what to do), or None below the bound.
        ``team``: the training step's intra-op threads where calibration inverted their stall
        as ``wall × s^team`` (:func:`calibration.cpu.stalled_team_wall`), else 1: the load
        lowers each thread's share ``s`` too, so the replay can be off by up to
        ``1 / held^team`` (a user's CNN on 2 threads, held 0.46, 2026-12-05: replay −77 %, 1 /
        0.23 = 4.3x, where the warning had said 2.2x); ``inverted`` False: a team calibration
        did not invert (the run's threads within the cores), see :func:`load_bound_phrase`."""
        if self.slowdown <= LOAD_WARN:
            return None
        return (f"the capture ran under outside load: its own runnable threads held "
                f"{100 * self.held:.0f} % of the core time they could have held "
                f"({self.cpu_us / 1e3:.0f} ms of CPU against {self.could_us / 1e3:.0f} ms of "
                f"min({self.cores} cores, their {self.mean_threads:.1f} runnable threads on "
                f"average) over {self.batches} batches and {self.steps} steps); other processes "
                f"held the rest, so its threads advanced {1 / self.held:.1f}x slower than alone, "
                f"and the replay and every what-if of this capture can be off by "
                f"{load_bound_phrase(self.held, team, inverted)}: no model parameter holds the "
                "load; "
                "re-capture on a quiet machine (nothing else running) and calibrate from that")


def load_bound_phrase(held: float, team: int, inverted: bool = True) -> str:
    """How far a capture whose threads held ``held`` of their cores can put its model off:
    ``as much`` (``1 / held``) on one intra-op thread; with a ``team`` whose stall calibration
    inverted as ``wall × s^team`` (``inverted``: the run's own threads were more than the
    cores), up to ``1 / held^team``, each thread's share ``s`` lowered by the load too (the
    module docstring's 2-thread captures replayed 0.107-0.381 of their step at held
    0.199-0.490); with a team calibration did not invert, about ``1 / held^team``: its
    threads spin at their barriers while the load holds a core, which stretches the captured
    step itself (a user's 2-thread CNN at ``num_workers=0``, 2026-12-05: three captures held
    31, 51, 53 % and their profiled steps took 16.6, 9.0, 6.8x a calm capture's, where
    ``1 / held^2`` gives 10.4, 3.8, 3.6x and ``1 / held`` 3.2, 2.0, 1.9x)."""
    if team <= 1 or held <= 0:
        return "as much"
    if not inverted:
        return (f"as much or more, about {1 / held ** team:.1f}x or more (its training step "
                f"on {team} intra-op threads spins at their barriers while the load holds a "
                f"core, its pace each thread's share s of a core to the power {team})")
    return (f"as much or more, up to {1 / held ** team:.1f}x (its training step on {team} "
            f"intra-op threads is calibrated as its wall × s^{team}, s each thread's share of "
            "a core, which the load lowered too)")


def load_note(load: OutsideLoad, team: int = 1) -> str:
    """The warning for a re-measured run under outside load (past :data:`LOAD_WARN`): its
    steps are slower than the machine alone, and a ledger scores its record apart when it ran
    slower than predicted (``scenarios.ledger_record.LedgerRecord.load_explains``), which this
    note, written before the prediction, states as the rule: it said "kept out of the ledger's
    score" of a run faster than predicted, which validate's footer (rightly) said a ledger
    keeps (fresh11, 2026-12-07). ``team``: the run's intra-op threads, which spin at their barriers while
    the load holds a core, so the run is about ``1 / held^team`` slower, as
    :func:`load_bound_phrase` bounds a capture's (a user's 2-thread CNN, 4 runs of 2026-12-05
    held 35–55 %: 4.6, 7.0, 5.3, 7.8x their prediction, where ``1 / held^2`` gives 3.3, 8.2,
    4.5, 7.7x and ``1 / held`` had said 1.8–2.8x)."""
    return (f"this re-measured run ran under outside load: its own threads held "
            f"{100 * load.held:.0f} % of the core time they could have held over "
            f"{load.where}, so it ran about {1 / load.held:.1f}x slower than the machine alone"
            + ("" if team <= 1 or load.held <= 0 else
               f", or more, about {1 / load.held ** team:.1f}x (1 / held^{team}) on its {team} "
               "intra-op threads"
               " (they spin at their barriers while the load holds a core)")
            + "; re-measure on a quiet machine (an error slower than predicted is the load's "
            "as much as the prediction's, and a ledger scores such a record apart; one faster "
            "than predicted the load cannot explain, and stays in the score)")


def runnable_share(cpu_us: float, run_wait_us: float | None, wall_us: float) -> float:
    """The share of a thread's interval it was runnable: its CPU time plus its run-queue wait
    over the interval's wall time (µs ÷ µs, at most 1; the rest it blocked); 1 where the wait
    was not recorded (sidecars before it was)."""
    if run_wait_us is None:
        return 1.0
    return min(max((cpu_us + run_wait_us) / wall_us, 0.0), 1.0)


BATCH, STEP, NEXT, GAP = 0, 1, 2, 3
"""The kinds of :func:`busy_spans`' rows: a batch, a training step outside ``next()``, the
main thread's work in ``next()``, a worker's work between its batches."""


def busy_spans(side: Sidecar, num_workers: int, threads_per_worker: int,
               torch_threads: int) -> np.ndarray:
    """The run's busy intervals as rows of (start µs, end µs, runnable threads, CPU µs, kind),
    see the module docstring."""
    spans: list[tuple[float, float, float, float, int]] = []
    batches = [r for r in side.produce if r.t_end_us is not None and r.wall_us > 0
               and (r.worker < 0) == (num_workers == 0)]
    for r in batches:
        thr = threads_per_worker if r.worker >= 0 else 1
        spans.append((r.t_end_us - r.wall_us, r.t_end_us,
                      thr * runnable_share(r.cpu_us, r.run_wait_us, r.wall_us), r.work_us, BATCH))
        if r.worker >= 0 and r.gap_cpu_us is not None and r.gap_wall_us:
            start = r.t_end_us - r.wall_us
            spans.append((start - r.gap_wall_us, start,
                          (r.gap_cpu_us + (r.gap_run_wait_us or 0.0)) / r.gap_wall_us,
                          r.gap_cpu_us, GAP))
    steps = [s for s in side.steps if s.t_start_us is not None and s.wall_us > s.next_wall_us
             and (s.run_wait_us is not None or (s.vcsw or 0) <= (s.ivcsw or 0))]
    for s in steps:
        a, b = s.t_start_us + s.next_wall_us, s.t_start_us + s.wall_us
        if b <= a:      # shorter than the instant's spacing: nothing to weigh
            continue
        share = runnable_share(s.cpu_us - s.next_cpu_us, s.run_wait_us, b - a)
        spans.append((a, b, max(torch_threads, 1) * share, s.compute_cpu_us, STEP))
    if num_workers > 0:      # the main thread's own work in next() (unpickling the batch)
        for s in side.steps:
            if s.t_start_us is not None and s.next_wall_us > 0:
                cpu = s.next_proc_cpu_us if s.next_proc_cpu_us is not None else s.next_cpu_us
                wait = s.next_run_wait_us or 0.0
                spans.append((s.t_start_us, s.t_start_us + s.next_wall_us,
                              min((s.next_cpu_us + wait) / s.next_wall_us, 1.0), cpu, NEXT))
    a = np.array(spans, dtype=float).reshape(-1, 5)
    # a thread that ran was runnable while it ran: an interval's runnable threads are at least
    # its CPU over its wall (the CPU past them was the threads' its count leaves out, e.g. a
    # DDP rank's gloo threads running the all-reduce while its training thread blocks)
    wall = a[:, 1] - a[:, 0]
    a[:, 2] = np.maximum(a[:, 2], np.divide(a[:, 3], wall, out=np.zeros(len(a)), where=wall > 0))
    return a


def worker_cpu_us(side: Sidecar) -> float:
    """The DataLoader workers' CPU µs inside the sidecar's profiled steps (their batches and
    their work between batches, each interval pro rata, as :func:`outside_load` counts them):
    the part of the run's own CPU its ``machine`` record leaves out, whose ``proc_cpu_us`` is
    the main process's (``time.process_time``), not its worker processes'. A user's run at 2
    workers (2026-12-05, held 96 %) read other processes busy 26 % of the cores over its
    window, its own workers' batches. 0 without workers or the window's instants."""
    span = step_window(side.steps)
    nw = side.loader.num_workers
    if span is None or nw == 0:
        return 0.0
    a = busy_spans(side, nw, 1, 1)
    a = cut_to_span(a[(a[:, 4] == BATCH) | (a[:, 4] == GAP)], *span)
    return float(a[:, 3].sum())


def cut_to_span(a: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The rows of :func:`busy_spans` ``a`` that overlap ``[lo, hi]`` (µs), cut to it, each
    one's CPU time pro rata to the part of its wall inside."""
    wall = a[:, 1] - a[:, 0]
    start, end = np.maximum(a[:, 0], lo), np.minimum(a[:, 1], hi)
    inside = (end > start) & (wall > 0)
    a = a[inside]
    share = (end - start)[inside] / wall[inside]
    a[:, 0], a[:, 1], a[:, 3] = start[inside], end[inside], a[:, 3] * share
    return a


def outside_load(side: Sidecar, num_workers: int, threads_per_worker: int,
                 torch_threads: int, steps: list | None = None) -> OutsideLoad | None:
    """The capture's :class:`OutsideLoad` over its profiled window (see the module docstring),
    or over the span of ``steps`` (consecutive step records) when given; None when the sidecar
    lacks the instants, the cores, any batch (its producers' work would read as outside load)
    or any unblocked busy interval."""
    cores = side.host_cores
    span = step_window(side.steps) if steps is None else step_window(steps, profiled=False)
    if not cores or span is None:
        return None
    lo, hi = span
    a = busy_spans(side, num_workers, threads_per_worker, torch_threads)
    if not a.size or not (a[:, 4] == BATCH).any():
        return None   # no batch recorded (or every one dropped): the producers' work unseen
    return held_over(cut_to_span(a, lo, hi), cores)   # each interval's part inside, CPU pro rata


def held_over(a: np.ndarray, cores: int) -> OutsideLoad | None:
    """The :class:`OutsideLoad` of busy intervals ``a`` (rows of :func:`busy_spans`, already
    cut to the span read) on ``cores`` cores: their CPU over ``∫ min(cores, R(t)) dt``, ``R``
    their runnable threads summed (several processes' rows together count as one run: a DDP
    job's ranks on one host, :mod:`calibration.job_load`); None without any."""
    if not a.size:
        return None
    # sweep: the runnable threads between consecutive instants
    t = np.concatenate([a[:, 0], a[:, 1]])
    order = np.argsort(t, kind="stable")
    runnable = np.cumsum(np.concatenate([a[:, 2], -a[:, 2]])[order])[:-1]
    dt = np.diff(t[order])
    runnable = np.maximum(runnable, 0.0)          # rounding of the running sum
    busy = (runnable > 1e-9) & (dt > 0)
    could = float((np.minimum(runnable, cores) * dt).sum())
    if could <= 0:
        return None
    cpu = float(a[:, 3].sum())
    held = cpu / could
    mean_r = float((runnable * dt)[busy].sum() / dt[busy].sum())
    return OutsideLoad(held, cpu, could, mean_r, int((a[:, 4] == BATCH).sum()),
                       int((a[:, 4] == STEP).sum()), cores)


def speed_change(sidecars: dict, warnings: list[str]) -> float | None:
    """How much of the machine a multi-rank CPU capture's identical steps had, against its
    quickest ones, read from each rank's sidecar (``steps``: the main thread's CPU time per
    profiled step): ``p10 / mean`` of the rank whose profiled steps' mean CPU is the furthest
    above their 10th percentile (kept as ``meta.notes.outside_load_held``, so every what-if of
    the model repeats the warning); None without three such steps. A warning is appended when
    the slowdown ``mean / p10 − 1`` passes :data:`LOAD_WARN`.

    A DDP rank's main thread blocks every step (it waits for the all-reduces), so the cores it
    could have held are not known and :func:`outside_load` does not apply; but every step does
    the same work, so its CPU time is the same on a steady machine (the DDP demo's quiet
    captures: mean over the 10th percentile 1.02-1.08). Other work on the machine raises it
    (shared caches and memory bandwidth, a hypervisor's other guests): in a capture made while
    other work ran, the last 10 of 20 steps took 39-41 ms of CPU against 16-17 ms before, and
    every prediction from it came out 8-61 % slow. Load that held through the whole window does
    not show here (its quickest steps are loaded too).

    The job's own threads raise it too: where every rank's sidecar reads the machine
    (``machine``) and other processes were busy on at most ``LOAD_WARN`` of its cores, the
    spread is the job's, said so in a warning, and None is returned (no outside load kept).
    Measured (2026-12-06 07:54, a user's 2-rank gloo job on 2 cores, torch's default 2
    intra-op threads a rank): rank 0's profiled steps 89-614 ms of main-thread CPU, mean +177 %
    over the 10th percentile, with others busy on 2.7 % of the cores; its replicate 1.6 %.
    """
    worst = None
    for r, side in sidecars.items():
        cpu = [s.cpu_us for s in getattr(side, "steps", None) or []
               if s.profiled and s.cpu_us and s.cpu_us > 0]
        if len(cpu) < 3:
            continue
        p10, mean = float(np.percentile(cpu, 10)), float(np.mean(cpu))
        if worst is None or mean / p10 > worst[2] / worst[1]:
            worst = (r, p10, mean)
    if worst is None:
        return None
    r, p10, mean = worst
    others = _others_busy(sidecars)
    if mean / p10 - 1 > LOAD_WARN and others is not None and others <= LOAD_WARN:
        # which threads contend: a 1-thread-a-rank job has no intra-op team (fresh14)
        team = max((getattr(s, "torch_num_threads", None) or 1 for s in sidecars.values()))
        who = (f"every rank's {team} intra-op threads on cores the ranks share" if team > 1 else
               "the ranks' training threads beside their DataLoader workers and gloo's threads")
        warnings.append(
            f"rank {r}'s identical steps took {mean / 1e3:.1f} ms of main-thread CPU on "
            f"average against {p10 / 1e3:.1f} ms for its quickest tenth "
            f"({mean / p10 - 1:+.0%}), while other processes were busy on "
            f"{100 * others:.0f} % of the machine's cores (the sidecars' /proc/stat "
            "readings): the spread is the job's own (its threads contending for the cores, "
            f"e.g. {who}), not outside load, and the model draws it as measured")
        return None
    if mean / p10 - 1 > LOAD_WARN:
        warnings.append(
            f"the capture ran under outside load: rank {r}'s identical steps took "
            f"{mean / 1e3:.1f} ms of main-thread CPU on average against {p10 / 1e3:.1f} ms for "
            f"its quickest tenth ({mean / p10 - 1:+.0%}): other work slowed the machine during "
            "the capture, and the replay and every what-if of it can be off by as much (no "
            "model parameter holds the load); re-capture on a quiet machine and calibrate "
            "from that")
    return p10 / mean


def _others_busy(sidecars: dict) -> float | None:
    """The share of the machine's cores other processes were busy over a multi-rank
    capture's profiled steps, from every rank's ``machine`` record
    (:func:`calibration.machine_stat.run_busy_share`); None where a rank lacks it."""
    from stepsim.calibration.machine_stat import run_busy_share

    sides = list(sidecars.values())
    if not sides or any(getattr(s, "machine", None) is None for s in sides):
        return None
    return run_busy_share([(s.host_name, s.machine, worker_cpu_us(s)) for s in sides])


def core_share(run: list) -> float | None:
    """A run's processes' CPU over their wall time across their profiled steps (the cores
    they held), over all its ranks."""
    st = [s for side in run for s in getattr(side, "steps", None) or []
          if s.profiled and s.proc_cpu_us is not None and s.wall_us > 0]
    wall = sum(s.wall_us for s in st)
    return sum(s.proc_cpu_us for s in st) / wall if st and wall > 0 else None


def share_against_replicates(runs: list[list], warnings: list[str]) -> float | None:
    """How much of the cores a multi-rank CPU capture's processes held against the same
    setting's replicates (``runs``: the capture's rank sidecars, then each replicate's): its
    ranks' process CPU over the wall of their profiled steps, ÷ the replicates' median, at
    most 1 (None without a replicate or the CPU times). A warning is appended past
    :data:`LOAD_WARN`.

    The same job at the same setting keeps the same share of the host's cores from run to run
    (the DDP demo's runs: 0.81-0.91 of a core per rank in 24 of 28; the other four, 0.52-0.77,
    beside other work), so
    a capture that held less than its replicates waited for cores that other processes held:
    one whose steps took 40 ms against 23-27 ms with the same CPU time held 0.52 against
    0.86-0.89, and every prediction from it came out 13-38 % slow. :func:`speed_change` does
    not see that load (the steps' CPU time did not change), nor this check load that held
    through every run.
    """
    shares = [core_share(run) for run in runs]
    if len(shares) < 2 or any(v is None for v in shares):
        return None
    ref = float(np.median(shares[1:]))
    held = min(shares[0] / ref, 1.0)
    if 1 / held - 1 > LOAD_WARN:
        warnings.append(
            f"the capture ran under outside load: its ranks' processes held {shares[0]:.2f} "
            f"of a core each over their profiled steps against {ref:.2f} in the replicates of "
            f"the same setting (median), so other processes held the cores they waited for "
            f"(they ran {1 / held:.1f}x slower than the same work could), and the replay and "
            "every what-if of it can be off by as much (no model parameter holds the load); "
            "re-capture on a quiet machine and calibrate from that")
    return held
