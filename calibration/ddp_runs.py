"""Which of a DDP job's profiled runs of one setting (a capture and its replicates) to
calibrate from: the ones that ran without outside load, read from their own sidecars.

Every profiled run of the calibration setting is the same work, so a run that is off the
others is off for a reason outside the job. Two readings, each against the **median of the
runs** (the runs themselves are the reference: no stated speed), each past
:data:`models.load_bound.LOAD_WARN`, the tolerance every outside-load check takes:

* **cores** (:func:`calibration.outside_load.core_share`): the run's processes' CPU over the
  wall of their profiled steps. The same job keeps the same share from run to run (0.82-0.90
  in the DDP demo's quiet runs); a run that held less waited for cores other processes held,
  its wall stretched while its CPU time did not, so the host's speed from CPU time cannot
  correct it: captures at 0.50-0.61 against their replicates' 0.83-0.89 (2026-12-05 09:45,
  10:04, 10:09) predicted every row 7-93 % slow.
* **speed** (:func:`calibration.job_runs.job_speeds`): the CPU time of identical work on
  the unprofiled steps. Work that slows the host without taking its cores (caches, memory
  bandwidth, a hypervisor's other guests) raises it: at 11:02 one replicate's training step
  took 18-20 ms of CPU against 12-13 ms in the three other runs (1.535× the capture), and
  the host's speed centre moved 1.036 → 1.143, every what-if 10 % slower than its runs.

A third reading needs no median (when most runs are loaded, the median is): the harness
reads the whole machine's busy CPU (``/proc/stat``) over each run's profiled steps into its
sidecars (``machine``, :mod:`calibration.machine_stat`), and what its own processes did not
use, other processes did (:func:`calibration.machine_stat.run_busy_share`); past
``LOAD_WARN`` of
the cores' time the run is loaded (at 11:59, 2 of 3 repeats of every setting and all three
replicates held 0.46-0.52 of a core against the capture's 0.85, so the medians were loaded).

A run past any is left out of the calibration (:func:`pick_runs`): the first quiet run is
the capture, the other quiet ones its replicates; the re-measured runs are not touched (each
row scores every repeat). ``stepsim calibrate RANK_FOLDER --replicate R …`` (and
:func:`stepsim.fit.calibrate`) picks so on a CPU DDP job, with a warning per run left out
(:func:`pick_warnings`), as the demo does. With no quiet run, or no reading, every run is
kept and the output says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.models.load_bound import LOAD_WARN


@dataclass
class RunPick:
    """The runs to calibrate from and the ones left out (``left_out``: path and why)."""

    capture: Path
    replicates: list[Path]
    left_out: list[tuple[Path, str]] = field(default_factory=list)
    shares: list[float | None] = field(default_factory=list)
    """Per run (in the order given): its processes' CPU over the wall of its profiled steps."""
    speeds: list[float] = field(default_factory=list)
    """Per run: CPU time of identical work against the first run's."""
    note: str | None = None
    """Where every run was kept although some were off (no quiet run), in words."""
    outside: list[float | None] = field(default_factory=list)
    """Per run, where measured: the share of the machine's cores other processes were busy."""


def run_readings(folders: list[Path]) -> tuple[list[float | None], list[float],
                                                list[float | None]]:
    """Per run folder (the capture's, then each replicate's, every one of the same ranks'
    sidecars): its core share, its host speed against the first (raises as
    :func:`calibration.job_runs.job_speeds`) and the share of the machine's cores other
    processes were busy over its profiled steps (the sidecars' ``machine`` records,
    :func:`calibration.machine_stat.run_busy_share`; None in sidecars before them)."""
    from stepsim.calibration.calibrate import _rank_sidecars
    from stepsim.calibration.job_runs import job_speeds
    from stepsim.calibration.machine_stat import run_busy_share
    from stepsim.calibration.outside_load import core_share, worker_cpu_us
    from stepsim.calibration.sidecar import load_sidecar

    sides = [_rank_sidecars(Path(f)) for f in folders]
    loaded = [[load_sidecar(p) for p in s.values()] for s in sides]
    shares = [core_share(run) for run in loaded]
    speeds = job_speeds(sides[0], [(Path(f), s) for f, s in zip(folders[1:], sides[1:])])
    busy = [run_busy_share([(side.host_name, side.machine, worker_cpu_us(side)) for side in run])
            for run in loaded]
    return shares, speeds, busy


