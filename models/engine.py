"""The two ways to run a StepModel's steps, behind one interface.

``solved`` runs a rank that contends with nothing without events (:mod:`models.solo`, its
repeating steps replayed by :mod:`models.memo`), or several such ranks that meet only at
collectives (:mod:`models.solo_ranks`), and returns None for any other model;
:func:`models.processes.simulated` runs SimPy processes. Both stream every span to the
run's recorder and every task run and host wait to the sinks (:class:`Runs`,
:class:`Waits`), and return ``(step_starts, loaders)``.
"""
from __future__ import annotations

import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.device import TaskRun
from stepsim.models.loader import DataLoaderSim
from stepsim.models.params import StepModel
from stepsim.models.plans import host_plan, stream_plans
from stepsim.models.ranks import rank_host_plan
from stepsim.models.same_thread import on_main_thread
from stepsim.models.solo import solvable, solve
from stepsim.models.solo_loader import SoloLoader, loader_solvable
from stepsim.models.solo_ranks import RankInput, solve_ranks
from stepsim.simcore.record import Block, Recorder
from stepsim.simcore.rng import spawn_streams

__all__ = ["Runs", "Setup", "Tee", "Waits", "last_step", "released_tasks", "solved"]


class Tee(Recorder):
    """Forwards every call to each of ``recs``."""

    def __init__(self, *recs: Recorder):
        self.recs = recs
        self.keeps = any(r.keeps for r in recs)

    def span(self, span):
        for r in self.recs:
            r.span(span)

    def sample(self, series, t_us, value):
        for r in self.recs:
            r.sample(series, t_us, value)

    def shifted(self, spans, dt_us, dstep):
        for r in self.recs:
            r.shifted(spans, dt_us, dstep)


def released_tasks(model: StepModel) -> set[str]:
    """The tasks some ``prev_waits`` names: their step before the first (−1) counts as done at
    once, since the first simulated step waits for nothing earlier (in a window replay, that
    step's captured idle already holds any such wait: calibration saw no step before it)."""
    return {w for ts in model.device.streams.values() for t in ts for w in t.prev_waits}


MAX_WAKE_PIECES = 256
"""Most wake-ups one collective is simulated as (each an event): past it each stands for
``w / 256`` of the ``w`` the model gives, its wait scaled to match (``w × L`` when every core is
busy, as before). Measured counts are far below (7 + 3/MiB: 82 for a 25 MiB bucket); a 1 TiB
all-reduce or ``wakeups_per_mb`` 1e6 gave millions a step and a simulation that did not end."""


def wake_pieces(w: float, wait_us: float) -> tuple[int, float]:
    """``(pieces, wait µs each)`` a collective's ``w`` wake-ups of ``wait_us`` each are
    simulated as (at least one, at most :data:`MAX_WAKE_PIECES`)."""
    w = max(int(w), 1)
    n = min(w, MAX_WAKE_PIECES)
    return n, wait_us * w / n


def last_step(n_total: int, replay: bool) -> int:
    """The last measured step of a run of ``n_total`` steps: a run that is not a window
    replay runs one step past its measured ones (its last step's end is the next start)."""
    return n_total - 1 if replay else n_total - 2


