"""Run a StepModel in SimPy and collect what happened.

Two engines give the same instants (:mod:`models.engine`): a rank that contends with nothing
(one rank, a host thread that cannot lose its core, no DataLoader workers, no copy engine two
streams share) is solved without events, its repeating steps replayed (:mod:`models.solo`,
:mod:`models.memo`); every other model runs as SimPy processes. Either streams each span to
the recorder as it finishes; the result keeps every record, or only the step times
(``keep="steps"``: memory flat in steps).

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

from stepsim.models.cpu import Oversubscribed
from stepsim.models.device import TaskRun
from stepsim.models.engine import Runs, Setup, Tee, Waits, solved
from stepsim.models.host import HostWait
from stepsim.models.host_speed import at_capture_speed
from stepsim.models.loader import LoaderStats
from stepsim.models.params import StepModel
from stepsim.models.plans import host_plan, issue_points, stream_plans, task_durations  # noqa: F401
from stepsim.models.processes import simulated
from stepsim.models.sim_work import work_problem
from stepsim.models.solo import Unsolvable
from stepsim.simcore.errors import SimulationError
from stepsim.simcore.gcpause import gc_paused
from stepsim.simcore.record import (HostSideRecorder, ListRecorder, NullRecorder, Recorder,
                                   Span, every_span)


KEEPS = ("all", "steps", "brief", "runs")
"""What a simulation's result may keep (:func:`simulate`'s ``keep``)."""
ENGINES = ("auto", "events", "quanta")
"""How a simulation may be run (:func:`simulate`'s ``engine``)."""


@dataclass
class SimResult:
    """What a simulation produced.

    Attributes:
        step_us: shape (n_ranks, steps): each measured step's time (µs), start to next start.
        step_starts_us: per rank, the host's step-start instants (µs), warm-up included.
        warmup: steps simulated before the measured window.
        window_us: (start, end) instants of the measured window on rank 0 (µs).
        spans: every span recorded (see :class:`simcore.record.Span`); with ``span_blocks``
            (``keep="brief"``) those of the steps solved, the repeated steps' held as
            blocks: :meth:`every_span` gives them all.
        samples: sampled series, e.g. ``rank0.loader.ready`` → [(t_us, value), …].
        max_outstanding: per rank, the most batches ever outstanding in its DataLoader.
        ranks: the rank numbers, in simulation order.
        runs: every device task execution (:class:`models.device.TaskRun`), per stream in
            stream order; with ``keep="brief"`` a :class:`models.run_columns.BlockRuns`
            (the repeated steps' held as their blocks: it reads as the list, with columns).
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
    span_blocks: list = field(default_factory=list)
    """The repeated steps' spans, not made (``keep="brief"``): ``(where they go in spans,
    block, shift µs, shift in steps)`` each, in order
    (:attr:`simcore.record.HostSideRecorder.blocks`)."""

    def every_span(self, lanes: set | None = None) -> list[Span]:
        """Every span recorded, in emission order (``spans`` with ``span_blocks``' rows
        moved in); only those on ``lanes`` when given."""
        if not self.span_blocks:
            return self.spans if lanes is None else [sp for sp in self.spans if sp[0] in lanes]
        return every_span(self.spans, self.span_blocks, lanes)

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
            are empty) or ``"brief"`` (as ``"all"`` but the device streams' spans, which
            :func:`models.metrics.brief_summary` does not read: :mod:`models.blame` reads the
            task runs; :class:`simcore.record.HostSideRecorder`; a repeated step's spans
            and runs are held as its block, not made) or ``"runs"`` (the task runs
            and host waits, no span: what :func:`models.coarsen.coarsen`'s probe reads).
        engine: ``"auto"`` solves a rank that contends with nothing without events
            (:mod:`models.solo`, same instants) and runs SimPy processes otherwise;
            ``"events"`` always runs the processes; ``"quanta"`` too, every CPU work of a
            pool that can be contended in quanta (without ``recorder``, the processes run
            such a pool's work as one timeout while no thread can wait for a core:
            :mod:`models.cpu`, same instants).
        replay: replay the captured window (``model.replay``) instead: its steps in order,
            each with its own captured durations, from the state the capture started in (each
            stream's backlog), steps measured exactly as calibration measures them
            (:func:`replay_marks`); ``steps`` and ``warmup`` are then ignored (the window's
            length, no warm-up). The check that the simulator reproduces a measured window,
            transients included; predictions use the steady state (``replay=False``). Each
            ``next()`` takes its measured time on the host thread; no worker is simulated.

    Raises:
        SimulationError: a model that cannot run (no host ops, a bad skew, more steps of it
            than :data:`models.sim_work.MAX_RUN_WORK` allows, a deadlock such as a
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
    problem = None if replay else work_problem(model, steps, warmup)
    if problem:   # a given count of a large model: memory and time past any useful run
        raise SimulationError(problem)
    if keep not in KEEPS:
        raise SimulationError(f"keep must be {_one_of(KEEPS)}, got {keep!r}")
    if engine not in ENGINES:
        raise SimulationError(f"engine must be {_one_of(ENGINES)}, got {engine!r}")
    rec = recorder_for(keep)
    hooks = [h for h in (rec, recorder) if h is not None]
    hook = hooks[0] if len(hooks) == 1 else Tee(*hooks) if hooks else NullRecorder()
    # an adaptive pool may have to run again (Oversubscribed): only when no outside recorder
    # was streamed the first try
    adaptive = recorder is None and engine != "quanta"
    su = Setup(model, steps, warmup, seed, replay, hook, adaptive)
    kept = keep != "steps"
    runs, waits = Runs(kept, keep == "brief"), Waits(kept)
    try:
        starts, loaders = (engine == "auto" and solved(su, runs, waits)) or simulated(
            su, runs, waits)
    except (Unsolvable, Oversubscribed):   # Unsolvable: the processes report where
        if rec is not None:
            rec.clear()
        runs, waits = Runs(kept, keep == "brief"), Waits(kept)
        su = Setup(model, steps, warmup, seed, replay, hook)   # the random streams afresh
        starts, loaders = simulated(su, runs, waits)
    return result_of(model, steps, warmup, starts, loaders, runs, waits, rec, captured)


def _one_of(names: tuple[str, ...]) -> str:
    """``names`` as a message lists them: "'a', 'b' or 'c'"."""
    said = [repr(n) for n in names]
    return " or ".join([", ".join(said[:-1]), said[-1]] if len(said) > 1 else said)


def recorder_for(keep: str) -> Recorder | None:
    """The recorder that keeps what ``keep`` asks (see :func:`simulate`), None for
    ``"steps"`` and ``"runs"``."""
    return ListRecorder() if keep == "all" else HostSideRecorder() if keep == "brief" else None


def measured_steps_us(model: StepModel, steps: int, warmup: int, starts, runs: Runs,
                      captured=None) -> tuple[np.ndarray, list[list[float]]]:
    """``(step_us, marks)`` of the measured steps (:func:`step_marks`, or
    :func:`replay_marks` for a window replay's ``captured`` window): needs ``starts`` to entry
    ``warmup + steps`` and the device through step ``warmup + steps − 1``.

    Raises:
        SimulationError: a step time that is not finite."""
    ranks = [r.rank for r in model.ranks]
    if captured is not None:
        marks = [replay_marks(starts[0], runs.end, ranks[0], steps,
                              captured.last_gpu_inclusive)]
    else:
        marks = step_marks(starts, runs.end, ranks, warmup + steps)
    step_us = np.array([[m[k + 1] - m[k] for k in range(warmup, warmup + steps)] for m in marks])
    if not np.isfinite(step_us).all():
        raise SimulationError("the simulated step time is not finite (durations too large?)")
    return step_us, marks


def result_of(model: StepModel, steps: int, warmup: int, starts, loaders, runs: Runs,
              waits: list, rec: Recorder | None, captured=None) -> SimResult:
    """The :class:`SimResult` of a finished run of ``model`` (what either engine gave:
    ``starts``, ``loaders``, the sinks ``runs`` and ``waits``, the recorder ``rec``)."""
    step_us, marks = measured_steps_us(model, steps, warmup, starts, runs, captured)
    window = (marks[0][warmup], marks[0][warmup + steps])
    return SimResult(step_us=step_us, step_starts_us=starts, warmup=warmup, window_us=window,
                     spans=rec.spans if rec else [], samples=rec.samples if rec else {},
                     span_blocks=getattr(rec, "blocks", []),
                     max_outstanding=[ld.stats.max_outstanding for ld in loaders],
                     ranks=[r.rank for r in model.ranks], runs=runs.every(),
                     host_waits=list(waits), loader_stats=[ld.stats for ld in loaders],
                     model=model, step_marks_us=marks)


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
    """Replay ``model``'s captured window and pair each step with its measured time, at the
    capture's own host speed (:func:`models.host_speed.at_capture_speed`: replicates move
    ``host.cpu_scale`` to the runs' mean speed, which the captured steps did not run at).

    Raises:
        SimulationError: no captured window, several ranks, or no step with its own durations.
    """
    res = simulate(at_capture_speed(model), replay=True)
    w = model.replay
    compared = np.array(w.calibrated, dtype=bool)
    if not compared.any():
        raise SimulationError("no step of the captured window has its own calibrated durations")
    return WindowReplay(list(w.steps), np.array(w.measured_step_us, dtype=float),
                        res.step_us[0], compared, res)
