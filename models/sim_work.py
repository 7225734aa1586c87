"""How much one simulation does: the host ops, device tasks and thread pieces of a step, and
the most a simulation of given steps may hold.

A step count the caller gives (``--steps``, ``--warmup``: each at most 100,000) is simulated
exactly, so its cost is the count × the model's work a step, which a hand-edited or large
model makes unbounded: ``stepsim simulate`` of the calibrated resnet50 GPU trace (752 host
ops, 250 device tasks a step) at ``--steps 100000`` held 24 GB of memory and ran 3 min
(2026-12-05, load 3). :data:`MAX_RUN_WORK` bounds it; :func:`work_problem` says why a run is
refused. A chosen count stays within :data:`MAX_WORK`, well below it.

The pieces do not cost alike: the event-free engine (:mod:`models.solo`) takes about
:data:`PIECE_US` of CPU each, a model that runs as SimPy processes (:func:`runs_as_processes`)
about :data:`PROCESS_PIECE_US` an op, task or quantum, :data:`THREAD_PIECE_US` a thread
piece and :data:`WAKE_PIECE_US` a collective's wake-up. :func:`time_problem` bounds a given count by that cost: the 2-rank DDP demo model (24
pieces a step) at ``--warmup 100000`` held 0.9 GB and ran past 100 s under the work bound
alone (break17, 2026-12-07).
"""
from __future__ import annotations

import math

from stepsim.models.cpu import DEFAULT_QUANTUM_US, MAX_QUANTA
from stepsim.models.engine import comm_cpu_us, comm_wakes
from stepsim.models.host import INTERLEAVE_SLICES
from stepsim.models.params import StepModel

__all__ = ["MAX_RUN_WORK", "ALWAYS_STEPS", "MAX_SMALL_RUN_WORK", "MAX_STEPS", "MAX_WORK",
           "DRAW_STEPS", "PIECE_US", "PROCESS_PIECE_US", "THREAD_PIECE_US", "WAKE_PIECE_US",
           "thread_pieces", "step_work", "collective_quanta", "collective_wakes", "processes_only",
           "runs_as_processes", "step_cost_us", "chosen_reach", "work_problem", "time_problem"]

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

MAX_STEPS = 10_000
"""Most steps a chosen step count reaches (the output says when the target was not met)."""
MAX_WORK = 1_000_000
"""Most simulated host ops and device tasks (over every rank and step) a chosen step count
reaches: a model of many ops (or ranks) stops at fewer steps (about 20 s of simulation on one
core today)."""
DRAW_STEPS = 640
"""Most steps each Monte Carlo draw of an interval simulates when the step count is chosen:
its own simulation noise is small beside what the draws vary (a bootstrap of a window of a few
dozen measured steps moves the mean more than 640 simulated steps do); each draw's standard
error is reported beside the interval (:mod:`models.stepcount`)."""

PIECE_US = 2.7
"""CPU µs a simulated piece takes in the event-free engine, every span kept: the resnet50 GPU
model's 4.0 M in 10.7 s (2026-12-05, load 3, 2 cores). :data:`MAX_RUN_WORK` of them is
:func:`time_problem`'s bound, about 13.5 s."""
WAKE_PIECE_US = 8.0
"""CPU µs a collective's backend wake-up past its first takes (:func:`collective_wakes`):
the DDP demo model with ``comm.wakeups`` 1e6 (256 pieces each of its 4 collectives a step)
took 7.42 and 8.73 ms a step against 0.34 and 0.61 ms with 1 wake-up (320 steps each, two
rounds, 2026-12-07 04:04, load 1.2): 6.9-8.0 µs a piece (2-3 µs a piece at the demo's 12
and 31; the most taken). Not counted before break18, so such a model's bound let
``--steps`` run about 9x the 13.5 s it states."""
PROCESS_PIECE_US = 14.0
"""CPU µs a host op, device task or collective quantum takes where the model runs as SimPy
processes: the 2-rank gloo DDP demo model with 1 wake-up a collective (12 a rank-step) took
0.34 ms a step (320 steps, 2026-12-07 04:04, load 1.2; 0.61 in a second round); tidy18's
0.96-0.98 ms a step of the demo model itself (2,020 steps, twice, 2026-12-07 02:51, load
1.6-3.1) less its 82 wake-ups past the first at :data:`WAKE_PIECE_US` gives 13.3-14.2."""
THREAD_PIECE_US = 95.0
"""CPU µs a :func:`thread_pieces` piece takes (a thread's slice on a pool of too few cores):
fresh7's 1-worker CPU model on 2 cores (25 thread pieces and 2 ops a step) took 2.41-2.48 ms a
step over 620 steps (twice, 2026-12-07 02:51), (2.44 ms − 2 × 14 µs) / 25 = 96 µs."""


