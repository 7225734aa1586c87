"""How much one simulation does: the host ops, device tasks and thread pieces of a step, and
the most a simulation of given steps may hold.

A step count the caller gives (``--steps``, ``--warmup``: each at most 100,000) is simulated
exactly, so its cost is the count × the model's work a step, which a hand-edited or large
model makes unbounded: ``stepsim simulate`` of the calibrated resnet50 GPU trace (752 host
ops, 250 device tasks a step) at ``--steps 100000`` held 24 GB of memory and ran 3 min
(2026-12-05, load 3). :data:`MAX_RUN_WORK` bounds it; :func:`work_problem` says why a run is
refused. A chosen count stays within :data:`models.stepcount.MAX_WORK`, well below it.
"""
from __future__ import annotations

import math

from stepsim.models.cpu import DEFAULT_QUANTUM_US, MAX_QUANTA
from stepsim.models.host import INTERLEAVE_SLICES
from stepsim.models.params import StepModel

__all__ = ["MAX_RUN_WORK", "ALWAYS_STEPS", "MAX_SMALL_RUN_WORK", "thread_pieces", "step_work",
           "collective_quanta", "work_problem"]

MAX_RUN_WORK = 5_000_000
"""Most simulated host ops, device tasks and thread pieces (over every rank and step, warm-up
included) one simulation of a given step count takes. Measured 2026-12-05 (load 3, 2 cores):
the resnet50 GPU model (1,002 a step) at 4,000 steps, 4.0 M, took 10.7 s and 2.96 GB of
memory (about 0.73 kB each, every span kept); 1,000 steps 3.2 s and 0.78 GB. The shared
traces' models hold 66-3,920 a step (dlrm's 8 ranks the most)."""

ALWAYS_STEPS, MAX_SMALL_RUN_WORK = 60, 4 * MAX_RUN_WORK
"""A simulation of at most :data:`ALWAYS_STEPS` steps (warm-up included: a chosen count's
first simulation, :data:`models.stepcount.FIRST_STEPS` = 40, after the default warm-up of
20) is taken up to :data:`MAX_SMALL_RUN_WORK` (20 M: 333 k a step), so a model calibrated
from a large trace still runs with the verbs' defaults; a model past it (512 ranks of the
resnet50 GPU model, 513 k a step, did not end in 60 s) gets the refusal's numbers."""


def thread_pieces(model: StepModel) -> int:
    """Pieces of CPU work one rank's step runs as simulated threads beside its ops: a host op
    with a parallel part on a team runs ``threads`` pieces in each of its
    :data:`models.host.INTERLEAVE_SLICES` slices, and a step's batch ``threads_per_worker``.
    A team of 256 threads beside 8 workers on 2 cores simulated about 20 steps a second, and
    a chosen count went on to thousands of steps (a ``whatif`` did not end in 400 s). None
    where the team, the workers' threads and one more fit the cores."""
    lp = model.loader
    workers = lp.num_workers * lp.threads_per_worker
    if model.team_threads() + workers + 1 <= lp.host_cores:
        return 0     # the threads fit the cores: nothing waits for one (solved without events)
    team = sum(INTERLEAVE_SLICES * (op.threads + 1) for op in model.host.ops
               if op.kind == "cpu" and op.threads > 1 and op.parallel_fraction > 0)
    return team + (lp.threads_per_worker if lp.num_workers else 0)


def collective_quanta(model: StepModel) -> int:
    """Quanta past the first that one rank's collectives' CPU work (gloo on the host's cores:
    ``comm.host_cpu_us + host_cpu_us_per_mb × MiB``) is simulated in a step: up to
    :data:`models.cpu.MAX_QUANTA` each, one a 2 ms quantum. A measured gloo all-reduce's is
    1-3 (0.2 ms + 0.56-0.81 ms per MiB); ``--set comm.host_cpu_us_per_mb=1e12`` made each of
    a 2-rank model's 4 all-reduces 256 wake-ups of 1,000 quanta, about 1 s a step, and a
    ``whatif`` of 640-step draws that did not end in an hour (2026-12-06)."""
    c = model.comm
    if not model.host.uses_core or c.host_cpu_us + c.host_cpu_us_per_mb <= 0:
        return 0
    cpu = [c.host_cpu_us + c.host_cpu_us_per_mb * (t.bytes or 0) / 2 ** 20
           for t in model.device.streams.get(c.comm_stream, []) if t.kind == "collective"]
    return sum(min(MAX_QUANTA, math.ceil(us / DEFAULT_QUANTUM_US)) - 1 for us in cpu if us > 0)


def step_work(model: StepModel) -> int:
    """The host ops, device tasks, :func:`thread_pieces` and :func:`collective_quanta` one
    step simulates, over every rank."""
    return len(model.ranks) * (len(model.host.ops) + sum(
        len(ts) for ts in model.device.streams.values()) + thread_pieces(model)
        + collective_quanta(model))


def work_problem(model: StepModel, steps: int, warmup: int) -> str | None:
    """Why a simulation of ``steps`` measured and ``warmup`` warm-up steps of ``model`` is
    refused (past :data:`MAX_RUN_WORK`; :data:`MAX_SMALL_RUN_WORK` in :data:`ALWAYS_STEPS`
    steps or fewer), or None."""
    per_step = step_work(model)
    total = per_step * (steps + warmup)
    small = steps + warmup <= ALWAYS_STEPS
    if total <= (MAX_SMALL_RUN_WORK if small else MAX_RUN_WORK):
        return None
    per = max(per_step, 1)
    most = max(MAX_RUN_WORK // per, min(ALWAYS_STEPS, MAX_SMALL_RUN_WORK // per))
    ranks = f" over its {len(model.ranks)} ranks" if len(model.ranks) > 1 else ""
    return (f"{steps:,} steps and {warmup:,} warm-up steps of this model's {per_step:,} host "
            f"ops, device tasks and thread pieces a step{ranks} are {total:,} to simulate; "
            f"one simulation takes at most {MAX_RUN_WORK:,} ({MAX_SMALL_RUN_WORK:,} in "
            f"{ALWAYS_STEPS} steps or fewer): {most:,} steps of this model, warm-up included "
            "(give fewer --steps or --warmup)")
