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
from stepsim.models.device import Barrier, LaunchQueue, StepEvents, TaskRun, stream_process
from stepsim.models.host import HostWait, host_process
from stepsim.models.loader import DataLoaderSim, LoaderStats
from stepsim.models.params import StepModel
from stepsim.models.plans import host_plan, issue_points, stream_plans, task_durations  # noqa: F401
from stepsim.models.ranks import rank_host_plan
from stepsim.models.solo import Unsolvable, solvable, solve
from stepsim.simcore.errors import SimulationError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.record import Block, ListRecorder, NullRecorder, Recorder, Span
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

    def shifted(self, spans, dt_us, dstep):
        for r in self.recs:
            r.shifted(spans, dt_us, dstep)


def step_marks(starts: list[list[float]], end: dict[tuple[int, int], float], ranks: list[int],
               n: int) -> list[list[float]]:
    """Per rank, the instants (µs) that delimit steps: entry 0 is step 0's start on the host;
    entry k+1 is when step k is over, the later of the host starting step k+1 and the device
    finishing step k's work (``end``: its last device task's end, per (rank, step)). Step k's time is
    ``marks[k+1] - marks[k]``: the host's pace while it holds the device back, the device's
    pace while the host runs ahead of it (until CUDA's launch queue fills, a host that never
    waits would otherwise show its own transient pace)."""
    return [[st[0]] + [max(st[k + 1], end.get((rank, k), st[k + 1])) for k in range(n)]
            for rank, st in zip(ranks, starts)]


def replay_marks(starts: list[float], end: dict[tuple[int, int], float], rank: int, n: int,
                 gpu_inclusive: bool) -> list[float]:
    """Step boundaries (µs) of a window replay, as calibration measures them
    (``calibration.steps``): each step from its start on the host to the next step's start;
    the last one, when it was the trace's last (``gpu_inclusive``), to the later of its host
    work's end and the end of its device work (``end``, per (rank, step))."""
    last = starts[n]
    if gpu_inclusive:
        last = max(last, end.get((rank, n - 1), last))
    return starts[:n] + [last]


def _released(model: StepModel) -> set[str]:
    """The tasks some ``prev_waits`` names: their step before the first (−1) counts as done at
    once, since the first simulated step waits for nothing earlier (in a window replay, that
    step's captured idle already holds any such wait: calibration saw no step before it)."""
    return {w for ts in model.device.streams.values() for t in ts for w in t.prev_waits}


class _Setup:
    """What both engines share: the run's steps, plans, loader parameters and random streams."""

    def __init__(self, model: StepModel, steps: int, warmup: int, seed: int, replay: bool,
                 hook: Recorder):
        captured = model.replay if replay else None
        self.model, self.hook, self.replay = model, hook, replay
        self.n_total = warmup + steps + (0 if replay else 1)
        self.last = warmup + steps - 1
        self.rngs = spawn_streams(seed, [f"rank{r.rank}.loader" for r in model.ranks]
                                  + [f"rank{r.rank}.host" for r in model.ranks])
        # a window replay gives the host its measured next() times: the main thread's own
        # work, whatever the workers did (they are not simulated)
        lp = model.loader if captured is None else model.loader.model_copy(
            update={"num_workers": 0})
        self.lp = lp
        threads = lp.num_workers * lp.threads_per_worker + (
            1 if lp.pin_memory and lp.num_workers else 0)
        if model.host.uses_core:
            threads += max([op.threads for op in model.host.ops
                            if op.kind == "cpu" and op.parallel_fraction > 0] or [1])
        self.threads = threads
        self.ops = host_plan(model, replay)
        accum = model.comm.grad_accum_steps
        self.sync_step = lambda step: (step + 1) % accum == 0
        self.backlog = captured.stream_busy_us if captured is not None else {}
        self.per_host = {h: sum(r.host == h for r in model.ranks)
                         for h in {r.host for r in model.ranks}}

    def pool(self, env: simpy.Environment, host: str, pools: dict[str, CpuPool]) -> CpuPool:
        """The core pool of a rank on ``host`` (ranks on one named host share its cores; a
        rank without a host has its own)."""
        cpu = pools.get(host) if host else None
        if cpu is None:
            n_on = self.per_host[host] if host else 1
            m = self.model
            cpu = CpuPool(env, self.lp.host_cores, contended=self.threads * n_on > self.lp.host_cores,
                          scale=m.host.cpu_scale, interference=m.host.interference)
            if host:
                pools[host] = cpu
        return cpu


class _Runs:
    """Receives task runs (``append``): keeps them when asked, and always each (rank, step)'s
    last device end (µs), which the step marks need."""

    def __init__(self, keep: bool):
        self.kept: list[TaskRun] = []
        self.keep = keep
        self.end: dict[tuple[int, int], float] = {}

    def append(self, r: TaskRun) -> None:
        if self.keep:
            self.kept.append(r)
        key = (r.rank, r.step)
        if r.end_us > self.end.get(key, -1.0):
            self.end[key] = r.end_us

    def shifted(self, block: Block, dt_us: float, dstep: int) -> None:
        """Receive the runs of a repeated step (``block.rows``) moved by ``dt_us`` µs and
        ``dstep`` steps."""
        if self.keep:
            self.kept.extend(block.moved(dt_us, dstep))
        end = self.end
        for (rank, step), e in block.maxima((0, 1), 7).items():
            key, e = (rank, step + dstep), e + dt_us
            if e > end.get(key, -1.0):
                end[key] = e


class _Waits(list):
    """Receives host waits; keeps them only when asked."""

    def __init__(self, keep: bool):
        super().__init__()
        if not keep:
            self.append = lambda w: None


