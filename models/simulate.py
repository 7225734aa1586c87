"""Run a StepModel in SimPy and collect what happened.

Process start order (fixed; SimPy's FIFO tie-break then makes runs repeatable byte for byte):
for each rank in ``model.ranks`` order: its DataLoader workers (0..n-1), its pin-memory thread,
its device streams (in ``device.streams`` order), then its host thread.

Random streams are spawned from one seed in the order: ``rank{r}.loader`` for each rank, then
``rank{r}.host`` for each rank.

Step time: calibration measures a step from its start on the host thread (``ProfilerStep#N``
begins) to the next step's start (``calibration.steps``). A *window replay*
(``simulate(model, replay=True)``) measures exactly that: it re-runs the captured steps, each
with its own durations, from the captured state (:func:`replay_marks`). A steady-state
simulation measures between *step marks* (:func:`step_marks`): the later of the host starting
the next step and the device finishing this step's work. In steady state the two agree (the
host cannot stay ahead once the launch queue is full); in a short window they differ only when
the device lags behind a host that never waits, and then the device's pace is what a long run
pays.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from stepsim.models.cpu import CpuPool
from stepsim.models.ddp import collective_us
from stepsim.models.device import Barrier, LaunchQueue, StepEvents, TaskPlan, TaskRun, stream_process
from stepsim.models.host import HostOpPlan, HostWait, host_process
from stepsim.models.loader import DataLoaderSim, LoaderStats
from stepsim.models.params import StepModel
from stepsim.models.ranks import rank_host_plan
from stepsim.simcore.dists import Empirical
from stepsim.simcore.errors import SimulationError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.record import ListRecorder, Recorder, Span
from stepsim.simcore.rng import spawn_streams

@dataclass
class SimResult:
    """What a simulation produced.

    Attributes:
        step_us: shape (n_ranks, steps): each measured step's time (µs), start to next start.
        step_starts_us: per rank, the host's step-start instants (µs), warm-up included.
        warmup: steps simulated before the measured window.
        window_us: (start, end) instants of the measured window on rank 0 (µs).
        spans: every span recorded (see :class:`simcore.record.Span`).
        samples: sampled series, e.g. ``rank0.loader.ready`` → [(t_us, value), …].
        max_outstanding: per rank, the most batches ever outstanding in its DataLoader.
        ranks: the rank numbers, in simulation order.
        runs: every device task execution (:class:`models.device.TaskRun`), per stream in
            stream order.
        host_waits: every blocking wait of a host thread on the device
            (:class:`models.host.HostWait`).
        loader_stats: per rank, what its DataLoader produced and returned.
        model: the simulated model (metrics look tasks up in it).
        step_marks_us: per rank, the step boundaries (µs) that ``step_us`` is measured
            between (see :func:`step_marks`).
    """

    step_us: np.ndarray
    step_starts_us: list[list[float]]
    warmup: int
    window_us: tuple[float, float]
    spans: list[Span]
    samples: dict[str, list[tuple[float, float]]]
    max_outstanding: list[int]
    ranks: list[int]
    extra: dict = field(default_factory=dict)
    runs: list[TaskRun] = field(default_factory=list)
    host_waits: list[HostWait] = field(default_factory=list)
    loader_stats: list[LoaderStats] = field(default_factory=list)
    model: StepModel | None = None
    step_marks_us: list[list[float]] = field(default_factory=list)

    @property
    def job_step_us(self) -> np.ndarray:
        """Per measured step, the slowest rank's time (µs): what the job pays."""
        return self.step_us.max(axis=0)

    @property
    def mean_step_us(self) -> float:
        return float(self.job_step_us.mean())

    @property
    def median_step_us(self) -> float:
        return float(np.median(self.job_step_us))

    def rank_window_us(self, rank: int) -> tuple[float, float]:
        """(start, end) instants (µs) of ``rank``'s own measured window."""
        m = self.step_marks_us[self.ranks.index(rank)]
        return m[self.warmup], m[self.warmup + self.step_us.shape[1]]