class Setup:
    """What both engines share: the run's steps, plans, loader parameters and random streams."""

    def __init__(self, model: StepModel, steps: int, warmup: int, seed: int, replay: bool,
                 hook: Recorder, adaptive: bool = False):
        captured = model.replay if replay else None
        if not replay:   # the main thread's own cost of making its batches (models.same_thread)
            model = on_main_thread(model)
        self.model, self.hook, self.replay = model, hook, replay
        self.n_total = warmup + steps + (0 if replay else 1)
        self.last = last_step(self.n_total, replay)
        self.rngs = spawn_streams(seed, [f"rank{r.rank}.loader" for r in model.ranks]
                                  + [f"rank{r.rank}.host" for r in model.ranks])
        # a window replay gives the host its measured next() times: the main thread's own
        # work, whatever the workers did (they are not simulated)
        # and a model without a device pins nothing (StepModel.pins_memory), as torch does
        update = {**({} if captured is None else {"num_workers": 0}),
                  **({} if model.pins_memory() else {"pin_memory": False})}
        lp = model.loader.model_copy(update=update) if update else model.loader
        self.lp = lp
        self.comm_cpu = comm_cpu_us(model)
        # and its backend threads' wake-ups, each waiting for a core when every core is busy
        self.comm_wake = comm_wakes(model, self.comm_cpu)
        # without workers the main process makes its batches on a worker's threads
        # (DataLoaderSim.main_threads): the main thread and threads_per_worker − 1 more
        threads = lp.num_workers * lp.threads_per_worker + (
            1 if lp.pin_memory and lp.num_workers else 0) + (
            0 if lp.num_workers or captured is not None else lp.threads_per_worker - 1)
        if model.host.uses_core:
            threads += model.team_threads()
            # the backend's threads (gloo on CPU tensors) run collectives on the same cores
            threads += 1 if self.comm_cpu else 0
        self.threads = threads
        # the threads runnable all along (a worker's only while it has an index: CpuPool.claim)
        self.fixed_threads = threads - lp.num_workers * lp.threads_per_worker
        self.adaptive = adaptive
        self.ops = host_plan(model, replay)
        accum = model.comm.grad_accum_steps
        self.sync_step = lambda step: (step + 1) % accum == 0
        self.backlog = captured.stream_busy_us if captured is not None else {}
        self.per_host = {h: sum(r.host == h for r in model.ranks)
                         for h in {r.host for r in model.ranks}}

    def pool(self, env: simpy.Environment, host: str, pools: dict[str, CpuPool]) -> CpuPool:
        """The core pool of a rank on ``host`` (ranks on one named host share its cores; a
        rank without a host has its own), with the rank's fixed threads claimed (once per
        call: call it once per rank)."""
        cpu = pools.get(host) if host else None
        if cpu is None:
            n_on = self.per_host[host] if host else 1
            m = self.model
            cpu = CpuPool(env, self.lp.host_cores, contended=self.threads * n_on > self.lp.host_cores,
                          scale=m.host.cpu_scale, interference=m.host.interference,
                          adaptive=self.adaptive, stall=m.host.team_stall,
                          spin_us=m.host.team_spin_us, oversub=m.host.oversub,
                          oversub_ref=m.host.oversub_ref)
            if host:
                pools[host] = cpu
        cpu.claim(self.fixed_threads)
        return cpu


class Runs:
    """Receives task runs (``append``): keeps them when asked, and always each (rank, step)'s
    last device end (µs), which the step marks need."""

    def __init__(self, keep: bool, blocks: bool = False):
        self.kept: list[TaskRun] = []
        self.keep = keep
        self.end: dict[tuple[int, int], float] = {}
        self.blocks: list | None = [] if blocks else None
        """``blocks``: a repeated step's runs are held as ``(where they go in kept, block,
        shift µs, steps)``, not made (:class:`models.run_columns.BlockRuns`)."""

    def every(self):
        """The runs kept: a list, or a :class:`models.run_columns.BlockRuns` where blocks
        were held."""
        if not self.blocks:
            return self.kept
        from stepsim.models.run_columns import BlockRuns

        return BlockRuns(self.kept, self.blocks)

    def append(self, r: TaskRun) -> None:
        if self.keep:
            self.kept.append(r)
        key = (r.rank, r.step)
        if r.end_us > self.end.get(key, -1.0):
            self.end[key] = r.end_us

    def shifted(self, block: Block, dt_us: float, dstep: int) -> None:
        """Receive the runs of a repeated step (``block.rows``) moved by ``dt_us`` µs and
        ``dstep`` steps."""
        if self.blocks is not None:
            self.blocks.append((len(self.kept), block, dt_us, dstep))
        elif self.keep:
            self.kept.extend(block.moved(dt_us, dstep))
        end = self.end
        for (rank, step), e in block.maxima((0, 1), 7).items():
            key, e = (rank, step + dstep), e + dt_us
            if e > end.get(key, -1.0):
                end[key] = e


class Waits(list):
    """Receives host waits; keeps them only when asked."""

    def __init__(self, keep: bool):
        super().__init__()
        self.keep = keep
        if not keep:
            self.append = lambda w: None