def _solved(su: _Setup, runs: _Runs, waits: list):
    """The run without events (:mod:`models.solo`) when the model qualifies, else None."""
    m = su.model
    if len(m.ranks) != 1:
        return None
    rp = m.ranks[0]
    env = simpy.Environment()
    cpu = su.pool(env, rp.host, {})
    streams = stream_plans(m, 0, su.replay)
    ops = rank_host_plan(m, 0, su.ops)
    if cpu.contended or cpu.interference > 0 or not solvable(
            1, True, su.lp.num_workers, ops, streams):
        return None
    loader = DataLoaderSim(env, su.lp, cpu, su.rngs[f"rank{rp.rank}.loader"], su.hook, rp.rank)
    starts = solve(rp.rank, ops, streams, rp.delay_us, m.host.uses_core, cpu.scale, loader,
                   m.device.launch_queue_depth, su.hook, runs, waits, su.n_total, su.last,
                   su.sync_step, su.rngs[f"rank{rp.rank}.host"], su.backlog, _released(m))
    return [starts], [loader]


def _simulated(su: _Setup, runs: _Runs, waits: list):
    """The run as SimPy processes (see the module docstring for their start order)."""
    model, hook, n_total = su.model, su.hook, su.n_total
    env = simpy.Environment()
    barrier = Barrier(env, len(model.ranks)) if len(model.ranks) > 1 else None
    events = StepEvents(env)
    hosts, starts, loaders = [], [], []
    pools: dict[str, CpuPool] = {}
    released = _released(model)
    for i, rp in enumerate(model.ranks):
        cpu = su.pool(env, rp.host, pools)
        loader = DataLoaderSim(env, su.lp, cpu, su.rngs[f"rank{rp.rank}.loader"], hook, rp.rank)
        loaders.append(loader)
        engines = {"h2d": simpy.Resource(env, capacity=1), "d2h": simpy.Resource(env, capacity=1)}
        lq = LaunchQueue(env, model.device.launch_queue_depth)
        for w in released:
            events.done(rp.rank, -1, w).succeed()
        for s, plans in stream_plans(model, i, su.replay).items():
            env.process(stream_process(env, rp.rank, s, plans, events, barrier, engines, hook,
                                       n_total, lq, runs, su.sync_step, su.backlog.get(s, 0.0)))
        st: list[float] = []
        starts.append(st)
        hosts.append(env.process(host_process(
            env, rp.rank, rank_host_plan(model, i, su.ops), rp.delay_us, cpu,
            model.host.uses_core, loader, events, hook, n_total, st, lq, waits, su.sync_step,
            su.rngs[f"rank{rp.rank}.host"])))
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
    last = su.last
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
    return starts, loaders


@gc_paused
def simulate(model: StepModel, steps: int = 20, warmup: int = 3, seed: int = 0,
             recorder: Recorder | None = None, replay: bool = False, keep: str = "all",
             engine: str = "auto") -> SimResult:
    """Simulate ``warmup + steps`` steps of every rank in ``model.ranks``.

    Args:
        model: the StepModel.
        steps: measured steps (≥ 1).
        warmup: steps simulated first and not measured (≥ 0), so the prefetch pipeline and
            the host's run-ahead reach steady state.
        seed: the run's one seed.
        recorder: optional extra observer, streamed every span.
        keep: what the result keeps: ``"all"`` (every span, task run and host wait: what
            summaries, timelines and gap attribution read) or ``"steps"`` (only the step
            times: memory flat in steps; ``spans``, ``samples``, ``runs`` and ``host_waits``
            are empty).
        engine: ``"auto"`` solves a rank that contends with nothing without events
            (:mod:`models.solo`, same instants) and runs SimPy processes otherwise;
            ``"events"`` always runs the processes.
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
    if keep not in ("all", "steps"):
        raise SimulationError(f"keep must be 'all' or 'steps', got {keep!r}")
    if engine not in ("auto", "events"):
        raise SimulationError(f"engine must be 'auto' or 'events', got {engine!r}")
    rec = ListRecorder() if keep == "all" else None
    hooks = [h for h in (rec, recorder) if h is not None]
    hook = hooks[0] if len(hooks) == 1 else _Tee(*hooks) if hooks else NullRecorder()
    su = _Setup(model, steps, warmup, seed, replay, hook)
    runs, waits = _Runs(keep == "all"), _Waits(keep == "all")
    try:
        starts, loaders = (engine == "auto" and _solved(su, runs, waits)) or _simulated(
            su, runs, waits)
    except Unsolvable:   # a wait that never ends: the processes report where
        if rec is not None:
            rec.spans.clear()
            rec.samples.clear()
        runs, waits = _Runs(keep == "all"), _Waits(keep == "all")
        starts, loaders = _simulated(su, runs, waits)
    ranks = [r.rank for r in model.ranks]
    if captured is not None:
        marks = [replay_marks(starts[0], runs.end, ranks[0], steps,
                              captured.last_gpu_inclusive)]
    else:
        marks = step_marks(starts, runs.end, ranks, warmup + steps)
    step_us = np.array([[m[k + 1] - m[k] for k in range(warmup, warmup + steps)] for m in marks])
    if not np.isfinite(step_us).all():
        raise SimulationError("the simulated step time is not finite (durations too large?)")
    window = (marks[0][warmup], marks[0][warmup + steps])
    return SimResult(step_us=step_us, step_starts_us=starts, warmup=warmup, window_us=window,
                     spans=rec.spans if rec else [], samples=rec.samples if rec else {},
                     max_outstanding=[ld.stats.max_outstanding for ld in loaders],
                     ranks=ranks, runs=runs.kept, host_waits=list(waits),
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