class _Tee(Recorder):
    def __init__(self, *recs: Recorder):
        self.recs = recs

    def span(self, span):
        for r in self.recs:
            r.span(span)

    def sample(self, series, t_us, value):
        for r in self.recs:
            r.sample(series, t_us, value)


def task_durations(model: StepModel, rank_index: int) -> dict[str, float]:
    """µs per device task for one rank: measured durations, collectives from the cost model
    when ``comm.bus_gbps`` is set, and the rank's per-phase extra time spread over that
    phase's non-collective tasks in proportion to their duration."""
    rp = model.ranks[rank_index]
    tasks = model.task_map()
    out: dict[str, float] = {}
    for t in tasks.values():
        if t.kind == "collective" and model.comm.bus_gbps is not None and t.bytes is not None:
            out[t.id] = collective_us(t.bytes, model.comm.world_size, model.comm.bus_gbps,
                                      model.comm.latency_us)
        else:
            out[t.id] = t.dur_us
    host_phases = {op.phase for op in model.host.ops if op.kind == "cpu"}
    for phase, extra in rp.phase_extra_us.items():
        ids = [t.id for t in tasks.values() if t.phase == phase and t.kind != "collective"]
        total = sum(out[i] for i in ids)
        if not ids and phase in host_phases:
            continue        # a host-side phase: see rank_host_plan
        if not ids:
            raise SimulationError(f"rank {rp.rank}: phase_extra_us names phase {phase!r}, "
                                  "which has no tasks")
        for i in ids:
            out[i] += extra * (out[i] / total if total > 0 else 1 / len(ids))
    return out


def issue_points(model: StepModel) -> dict[str, int]:
    """For every device task, the index of the host op by which it has been issued: its launch
    op, or for a task no host op launches, the latest issue point among its stream predecessor
    and the tasks it waits for (−1: issued when the step starts). A device-wide sync at op ``j``
    waits for the tasks issued before ``j``."""
    launch = {op.task: i for i, op in enumerate(model.host.ops) if op.kind == "launch"}
    issue = {t: launch.get(t, -1) for t in model.task_map()}
    for _ in range(len(issue) + 1):
        changed = False
        for ts in model.device.streams.values():
            prev = -1
            for t in ts:
                v = max([prev, launch.get(t.id, -1)] + [issue[w] for w in t.waits])
                if v != issue[t.id]:
                    issue[t.id], changed = v, True
                prev = v
        if not changed:
            return issue
    raise SimulationError("device task waits form a cycle")


def host_plan(model: StepModel, replay: bool = False) -> list[HostOpPlan]:
    """The host ops as the host process runs them: pageable copies that block, the targets of
    every sync, optimizer-phase ops (skipped under ``no_sync``); with ``replay``, each op's
    captured per-step values (``HostOp.replay_us``)."""
    tasks = model.task_map()
    issue = issue_points(model)
    plans = []
    for j, op in enumerate(model.host.ops):
        block = None
        targets: tuple[tuple[int, str], ...] = ()
        t = tasks.get(op.task) if op.task is not None else None
        if op.kind == "launch" and t is not None and t.pinned is False \
                and t.copy_kind in ("h2d", "d2h"):
            block = t.copy_kind
        if op.kind == "sync":
            if t is not None:
                targets = ((0, t.id),)
            else:
                tl = []
                for ts in model.device.streams.values():
                    done_before = [x.id for x in ts if issue[x.id] < j]
                    if done_before:
                        tl.append((0, done_before[-1]))
                    elif ts:
                        tl.append((-1, ts[-1].id))
                targets = tuple(tl)
        optimizer = op.phase == "optimizer" or (t is not None and t.phase == "optimizer")
        plans.append(HostOpPlan(
            op.kind, op.name or (f"{op.kind} {op.task}" if op.task else op.kind), op.dur_us,
            op.task, op.category, block, targets, optimizer,
            Empirical(tuple(op.samples_us)) if op.kind == "cpu" and op.samples_us else None,
            t.launches if op.kind == "launch" and t is not None else 1,
            tuple(op.replay_us) if replay and op.replay_us is not None else None,
            op.threads if op.kind == "cpu" else 1,
            op.parallel_fraction if op.kind == "cpu" else 0.0,
            op.block_fraction if op.kind == "cpu" else 0.0,
            op.corun_ref if op.kind == "cpu" else 0.0))
    return plans


