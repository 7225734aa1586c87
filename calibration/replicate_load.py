"""A replicate that ran on a loaded machine where its sidecar cannot say how loaded
(:func:`calibration.run_load.remeasured_load` gives None: a Hugging Face capture at 0 workers
records no batch, so the busy intervals miss the producer's work), read as calibration reads
the capture itself (:func:`calibration.cpu.fit_cpu_model`): the training step, outside
``next()``, spent a share of its wall time off-core (its wall less the CPU its threads explain,
:func:`calibration.host_step.split_host_step`), and the main thread's context switches there
were involuntary (preempted while runnable). Their product past
:data:`calibration.cpu.BLOCK_NOTE_SHARE` is time spent waiting for a core that the run's own
threads, within the cores, did not take: other load. fresh11 (2026-12-07) was told so of its
capture (preempted in 98 %) and nothing of its replicate, captured at a load average of 6-7
on 2 cores, whose host speed factor became the host's run-to-run noise (next run 0.54-1.16×).

The steps read are those the profiler did not run in (``profiler_on`` False), where the sidecar
has :data:`MIN_STEPS` of them: in the profiled window the profiler's own threads are runnable
beside the run's, so a run whose worker and main thread had one core each waits for a core
there with nothing else on the host. fresh13's plain demo (2026-12-07 14:30, locked, load
0.04, every other python process stopped) flagged 2 of 7 replicates at 1 worker on 2 cores:
nw1-r0 waited 9.4 ms and nw1-r3 10.0 ms a step on the run queue in their profiled steps, 5.6
and 0.2 ms in their unprofiled ones (outside-load ``held`` 0.935 and 0.995). "Preempted in
100 %" is no sign on its own there: outside ``next()`` the main thread never blocks (no
voluntary switch), so every one of its ~6-13 switches a step is involuntary, loaded or not.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from stepsim.calibration.host_step import split_host_step
from stepsim.calibration.job_load import threads_per_worker
from stepsim.calibration.team_stall import preempted_share

__all__ = ["preempted_replicates"]

MIN_STEPS = 3
"""Fewest unprofiled steps read instead of the profiled ones (see the module docstring)."""

PREEMPTED_SHARE = 0.15
"""Off-core share × preempted share of a replicate's steps past which it is said to have run
under other load (the capture's own rule, :data:`calibration.cpu.BLOCK_NOTE_SHARE`)."""


def _name(path: Path) -> str:
    return path.parent.name if path.name == "sidecar.json" else path.name


def _read_steps(side) -> list:
    """The steps the reading takes: the unprofiled ones where there are :data:`MIN_STEPS`,
    else the profiled ones (sidecars that do not record ``profiler_on``)."""
    quiet = [s for s in side.steps if s.profiler_on is False and not s.profiled]
    return quiet if len(quiet) >= MIN_STEPS else [s for s in side.steps if s.profiled]


def preempted_replicates(replicates) -> str | None:
    """The warning naming the replicates (``(path, Sidecar)``) whose training step waited
    for a core behind other load (see the module docstring), else None. A replicate whose own
    runnable threads outnumber its cores is not read (its waits are its own)."""
    said = []
    for path, side in replicates:
        prof = _read_steps(side)
        cores, torch_threads = side.host_cores, side.torch_num_threads or 1
        own = side.loader.num_workers * threads_per_worker(side) + torch_threads
        if not prof or not cores or own > cores:
            continue
        wall = float(np.mean([s.wall_us - s.next_wall_us for s in prof]))
        cpu = float(np.mean([max(s.cpu_us - s.next_cpu_us, 0.0) if torch_threads == 1
                             else s.compute_cpu_us for s in prof]))
        _, off_core = split_host_step(wall, cpu, torch_threads)
        preempted = preempted_share(prof)
        if off_core * preempted > PREEMPTED_SHARE:
            said.append(f"{_name(Path(path))}: preempted in {100 * preempted:.0f} % of its "
                        f"context switches, {wall / 1e3:.1f} ms wall against {cpu / 1e3:.1f} ms "
                        "CPU a step")
    if not said:
        return None
    return (f"{len(said)} of {len(replicates)} replicate(s) ran under other load ("
            + "; ".join(said) + "): their training step waited for a core although the run's "
            "own threads had one each, so their host speed factor holds that load as the "
            "host's run-to-run noise, and every interval is widened by it; re-capture them on "
            "a quiet machine")
