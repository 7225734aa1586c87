"""The verbs of the command line as Python functions, with the same names and defaults
(``import stepsim; stepsim.whatif("model.json", set="loader.num_workers=4")``). Each returns a
typed result (:mod:`stepsim.results`; the planner verbs', :mod:`stepsim.results_planner`) with
``to_dict()`` and ``to_frame()``; the CLI (:mod:`stepsim.cli`) parses its arguments, calls
these and renders what they return.

- A model is a path (JSON or YAML) or a :class:`~stepsim.models.params.StepModel`.
- What-if operations are given as the CLI's options are: ``scenario`` (files), ``set``
  (``"PATH=VALUE"`` or a mapping path → value), ``scale`` (``(factor, selector)`` pairs),
  ``remove`` (selectors), ``fix`` (``"NAME[:ARG=V,...]"``), each a single value or a list;
  they apply in that order, after ``ops`` (operation objects or ``(kind, value)`` pairs, in
  their own order, as the CLI collects them).
- Outputs (``output``, ``save_model``, ``plot``, ...) are written when named, atomically.
- Errors raise :class:`~stepsim.simcore.errors.StepsimError` subclasses naming the file and the
  problem; nothing here prints or exits. Counts (``steps``, ``warmup``, ``draws``, ``jobs``,
  ``seed``, ``plot_steps``, ``max_moves``) and fractions (``knee_tol``, ``min_gain``) have the
  CLI's bounds (:mod:`stepsim.limits`): outside them, or not numbers, they raise
  :class:`~stepsim.limits.ArgumentError` naming the argument.
- Times are µs in attributes (``*_us``) and ms in ``to_dict()``/``to_frame()`` (``*_ms``).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from stepsim.api_common import guard, input_warnings, load_model, operations, sim_kw
from stepsim.api_planner import ceiling, plan, sweep, validate, whatif
from stepsim.limits import DEFAULT_DRAWS, DEFAULT_STEPS, DEFAULT_WARMUP, bounded

if TYPE_CHECKING:  # the heavy modules load when a verb runs, so ``stepsim --help`` is quick
    from stepsim.models.params import StepModel
    from stepsim.results import Calibration, Diagnosed, Simulation, WindowSimulation

__all__ = ["calibrate", "simulate", "whatif", "sweep", "ceiling", "plan", "validate",
           "diagnose", "report", "load_model", "operations", "DEFAULT_STEPS", "DEFAULT_WARMUP"]


# ---------------------------------------------------------------- calibrate / simulate -------
def calibrate(trace: str | Path, output: str | Path | None = None,
              sidecar: str | Path | None = None, step_regex: str | None = None,
              replicates=(), steps: str | tuple[int | None, int | None] | None = None
              ) -> Calibration:
    """Calibrate a StepModel from a Kineto trace (a ``.json``/``.json.gz`` file, a folder of
    per-rank traces, or a capture folder with its sidecar), check it against its own trace, and
    write it to ``output`` when given. ``replicates``: other captures of the same setting
    (folders or sidecars), which measure the host's run-to-run speed noise for the intervals.
    ``steps``: ``"A:B"`` or ``(A, B)``, only the steps ``ProfilerStep#A`` to ``#B-1``, the
    trace read as a stream that keeps only their events (:mod:`calibration.stream`).

    Raises:
        InputError: an unreadable or uncalibratable trace or sidecar (named).
    """
    from stepsim.simcore.gcpause import gc_paused

    guard([trace, sidecar, *replicates], first="trace", output=output)
    if steps is not None:
        from stepsim.limits import ArgumentError, parse_steps

        if not isinstance(steps, str):    # (A, B): read as "A:B" ((5, "x") was taken as B)
            pair = steps if isinstance(steps, (tuple, list)) and len(steps) == 2 else None
            if pair is None or not all(x is None or (isinstance(x, int) and not isinstance(
                    x, bool)) for x in pair):
                raise ArgumentError(f"steps: expected 'A:B' or (A, B) of whole numbers or "
                                    f"None, got {steps!r}")
            steps = ":".join("" if x is None else str(x) for x in pair)
        try:
            steps = parse_steps(steps)
        except ValueError as e:
            raise ArgumentError(f"steps: {e}") from None
    # the collector paused from the fit to the replay: its passes over the heap the fit left
    # (a rank folder's tables, fits and models) took a sixth to a quarter of the replay of 256 ranks
    return gc_paused(_calibration)(trace, output, sidecar, step_regex, replicates, steps)


def _calibration(trace, output, sidecar, step_regex, replicates, steps) -> Calibration:
    """:func:`calibrate` of checked arguments."""
    from stepsim.fit import calibrate as fit, steady_beside
    from stepsim.models.params import save_model
    from stepsim.models.simulate import window_replay
    from stepsim.results import Calibration
    from stepsim.models.warning_record import records
    from stepsim.models.window_effect import window_speed_effect
    from stepsim.views import grouped_warnings
    from stepsim.warning_order import ranked

    model = fit(trace, sidecar=sidecar, step_regex=step_regex, replicates=list(replicates),
                steps=steps)
    model = window_speed_effect(model, DEFAULT_STEPS, DEFAULT_WARMUP)   # (where it is said)

    def written_and_replayed():
        if output is not None:
            save_model(model, output)
        return window_replay(model) if model.replay is not None else None

    # the steady state in a forked process while this one writes and replays the window,
    # where it is long enough to pay for the fork (steady_beside)
    (mean_us, median_us), window = steady_beside(model, DEFAULT_STEPS, DEFAULT_WARMUP,
                                                 written_and_replayed)
    warnings = grouped_warnings(records(model.meta))
    return Calibration(model=model, output=None if output is None else str(output),
                       warnings=tuple(r.text for r in warnings), window=window,
                       steady_mean_us=mean_us, steady_median_us=median_us,
                       ranked=ranked(warnings))


@bounded
def simulate(model: str | Path | StepModel, steps: int | None = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, seed: int = 0, window: bool = False,
             chrome_trace: str | Path | None = None, plot: str | Path | None = None,
             measured: str | Path | None = None, plot_steps: int = 1,
             queue_plot: str | Path | None = None) -> Simulation | WindowSimulation:
    """Simulate the model's steady state for ``steps`` steps (None: as many as pin its
    mean step, see :data:`stepsim.limits.DEFAULT_STEPS`), or, with ``window``, replay its
    captured window step by step against the measurement (the steady state's ``warnings``:
    what is wrong with the model's own capture, which the CLI prints before it); ``chrome_trace`` writes the
    simulated timeline; ``plot`` its lanes (``plot_steps`` steps; the ``measured`` trace's lanes above them),
    ``queue_plot`` the prefetch queue (see :func:`stepsim.views.draw_simulation`).

    Raises:
        InputError / ModelError / SimulationError: a bad model file or a model that cannot run.
    """
    from stepsim.models.metrics import summarize
    from stepsim.models.simulate import window_replay
    from stepsim.models.stepcount import simulate_counted
    from stepsim.report.chrome import write_chrome_trace
    from stepsim.results import Simulation, WindowSimulation
    from stepsim.views import draw_simulation

    from stepsim.limits import ArgumentError

    # an argument that would be ignored is refused: the user meant it to do something
    if measured is not None and not plot:
        raise ArgumentError("--measured draws a real trace's lanes above the simulated ones: "
                            "give --plot FILE too")
    if window and (plot or queue_plot):
        raise ArgumentError("--window replays the captured window and draws nothing: --plot "
                            "and --queue-plot draw the steady state; run them without --window")
    guard([model, measured], chrome_trace=chrome_trace, plot=plot, queue_plot=queue_plot)
    m = load_model(model)
    if window:
        w = window_replay(m)
        out: Simulation | WindowSimulation = WindowSimulation(model=m, replay=w)
        res = w.result
    else:
        res, count = simulate_counted(m, steps, warmup, seed)
        out = Simulation(model=m, result=res, summary=summarize(res), count=count,
                         warnings=input_warnings(m))
        if plot or queue_plot:
            draw_simulation(m, res, out.summary, plot, measured, plot_steps, queue_plot)
    if chrome_trace:
        write_chrome_trace(res, chrome_trace)
    return out


# ---------------------------------------------------------------- diagnose -------------------
@bounded
def diagnose(input: str | Path | StepModel, step_regex: str | None = None,
             peak: str | None = None, plot: str | Path | None = None,
             steps: int | None = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, seed: int = 0,
             draws: int = DEFAULT_DRAWS, jobs: int = 0) -> Diagnosed:
    """Walk the diagnosis tree (:mod:`scenarios.diagnose`) for a trace (calibrated first: a
    file, a capture folder or a folder of ranks, whose first file gives the roofline and
    memory) or a StepModel; ``peak`` (``fp32=...,bw=...``) overrides or adds the GPU's peaks;
    ``plot`` writes the roofline plot.

    Raises:
        InputError: an unreadable trace or model; ModelError: a bad ``peak``.
    """
    from stepsim.diagnosis import diagnose as run

    return run(input, step_regex, peak, plot, draws=draws, **sim_kw(steps, warmup, seed, jobs))


@bounded
def report(model: str | Path | StepModel, ops: Sequence = (), *, output=None, ledger=None,
           measured=None, steps: int | None = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP,
           seed: int = 0, draws: int = DEFAULT_DRAWS, jobs: int = 0, plot_steps: int = 1,
           with_plan: bool = True, progress: bool = False):
    """One self-contained HTML report written to ``output``: one what-if per operation or
    scenario file in ``ops`` (see :func:`stepsim.views.report`, which takes the rest)."""
    from stepsim.scenarios.transforms import describe_ops
    from stepsim.scenarios.op_text import load_scenario

    guard([model, ledger, measured], ops, output=output)
    whatifs = []
    for item in ops:
        kind, value = item if isinstance(item, tuple) else ("", None)
        todo = operations([item])
        whatifs.append(((load_scenario(value).name or Path(value).stem) if kind == "scenario"
                        else describe_ops(todo), todo))
    from stepsim.views import report as run

    model = load_model(model)
    if len(whatifs) > 1:
        _each_alone(model, whatifs)
    return run(model, whatifs, output=output, ledger=ledger, measured=measured,
               draws=draws, plot_steps=plot_steps, with_plan=with_plan, progress=progress,
               **sim_kw(steps, warmup, seed, jobs))


def _each_alone(model, whatifs) -> None:
    """Apply each of the report's what-ifs to ``model`` before any simulation; one that does
    not apply raises its ModelError with the reason it was applied alone: a fresh user's
    ``report --set loader.num_workers=2 --fix intra_op_threads`` (2026-12-05) was refused
    after 3 s as "its 2 intra-op threads and 0 DataLoader thread(s) fit the 2 cores", with
    nothing saying that the report had not applied the ``--set`` first."""
    from stepsim.scenarios.transforms import apply_ops
    from stepsim.simcore.errors import ModelError

    for name, todo in whatifs:
        try:
            apply_ops(model, todo)
        except ModelError as e:
            raise type(e)(
                f"{e} (report makes one what-if of each operation alone, here {name}: to "
                "combine operations, list them in one --scenario file, e.g. 'ops: [{op: set, "
                "path: loader.num_workers, value: 2}, {op: fix, name: intra_op_threads}]')"
            ) from e