def stream_plans(model: StepModel, rank_index: int, replay: bool = False
                 ) -> dict[str, list[TaskPlan]]:
    """One rank's device tasks as its stream processes run them, durations set for the rank
    and gaps scaled by ``device.gap_scale``; with ``replay``, each task's captured per-step
    busy and idle times (``DeviceTask.replay_us``, ``replay_gap_us``)."""
    durs = task_durations(model, rank_index)
    launched = {op.task for op in model.host.ops if op.kind == "launch"}
    comm = model.comm.comm_stream
    gap = model.device.gap_scale
    return {s: [TaskPlan(
        t.id, t.name or t.id, t.category, durs[t.id], tuple(t.waits), t.id in launched,
        t.copy_kind if t.kind == "memcpy" and t.copy_kind in ("h2d", "d2h") else None,
        t.kind == "collective",
        (t.kind == "collective" and s == comm) or t.phase == "optimizer", t.gap_us * gap,
        tuple(t.prev_waits),
        tuple(t.replay_us) if replay and t.replay_us is not None else None,
        tuple(t.replay_gap_us) if replay and t.replay_gap_us is not None else None)
        for t in ts] for s, ts in model.device.streams.items()}


def step_marks(starts: list[list[float]], runs, ranks: list[int], n: int) -> list[list[float]]:
    """Per rank, the instants (µs) that delimit steps: entry 0 is step 0's start on the host;
    entry k+1 is when step k is over, the later of the host starting step k+1 and the device
    finishing step k's work. Step k's time is ``marks[k+1] - marks[k]``: the host's pace while
    it holds the device back, the device's pace while the host runs ahead of it (until CUDA's
    launch queue fills, a host that never waits would otherwise show its own transient pace)."""
    end: dict[tuple[int, int], float] = {}
    for r in runs:
        key = (r.rank, r.step)
        if r.end_us > end.get(key, -1.0):
            end[key] = r.end_us
    return [[st[0]] + [max(st[k + 1], end.get((rank, k), st[k + 1])) for k in range(n)]
            for rank, st in zip(ranks, starts)]


def _release_step_before(events: StepEvents, rank: int, model: StepModel) -> None:
    """Mark as done, at once, the step before the first (−1) of every task a ``prev_waits``
    names: the first simulated step waits for nothing earlier (in a window replay, that step's
    captured idle already holds any such wait, since calibration saw no step before it)."""
    for w in {w for ts in model.device.streams.values() for t in ts for w in t.prev_waits}:
        events.done(rank, -1, w).succeed()


def replay_marks(starts: list[float], runs, n: int, gpu_inclusive: bool) -> list[float]:
    """Step boundaries (µs) of a window replay, as calibration measures them
    (``calibration.steps``): each step from its start on the host to the next step's start;
    the last one, when it was the trace's last (``gpu_inclusive``), to the later of its host
    work's end and the end of its device work."""
    end = starts[n]
    if gpu_inclusive:
        end = max([end] + [r.end_us for r in runs if r.step == n - 1])
    return starts[:n] + [end]