def thread_pieces(model: StepModel) -> int:
    """Pieces of CPU work one rank's step runs as simulated threads beside its ops: a host op
    with a parallel part on a team runs ``threads`` pieces in each of its
    :data:`models.host.INTERLEAVE_SLICES` slices, and a step's batch ``threads_per_worker``.
    A team of 256 threads beside 8 workers on 2 cores simulated about 20 steps a second, and
    a chosen count went on to thousands of steps (a ``whatif`` did not end in 400 s). None
    where the team, the workers' threads and one more fit the cores."""
    lp = model.loader
    # without workers the main process's batch runs on threads_per_worker threads
    workers = lp.num_workers * lp.threads_per_worker or lp.threads_per_worker - 1
    if model.team_threads() + workers + 1 <= lp.host_cores:
        return 0     # the threads fit the cores: nothing waits for one (solved without events)
    team = sum(INTERLEAVE_SLICES * (op.threads + 1) for op in model.host.ops
               if op.kind == "cpu" and op.threads > 1 and op.parallel_fraction > 0)
    return team + (lp.threads_per_worker if lp.num_workers or workers else 0)


def processes_only(model: StepModel) -> bool:
    """Whether ``simulate(model)`` runs SimPy processes whatever its count: the collectives
    take host cores (``comm.host_cpu_us``), or a host op resumes late (``resume_lag_us``
    after a sync on a task), where the event-free engine gives up at once
    (:func:`models.engine.solved`; :func:`models.plans.host_plan` gives such an op its
    ``lag``). False for a model ``simulate`` refuses for want of host ops."""
    ops = model.host.ops
    if not ops:
        return False
    return bool(comm_cpu_us(model)) or any(
        op.kind == "cpu" and op.resume_lag_us and j > 0 and ops[j - 1].kind == "sync"
        and ops[j - 1].task is not None for j, op in enumerate(ops))


def runs_as_processes(model: StepModel) -> bool:
    """Whether ``model`` is simulated as SimPy processes as far as can be told before the
    run: :func:`processes_only`, or threads that wait for a core (:func:`thread_pieces`: the
    pool is contended, which the event-free engine does not solve). A model that falls back
    to processes only on running (a phase's wall time, interference) is costed as
    event-free."""
    return processes_only(model) or thread_pieces(model) > 0


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


def collective_wakes(model: StepModel) -> int:
    """Backend wake-ups past each collective's first that one rank's step simulates (each its
    own piece of CPU work after a wait: :func:`models.engine.comm_wakes`, up to
    :data:`models.engine.MAX_WAKE_PIECES` a collective)."""
    return sum(n - 1 for n, _ in comm_wakes(model, comm_cpu_us(model)).values())


def step_work(model: StepModel) -> int:
    """The host ops, device tasks, :func:`thread_pieces` and :func:`collective_quanta` one
    step simulates, over every rank (the bound on what a run holds; its time also counts
    :func:`collective_wakes`, :func:`step_cost_us`)."""
    return len(model.ranks) * (len(model.host.ops) + sum(
        len(ts) for ts in model.device.streams.values()) + thread_pieces(model)
        + collective_quanta(model))