def comm_cpu_us(model: StepModel) -> dict[str, float]:
    """Each collective's CPU work on its rank's host cores (µs; gloo on CPU tensors), by task
    id; empty where collectives take no host core. Where it is not empty the model runs as
    SimPy processes (:func:`solved` gives up: they contend there)."""
    c = model.comm
    if not (model.host.uses_core and c.host_cpu_us + c.host_cpu_us_per_mb > 0):
        return {}
    return {t.id: c.host_cpu_us + c.host_cpu_us_per_mb * (t.bytes or 0) / 2 ** 20
            for t in model.device.streams.get(c.comm_stream, []) if t.kind == "collective"}


def comm_wakes(model: StepModel, comm_cpu: dict[str, float]) -> dict[str, tuple[int, float]]:
    """Each collective's backend wake-ups as simulated, ``(pieces, wait µs each)``
    (:func:`wake_pieces`) by task id, for the collectives of ``comm_cpu``
    (:func:`comm_cpu_us`); empty where the model gives no wake-up a wait."""
    c = model.comm
    if not (c.wakeup_wait_us > 0 and c.wakeups + c.wakeups_per_mb > 0):
        return {}
    return {t.id: wake_pieces(round(c.wakeups + c.wakeups_per_mb * (t.bytes or 0) / 2 ** 20),
                              c.wakeup_wait_us)
            for t in model.device.streams.get(c.comm_stream, []) if t.id in comm_cpu}


def solved(su: Setup, runs: Runs, waits: list):
    """The run without events when the model qualifies (:mod:`models.solo` for one rank,
    :mod:`models.solo_ranks` for ranks that meet only at collectives), else None."""
    m = su.model
    if su.comm_cpu:   # collectives' CPU work on the host cores: they contend there
        return None
    if any(p.lag is not None for p in su.ops):   # a late resume: who entered last decides
        return None
    env = simpy.Environment()
    if len(m.ranks) > 1:
        return _solved_ranks(su, runs, waits, env)
    rp = m.ranks[0]
    cpu = su.pool(env, rp.host, {})
    streams = stream_plans(m, 0, su.replay)
    ops = rank_host_plan(m, 0, su.ops)
    if _walls(ops):
        return None
    lp, lrng = su.lp, su.rngs[f"rank{rp.rank}.loader"]
    fast = loader_solvable(lp, cpu)
    if not solvable(
            len(m.ranks), not cpu.contended and cpu.interference <= 0,
            lp.num_workers, ops, streams, workers_solvable=fast):
        return None
    workers = SoloLoader(lp, cpu.scale, lrng, rp.rank) if lp.num_workers else None
    loader = DataLoaderSim(env, lp, cpu, lrng, su.hook, rp.rank) if workers is None else workers
    starts = solve(rp.rank, ops, streams, rp.delay_us, m.host.uses_core, cpu.scale, loader,
                   m.device.launch_queue_depth, su.hook, runs, waits, su.n_total, su.last,
                   su.sync_step, su.rngs[f"rank{rp.rank}.host"], su.backlog, released_tasks(m),
                   workers=workers)
    return [starts], [loader]


def _walls(ops) -> bool:
    """Whether a rank's host ops hold wall-clock time on a core (``RankParams.phase_wall_us``),
    which only the SimPy host process runs."""
    return any(op.wall for op in ops)


def _solved_ranks(su: Setup, runs: Runs, waits: list, env: simpy.Environment):
    """Several ranks without events (:mod:`models.solo_ranks`) when each is solvable on its
    own (no DataLoader workers), else None."""
    m = su.model
    pools: dict[str, CpuPool] = {}
    inputs, loaders = [], []
    for i, rp in enumerate(m.ranks):
        cpu = su.pool(env, rp.host, pools)
        streams = stream_plans(m, i, su.replay)
        ops = rank_host_plan(m, i, su.ops)
        if _walls(ops) or not solvable(1, not cpu.contended and cpu.interference <= 0, su.lp.num_workers,
                        ops, streams, shared_engines=True):
            return None
        loader = DataLoaderSim(env, su.lp, cpu, su.rngs[f"rank{rp.rank}.loader"], su.hook,
                               rp.rank)
        loaders.append(loader)
        inputs.append(RankInput(rp.rank, ops, streams, rp.delay_us, cpu.scale, loader,
                                su.rngs[f"rank{rp.rank}.host"]))
    return solve_ranks(inputs, m.host.uses_core, m.device.launch_queue_depth, su.hook, runs,
                       waits, su.n_total, su.last, su.sync_step, su.backlog,
                       released_tasks(m)), loaders