@gc_paused
def simulate(model: StepModel, steps: int = 20, warmup: int = 3, seed: int = 0,
             recorder: Recorder | None = None, replay: bool = False) -> SimResult:
    """Simulate ``warmup + steps`` steps of every rank in ``model.ranks``.

    Args:
        model: the StepModel.
        steps: measured steps (≥ 1).
        warmup: steps simulated first and not measured (≥ 0), so the prefetch pipeline and
            the host's run-ahead reach steady state.
        seed: the run's one seed.
        recorder: optional extra observer; spans are always collected into the result.
        replay: replay the captured window (``model.replay``) instead: its steps in order,
            each with its own captured durations, from the state the capture started in (each
            stream's backlog), steps measured exactly as calibration measures them
            (:func:`replay_marks`); ``steps`` and ``warmup`` are then ignored (the window's
            length, no warm-up). The check that the simulator reproduces a measured window,
            transients included; predictions use the steady state (``replay=False``). Each
            ``next()`` takes its measured time on the host thread; no worker is simulated.

    Raises:
        SimulationError: a model that cannot run (no host ops, a bad skew, a deadlock such as a
            sync on a task launched later, a cycle of waits); ``replay`` on a model without a
            captured window or with several ranks.
    """
    captured = model.replay if replay else None
    if replay:
        if captured is None:
            raise SimulationError("this model has no captured window to replay (only the "
                                  "calibration of a single-rank GPU trace keeps one; a what-if "
                                  "drops it)")
        if len(model.ranks) != 1:
            raise SimulationError("a window replay is of one rank; this model has "
                                  f"{len(model.ranks)}")
        steps, warmup = len(captured.steps), 0
    if steps < 1 or warmup < 0:
        raise SimulationError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, "
                              f"warmup={warmup}")
    if not model.host.ops:
        raise SimulationError("the model's host thread has no ops: nothing to simulate")
    env = simpy.Environment()
    rec = ListRecorder()
    hook = _Tee(rec, recorder) if recorder is not None else rec
    n_total = warmup + steps + (0 if replay else 1)
    rngs = spawn_streams(seed, [f"rank{r.rank}.loader" for r in model.ranks]
                         + [f"rank{r.rank}.host" for r in model.ranks])
    barrier = Barrier(env, len(model.ranks)) if len(model.ranks) > 1 else None
    events = StepEvents(env)
    # a window replay gives the host its measured next() times: the main thread's own work,
    # whatever the workers did (they are not simulated)
    lp = model.loader if captured is None else model.loader.model_copy(update={"num_workers": 0})
    threads = lp.num_workers * lp.threads_per_worker + (1 if lp.pin_memory and lp.num_workers else 0)
    if model.host.uses_core:
        threads += max([op.threads for op in model.host.ops
                        if op.kind == "cpu" and op.parallel_fraction > 0] or [1])
    ops = host_plan(model, replay)
    accum = model.comm.grad_accum_steps

    def sync_step(step: int) -> bool:
        return (step + 1) % accum == 0

    backlog = captured.stream_busy_us if captured is not None else {}
    runs: list[TaskRun] = []
    waits: list[HostWait] = []
    hosts, starts, loaders = [], [], []
    per_host = {h: sum(r.host == h for r in model.ranks) for h in {r.host for r in model.ranks}}
    pools: dict[str, CpuPool] = {}
    for i, rp in enumerate(model.ranks):
        # ranks on one named host share its cores; a rank without a host has its own
        n_on = per_host[rp.host] if rp.host else 1
        cpu = pools.get(rp.host) if rp.host else None
        if cpu is None:
            cpu = CpuPool(env, lp.host_cores, contended=threads * n_on > lp.host_cores,
                          scale=model.host.cpu_scale, interference=model.host.interference)
            if rp.host:
                pools[rp.host] = cpu
        loader = DataLoaderSim(env, lp, cpu, rngs[f"rank{rp.rank}.loader"], hook, rp.rank)
        loaders.append(loader)
        engines = {"h2d": simpy.Resource(env, capacity=1), "d2h": simpy.Resource(env, capacity=1)}
        lq = LaunchQueue(env, model.device.launch_queue_depth)

        _release_step_before(events, rp.rank, model)
        for s, plans in stream_plans(model, i, replay).items():
            env.process(stream_process(env, rp.rank, s, plans, events, barrier, engines, hook,
                                       n_total, lq, runs, sync_step, backlog.get(s, 0.0)))
        st: list[float] = []
        starts.append(st)
        hosts.append(env.process(host_process(
            env, rp.rank, rank_host_plan(model, i, ops), rp.delay_us, cpu, model.host.uses_core, loader, events, hook,
            n_total, st, lq, waits, sync_step, rngs[f"rank{rp.rank}.host"])))
    try:
        env.run(until=simpy.AllOf(env, hosts))
    except RuntimeError as e:
        if "until" not in str(e) and "No scheduled events" not in str(e):
            raise
        stuck = [model.ranks[i].rank for i, st in enumerate(starts) if len(st) <= n_total]
        raise SimulationError(
            f"the simulation deadlocked on rank(s) {stuck} at t={env.now:.1f} us: a sync or "
            "wait on a task that can never finish (launched later in the step, or on another "
            "rank's collective that is never entered)") from None
    # let the device finish the measured window too (it may lag behind the host)
    last = warmup + steps - 1
    need = [events.done(rp.rank, last, tid) for rp in model.ranks for tid in model.task_map()]
    pending = [ev for ev in need if not ev.processed]
    if pending:
        try:
            env.run(until=simpy.AllOf(env, pending))
        except RuntimeError as e:
            if "until" not in str(e) and "No scheduled events" not in str(e):
                raise
            raise SimulationError(f"the device never finished step {last} (t={env.now:.1f} "
                                  "us): a task waits for something that never happens") from None
    if captured is not None:
        marks = [replay_marks(starts[0], runs, steps, captured.last_gpu_inclusive)]
    else:
        marks = step_marks(starts, runs, [r.rank for r in model.ranks], warmup + steps)
    step_us = np.array([[m[k + 1] - m[k] for k in range(warmup, warmup + steps)] for m in marks])
    if not np.isfinite(step_us).all():
        raise SimulationError("the simulated step time is not finite (durations too large?)")
    window = (marks[0][warmup], marks[0][warmup + steps])
    return SimResult(step_us=step_us, step_starts_us=starts, warmup=warmup, window_us=window,
                     spans=rec.spans, samples=rec.samples,
                     max_outstanding=[ld.stats.max_outstanding for ld in loaders],
                     ranks=[r.rank for r in model.ranks], runs=runs, host_waits=waits,
                     loader_stats=[ld.stats for ld in loaders], model=model, step_marks_us=marks)