def step_cost_us(model: StepModel) -> float:
    """The CPU µs one step of ``model`` takes to simulate, over every rank: its pieces at
    :data:`PIECE_US`, or where it :func:`runs_as_processes` at :data:`PROCESS_PIECE_US`,
    :data:`THREAD_PIECE_US` and its :func:`collective_wakes` at :data:`WAKE_PIECE_US` (an
    estimate from three models; the one-core host's speed moves it)."""
    if not runs_as_processes(model):
        return step_work(model) * PIECE_US
    threads, wakes = thread_pieces(model), collective_wakes(model)
    rest = step_work(model) // len(model.ranks) - threads
    return len(model.ranks) * (rest * PROCESS_PIECE_US + threads * THREAD_PIECE_US
                               + wakes * WAKE_PIECE_US)


def chosen_reach(model: StepModel) -> int:
    """The most steps a count chosen for ``model`` simulates, warm-up aside: a chosen count's
    bound (:data:`MAX_STEPS`, fewer where :data:`MAX_WORK` says) and the verbs' first count
    and draws (:data:`ALWAYS_STEPS`, :data:`DRAW_STEPS`)."""
    return max(ALWAYS_STEPS, DRAW_STEPS, min(MAX_STEPS, MAX_WORK // max(step_work(model), 1)))


def work_problem(model: StepModel, steps: int, warmup: int) -> str | None:
    """Why a simulation of ``steps`` measured and ``warmup`` warm-up steps of ``model`` is
    refused (past :data:`MAX_RUN_WORK`; :data:`MAX_SMALL_RUN_WORK` in :data:`ALWAYS_STEPS`
    steps or fewer; or the time it takes, :func:`time_problem`), or None."""
    per_step = step_work(model)
    total = per_step * (steps + warmup)
    small = steps + warmup <= ALWAYS_STEPS
    if total <= (MAX_SMALL_RUN_WORK if small else MAX_RUN_WORK):
        return time_problem(model, steps, warmup)
    per = max(per_step, 1)
    most = max(MAX_RUN_WORK // per, min(ALWAYS_STEPS, MAX_SMALL_RUN_WORK // per))
    ranks = f" over its {len(model.ranks)} ranks" if len(model.ranks) > 1 else ""
    return (f"{steps:,} steps and {warmup:,} warm-up steps of this model's {per_step:,} host "
            f"ops, device tasks and thread pieces a step{ranks} are {total:,} to simulate; "
            f"one simulation takes at most {MAX_RUN_WORK:,} ({MAX_SMALL_RUN_WORK:,} in "
            f"{ALWAYS_STEPS} steps or fewer): {most:,} steps of this model, warm-up included "
            "(give fewer --steps or --warmup)")


def time_problem(model: StepModel, steps: int, warmup: int) -> str | None:
    """Why a given count of ``steps`` measured and ``warmup`` warm-up steps of ``model`` is
    refused for the time it would take (:func:`step_cost_us` × the steps, past
    :data:`MAX_RUN_WORK` × :data:`PIECE_US`, about 13.5 s), or None. A count the verbs could
    choose (:func:`chosen_reach`, with up to :data:`ALWAYS_STEPS` of warm-up) is never refused
    here, nor a model that does not :func:`runs_as_processes` (its bound is
    :data:`MAX_RUN_WORK`'s)."""
    if not runs_as_processes(model):
        return None
    per_us = step_cost_us(model)
    most = max(int(MAX_RUN_WORK * PIECE_US // max(per_us, 1e-9)),
               chosen_reach(model) + ALWAYS_STEPS)
    if steps + warmup <= most:
        return None
    return (f"{steps:,} steps and {warmup:,} warm-up steps of this model would take about "
            f"{per_us * (steps + warmup) / 1e6:,.0f} s of CPU to simulate ({per_us / 1e3:.2f} "
            f"ms a step, as SimPy processes); at most {most:,} steps of this model are "
            f"simulated, warm-up included (about {MAX_RUN_WORK * PIECE_US / 1e6:.1f} s, or the "
            "most a chosen count reaches; give fewer --steps or --warmup)")