def off_runs(shares: list[float | None], speeds: list[float], ref: str = "the runs' median",
             span: str = "its profiled steps", work: str = "its CPU time of identical work",
             outside: list[float | None] = ()) -> dict[int, str]:
    """The runs (index) under outside load, each with why: past :data:`LOAD_WARN` against the
    runs' median (``shares`` of a core held, ``speeds`` CPU time of the same work, any unit;
    ``ref``, ``span`` and ``work`` name the median, the span and the speed reading in it; needs
    three readings), or, where measured, with other processes (and a hypervisor's other guests)
    busy on more than ``LOAD_WARN`` of the machine's cores' time over the run (``outside``:
    that share per run), which needs no median: when most runs are loaded, the median is."""
    out: dict[int, str] = {}
    for i, o in enumerate(outside):
        if o is not None and o > LOAD_WARN:
            out[i] = (f"other processes were busy {100 * o:.0f} % of the machine's cores' time "
                      f"over {span}")
    known = [s for s in shares if s is not None]
    if len(known) >= 3:
        med = float(np.median(known))
        for i, s in enumerate(shares):
            if s is not None and s > 0 and med / s - 1 > LOAD_WARN and i not in out:
                out[i] = (f"its processes held {s:.2f} of a core each over {span} against "
                          f"{ref} {med:.2f}: other processes held the cores it waited for "
                          f"({med / s:.2f}x)")
    if len(speeds) >= 3:
        med = float(np.median(speeds))
        for i, v in enumerate(speeds):
            if med > 0 and v / med - 1 > LOAD_WARN and i not in out:
                out[i] = f"{work} was {v / med:.2f}x {ref}: " + _slow_host(
                    outside[i] if i < len(outside) else None)
    return out


def _slow_host(outside: float | None) -> str:
    """Why a run's CPU time of identical work rose, in words, from what other processes of
    this machine used over it (``outside``, a share of its cores' time; None unmeasured).

    Where they used little, the cores themselves ran slower, from outside this machine:
    ``bench/host_gauge.py`` (2026-12-06 20:18, nothing else on the cores, steal 0.1 s in
    47 s) read the same forward's thread CPU per core at 1.10-1.82x its median in 40 % of
    one-second bins, in episodes of 1-9 s, often on one core alone (core 0 at 1.44-1.82x for
    9 s while core 1 read 0.95-1.24x), its wall equal to its CPU there (no preemption): what
    the DDP demo's runs read (1.1-1.3x, one rank or both, other processes using -6..+6 % of
    the cores, steal 0-10 ms). Not the demo's start: over 18 demos (2026-12-06 08:47-21:13)
    the forward CPU of a run against its demo's median reads, by round, 1.003 / 1.053 /
    1.000 (median; 15 / 38 / 19 % of runs past 1.10), the capture's steps before its window
    0.86-1.39: the second round is the slow one more often, its first four runs mostly, for
    a reason not found. Two more gauge runs (21:22, 30 s each, other processes 0.9-6.7 %)
    read 13-32 % of bins past 1.10x (max 1.25-1.85x); in all three gauge runs one core had
    a slow episode 8-14 s after the start, beside others at other times, and a demo's second
    round begins 12 s after its first step: whether something about 10 s into a process
    slows the cores is not separated. Which of the hypervisor's other guests, shared caches or the clock
    is not separated (a guest sees none of them)."""
    if outside is None:
        return "the host ran slower (other work on it, or from outside this machine)"
    if outside > LOAD_WARN / 2:
        return (f"the host ran slower (other processes busy {100 * outside:.0f} % of its "
                "cores' time, or from outside this machine)")
    return (f"the cores ran slower with other processes busy {100 * max(outside, 0.0):.0f} % "
            "of their time: from outside this machine (the hypervisor's other guests or the "
            "clock)")


def pick_runs(folders: list[Path], outside: list[float | None] = ()) -> RunPick:
    """The quiet runs among ``folders`` (the capture first, then its replicates) to
    calibrate from (the module docstring; ``outside``: per run, where measured, the share of
    the machine's cores other processes were busy over its profiled steps, :func:`off_runs`;
    where not given, the sidecars' own ``machine`` records say it); needs three runs to read
    a median, else keeps all but the ones ``outside`` finds loaded."""
    folders = [Path(f) for f in folders]
    shares, speeds, busy = run_readings(folders)
    given = list(outside) + [None] * (len(folders) - len(outside))
    outside = [g if g is not None else b for g, b in zip(given, busy)]
    off = off_runs(shares, speeds, outside=outside)
    quiet = [f for i, f in enumerate(folders) if i not in off]
    if not off or not quiet:
        note = None if not off else (
            f"every one of the {len(folders)} profiled runs of the calibration setting ran under "
            "outside load, so all are kept: every row carries their load")
        return RunPick(folders[0], folders[1:], [], shares, speeds, note, list(outside))
    return RunPick(quiet[0], quiet[1:], [(folders[i], why) for i, why in sorted(off.items())],
                   shares, speeds, None, list(outside))


def pick_warnings(pick: RunPick, capture: Path, names: dict[Path, str] | None = None
                  ) -> list[str]:
    """The calibration warnings of ``pick``: one per run left out, naming it (``names``: each
    run's name as the user gave it, else its path; ``capture``: the run given as the capture)
    and the figure that set it apart, and the note when every run was loaded."""
    names = names or {}
    out = []
    for path, why in pick.left_out:
        first = path == capture
        out.append(f"{'the capture' if first else 'replicate'} {names.get(path, path)} ran "
                   f"under outside load ({why}; past {100 * LOAD_WARN:.0f} %): left out of the "
                   "calibration" + (f", the first quiet replicate "
                                    f"{names.get(pick.capture, pick.capture)} is the capture"
                                    if first else "")
                   + "; re-capture it on a quiet machine")
    if pick.note:
        out.append(pick.note)
    return out