@dataclass(frozen=True)
class WindowReplay:
    """A window replay (``simulate(model, replay=True)``) next to the measurement.

    Attributes:
        steps: the captured step numbers. measured_us, replayed_us: per step, its time (µs).
        compared: per step, whether it is compared (it had its own calibrated durations).
        result: the replay's simulation.
    """

    steps: list[int]
    measured_us: np.ndarray
    replayed_us: np.ndarray
    compared: np.ndarray
    result: SimResult

    @property
    def measured_median_us(self) -> float:
        return float(np.median(self.measured_us[self.compared]))

    @property
    def replayed_median_us(self) -> float:
        return float(np.median(self.replayed_us[self.compared]))

    @property
    def median_error(self) -> float:
        """(replayed − measured) / measured of the medians over the compared steps."""
        return self.replayed_median_us / self.measured_median_us - 1.0

    @property
    def max_step_error(self) -> float:
        """The largest |replayed − measured| / measured of one compared step."""
        m, r = self.measured_us[self.compared], self.replayed_us[self.compared]
        return float(np.max(np.abs(r - m) / m))


def window_replay(model: StepModel) -> WindowReplay:
    """Replay ``model``'s captured window and pair each step with its measured time.

    Raises:
        SimulationError: no captured window, several ranks, or no step with its own durations.
    """
    res = simulate(model, replay=True)
    w = model.replay
    compared = np.array(w.calibrated, dtype=bool)
    if not compared.any():
        raise SimulationError("no step of the captured window has its own calibrated durations")
    return WindowReplay(list(w.steps), np.array(w.measured_step_us, dtype=float),
                        res.step_us[0], compared, res)
