"""The verbs of the command line as Python functions, with the same names and defaults
(``import stepsim; stepsim.whatif("model.json", set="loader.num_workers=4")``). Each returns a
typed result (:mod:`stepsim.results`) with ``to_dict()`` and ``to_frame()``; the CLI
(:mod:`stepsim.cli`) parses its arguments, calls these and renders what they return.

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

from collections import Counter
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from stepsim.limits import DEFAULT_STEPS, DEFAULT_WARMUP, bounded
from stepsim.simcore.errors import StepsimError

if TYPE_CHECKING:  # the heavy modules load when a verb runs, so ``stepsim --help`` is quick
    from stepsim.models.params import StepModel
    from stepsim.results import (Calibration, Ceilings, Diagnosed, PlanResult, Simulation,
                                 Sweep, Validation, WhatIf, WindowSimulation)
    from stepsim.scenarios.transforms import Operation

__all__ = ["calibrate", "simulate", "whatif", "sweep", "ceiling", "plan", "validate",
           "diagnose", "report", "load_model", "operations", "DEFAULT_STEPS", "DEFAULT_WARMUP"]


def load_model(model: str | Path | StepModel) -> StepModel:
    """A StepModel from a JSON or YAML file (a StepModel is returned as it is).

    Raises:
        InputError: missing or unreadable file, or not a valid StepModel (named).
    """
    from stepsim.models.params import load_model as load

    return model if _is_step_model(model) else load(model)


def _is_step_model(model) -> bool:
    from stepsim.models.params import StepModel

    return isinstance(model, StepModel)


def operations(ops: Sequence = (), scenario=None, set=None, scale=None, remove=None,
               fix=None) -> list[Operation]:
    """The what-if operations in the order they apply
    (:func:`stepsim.scenarios.options.operations`)."""
    from stepsim.scenarios.options import operations as parse

    return parse(ops, scenario, set, scale, remove, fix)


def _name(model: str | Path | StepModel, loaded: StepModel) -> str:
    """The model's name, else its file's stem."""
    if loaded.meta.name:
        return loaded.meta.name
    return Path(model).stem if not _is_step_model(model) else "model"


def _guard(inputs: Sequence, ops: Sequence = (), scenario=None, first: str = "model",
           **outputs) -> None:
    """No output (keyword → path) over an input, scenario files included; the first input
    (named ``first``) must be a file path (or a StepModel).

    Raises:
        ArgumentError: the first input is neither (e.g. None or a dict).
    """
    import os

    from stepsim.limits import ArgumentError

    if not (isinstance(inputs[0], (str, os.PathLike)) or _is_step_model(inputs[0])):
        raise ArgumentError(f"{first}: expected a file path or a StepModel, got "
                            f"{type(inputs[0]).__name__}")
    from stepsim.scenarios.options import scenario_files
    from stepsim.simcore.outputs import refuse_overwriting_inputs

    refuse_overwriting_inputs([*inputs, *scenario_files(ops, scenario)], outputs.items())


def _progress(description: str, enabled: bool):
    """A progress bar on stderr (a terminal only), or none."""
    if not enabled:
        return nullcontext(None)
    from stepsim.report.planner import progress_bar

    return progress_bar(description)


def _sim_kw(steps: int | None, warmup: int, seed: int, jobs: int) -> dict:
    from stepsim.scenarios.parallel import default_jobs

    return {"steps": steps, "warmup": warmup, "seed": seed, "jobs": jobs or default_jobs()}


def _caveats(model: StepModel, ops: Sequence[Operation], paths: Sequence[str] = ()):
    from stepsim.scenarios.caveats import caveats

    return tuple(caveats(model, ops, paths))


# ---------------------------------------------------------------- calibrate / simulate -------
def calibrate(trace: str | Path, output: str | Path | None = None,
              sidecar: str | Path | None = None, step_regex: str | None = None,
              replicates=()) -> Calibration:
    """Calibrate a StepModel from a Kineto trace (a ``.json``/``.json.gz`` file, a folder of
    per-rank traces, or a capture folder with its sidecar), check it against its own trace, and
    write it to ``output`` when given. ``replicates``: other captures of the same setting
    (folders or sidecars), which measure the host's run-to-run speed noise for the intervals.

    Raises:
        InputError: an unreadable or uncalibratable trace or sidecar (named).
    """
    from stepsim.calibration.calibrate import calibrate as fit
    from stepsim.models.params import save_model
    from stepsim.models.simulate import window_replay
    from stepsim.results import Calibration
    from stepsim.scenarios.stepcount import simulate_counted
    from stepsim.views import grouped_warnings

    _guard([trace, sidecar, *replicates], first="trace", output=output)
    model = fit(trace, sidecar=sidecar, step_regex=step_regex, replicates=list(replicates))
    if output is not None:
        save_model(model, output)
    window = window_replay(model) if model.replay is not None else None
    res, _ = simulate_counted(model, DEFAULT_STEPS, DEFAULT_WARMUP, 0, keep="steps")
    return Calibration(model=model, output=None if output is None else str(output),
                       warnings=grouped_warnings(model.meta.warnings), window=window,
                       steady_mean_us=res.mean_step_us, steady_median_us=res.median_step_us)


@bounded
def simulate(model: str | Path | StepModel, steps: int | None = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, seed: int = 0, window: bool = False,
             chrome_trace: str | Path | None = None, plot: str | Path | None = None,
             measured: str | Path | None = None, plot_steps: int = 1,
             queue_plot: str | Path | None = None) -> Simulation | WindowSimulation:
    """Simulate the model's steady state for ``steps`` steps (None: as many as pin its
    mean step, see :data:`stepsim.limits.DEFAULT_STEPS`), or, with ``window``, replay its
    captured window step by step against the measurement; ``chrome_trace`` writes the
    simulated timeline; ``plot`` its lanes (``plot_steps`` steps; the ``measured`` trace's lanes above them),
    ``queue_plot`` the prefetch queue (see :func:`stepsim.views.draw_simulation`).

    Raises:
        InputError / ModelError / SimulationError: a bad model file or a model that cannot run.
    """
    from stepsim.models.metrics import summarize
    from stepsim.models.simulate import window_replay
    from stepsim.scenarios.stepcount import simulate_counted
    from stepsim.report.chrome import write_chrome_trace
    from stepsim.results import Simulation, WindowSimulation
    from stepsim.views import draw_simulation

    _guard([model, measured], chrome_trace=chrome_trace, plot=plot, queue_plot=queue_plot)
    m = load_model(model)
    if window:
        w = window_replay(m)
        out: Simulation | WindowSimulation = WindowSimulation(model=m, replay=w)
        res = w.result
    else:
        res, count = simulate_counted(m, steps, warmup, seed)
        out = Simulation(model=m, result=res, summary=summarize(res), count=count)
        if plot or queue_plot:
            draw_simulation(m, res, out.summary, plot, measured, plot_steps, queue_plot)
    if chrome_trace:
        write_chrome_trace(res, chrome_trace)
    return out


# ---------------------------------------------------------------- planner --------------------
@bounded
def whatif(model: str | Path | StepModel, ops: Sequence = (), *, scenario=None, set=None,
           scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
           warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = 16, jobs: int = 0,
           save_model: str | Path | None = None, progress: bool = False,
           compare: str | Path | None = None, plot_steps: int = 1,
           width_sources: bool = False) -> WhatIf:
    """Predict the step after the what-if operations, next to the baseline, each with a
    P10-P90 interval from ``draws`` Monte Carlo draws (0: none); ``save_model`` writes the
    transformed model; ``compare`` the lanes of the baseline above the what-if's;
    ``width_sources`` the scenario interval's width by source of uncertainty, each alone.

    Raises:
        StepsimError: no operation, or a bad one; ModelError: one that does not apply.
    """
    from stepsim.models.params import save_model as save
    from stepsim.results import WhatIf
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.transforms import apply_ops
    from stepsim.views import draw_compare

    _guard([model], ops, scenario, save_model=save_model, compare=compare)
    m = load_model(model)
    todo = operations(ops, scenario, set, scale, remove, fix)
    warnings = _caveats(m, todo)
    if not todo:
        raise StepsimError("whatif needs at least one --set, --scale, --remove, --fix or "
                           "--scenario")
    apply_ops(m, todo)   # an op that does not apply is refused before the baseline runs
    kw = _sim_kw(steps, warmup, seed, jobs)
    with _progress("baseline", progress and draws > 0) as prog:
        base = predict(m, [], intervals=draws, progress=prog, **kw)
    with _progress("scenario", progress and draws > 0) as prog:
        pred = predict(m, todo, intervals=draws, progress=prog, decompose=width_sources, **kw)
    if save_model:
        save(pred.model, save_model)
    if compare:
        draw_compare(base, pred, compare, plot_steps)
    return WhatIf(baseline=base, scenario=pred, warnings=warnings)


@bounded
def sweep(model: str | Path | StepModel, axes, ops: Sequence = (), *, scenario=None, set=None,
          scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
          warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = 0, jobs: int = 0,
          knee_tol: float = 0.05, plot: str | Path | None = None, measured=(),
          ledger: str | Path | None = None, progress: bool = False) -> Sweep:
    """Predict a grid of parameter values and find each parameter's knee.

    Args:
        axes: ``"PATH=V1,V2,..."`` (or a list of them: a grid), or a mapping path → values.
        knee_tol: within this of the best counts as no longer helping.
        plot: write the sweep curve (``.png``/``.svg``/``.pdf``).
        measured: ``"VALUE=TRACE"`` texts (or a mapping value → trace): re-measured runs at
            values of the first axis, drawn on the plot.
        ledger: a validation ledger whose records set the first axis alone: their measured
            mean steps are drawn too.

    Raises:
        StepsimError: a bad axis or measured point; ModelError: an op that does not apply.
    """
    from stepsim.report.planner import plot_sweep
    from stepsim.results import Sweep
    from stepsim.scenarios.sweep import sweep as run
    from stepsim.views import ledger_points, measured_points

    traces = [m.split("=", 1)[-1] if isinstance(m, str) else m[1] for m in
              (measured.items() if isinstance(measured, Mapping) else measured)]
    _guard([model, *traces, ledger], ops, scenario, plot=plot)
    m = load_model(model)
    from stepsim.scenarios.options import sweep_grid

    grid = sweep_grid(axes)
    points, warnings = measured_points(measured, grid)
    if ledger:
        for v, pts in ledger_points(ledger, next(iter(grid))).items():
            points.setdefault(v, pts)
    with _progress("sweep", progress) as prog:
        todo = operations(ops, scenario, set, scale, remove, fix)
        warnings += _caveats(m, todo, list(grid))
        r = run(m, grid, todo, intervals=draws, progress=prog, knee_tol=knee_tol,
                **_sim_kw(steps, warmup, seed, jobs))
    from stepsim.scenarios.caveats import point_threads

    warnings += tuple(point_threads(m, todo, [pt.values for pt in r.points]))
    warnings = tuple(dict.fromkeys(warnings + r.notes))
    if plot:
        plot_sweep(r, plot, points)
    return Sweep(result=r, measured=points, warnings=warnings)


@bounded
def ceiling(model: str | Path | StepModel, ops: Sequence = (), *, scenario=None, set=None,
            scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
            warmup: int = DEFAULT_WARMUP, seed: int = 0, jobs: int = 0,
            plot: str | Path | None = None, progress: bool = False) -> Ceilings:
    """The simulated Amdahl ceiling of every component (after the operations); ``plot``
    writes them as a bar chart."""
    from stepsim.report.planner import plot_ceilings
    from stepsim.results import Ceilings
    from stepsim.scenarios.ceiling import ceilings

    _guard([model], ops, scenario, plot=plot)
    m = load_model(model)
    with _progress("ceilings", progress) as prog:
        r = ceilings(m, operations(ops, scenario, set, scale, remove, fix), progress=prog,
                     **_sim_kw(steps, warmup, seed, jobs))
    if plot:
        plot_ceilings(r, plot)
    return Ceilings(report=r)


@bounded
def plan(model: str | Path | StepModel, ops: Sequence = (), *, scenario=None, set=None,
         scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
         warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = 16, jobs: int = 0,
         allow: Sequence[str] | None = None, fix_arg: Sequence[str] = (), min_gain: float = 0.02,
         max_moves: int = 8, save_scenario: str | Path | None = None,
         plot: str | Path | None = None, progress: bool = False) -> PlanResult:
    """A greedy chain of named fixes, one bottleneck at a time.

    Args:
        allow: fix kinds the plan may use (default: systems).
        fix_arg: ``"NAME:ARG=V,..."`` arguments for a fix instead of its candidates.
        save_scenario: write the chain as a scenario YAML.
        plot: write the step after each fix as a bar chart.
    """
    import yaml

    from stepsim.results import PlanResult
    from stepsim.scenarios.plan import plan as run
    from stepsim.scenarios.transforms import Scenario, parse_fix
    from stepsim.simcore.atomic import write_atomic

    _guard([model], ops, scenario, save_scenario=save_scenario, plot=plot)
    m = load_model(model)
    fix_args: dict = {}
    for text in [fix_arg] if isinstance(fix_arg, str) else fix_arg:
        op = parse_fix(text)
        fix_args[op.name] = {**fix_args.get(op.name, {}), **op.args}
    with _progress("plan", progress) as prog:
        base = operations(ops, scenario, set, scale, remove, fix)
        p = run(m, base, allow=tuple(allow or ("systems",)), fix_args=fix_args,
                min_gain=min_gain, max_moves=max_moves, draws=draws, progress=prog,
                **_sim_kw(steps, warmup, seed, jobs))
    if save_scenario:
        label = m.meta.name or (str(model) if not _is_step_model(model) else "model")
        sc = Scenario(name=f"plan for {label}", description=p.stop, ops=tuple(p.ops))
        write_atomic(Path(save_scenario),
                     yaml.safe_dump(sc.model_dump(), sort_keys=False).encode())
    if plot:
        from stepsim.report.charts import plot_plan

        plot_plan(p, plot)
    return PlanResult(plan=p, warnings=_caveats(m, [*base, *(mv.op for mv in p.moves)]))


@bounded
def validate(model: str | Path | StepModel, traces, ops: Sequence = (), *, scenario=None,
             set=None, scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = 16, jobs: int = 0,
             ledger: str | Path | None = None, label: str | None = None,
             progress: bool = False, width_sources: bool = False) -> Validation:
    """A prediction against re-measured trace(s) (pooled); ``ledger`` appends the record to a
    JSON-lines file. The interval is of the runs' pooled mean (the host's speed once per run,
    the steps' variation through the standard error of the measured steps);
    ``width_sources``: its width by source of uncertainty, one at a time, too.

    Raises:
        InputError: an unreadable trace or ledger; ModelError: no measured step.
    """
    from stepsim.results import Validation
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.transforms import apply_ops
    from stepsim.scenarios.validate import append_ledger, same_job, validate as score
    from stepsim.views import measured_runs

    traces = [traces] if isinstance(traces, (str, Path)) else list(traces)
    _guard([model, *traces], ops, scenario, ledger=ledger)
    m = load_model(model)
    todo = operations(ops, scenario, set, scale, remove, fix)
    runs, warnings = measured_runs(traces)
    same_job(apply_ops(m, todo), runs)
    steps_us = [s for r in runs for s in r.step_us]
    neck = Counter(r.bottleneck for r in runs).most_common(1)[0][0]
    with _progress("predict", progress and draws > 0) as prog:
        pred = predict(m, todo, intervals=draws, progress=prog, runs=len(runs),
                       measured_steps=len(steps_us), decompose=width_sources,
                       **_sim_kw(steps, warmup, seed, jobs))
    ups = [r.startup for r in runs if r.startup is not None]
    rec = score(pred, steps_us, neck, label=label or pred.what, traces=[str(t) for t in traces],
                model_name=_name(model, m), startup=[(u.step_us, u.next_us, u.later_next_us)
                                                     for u in ups])
    if ledger:
        append_ledger(ledger, rec)
    return Validation(record=rec, prediction=pred, warnings=_caveats(m, todo) + warnings)


# ---------------------------------------------------------------- diagnose -------------------
@bounded
def diagnose(input: str | Path | StepModel, step_regex: str | None = None,
             peak: str | None = None, plot: str | Path | None = None,
             steps: int | None = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP, seed: int = 0,
             draws: int = 8, jobs: int = 0) -> Diagnosed:
    """Walk the diagnosis tree (:mod:`scenarios.diagnose`) for a trace (calibrated first: a
    file, a capture folder or a folder of ranks, whose first file gives the roofline and
    memory) or a StepModel; ``peak`` (``fp32=...,bw=...``) overrides or adds the GPU's peaks;
    ``plot`` writes the roofline plot.

    Raises:
        InputError: an unreadable trace or model; ModelError: a bad ``peak``.
    """
    from stepsim.diagnosis import diagnose as run

    return run(input, step_regex, peak, plot, draws=draws, **_sim_kw(steps, warmup, seed, jobs))


@bounded
def report(model: str | Path | StepModel, ops: Sequence = (), *, output=None, ledger=None,
           measured=None, steps: int | None = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP,
           seed: int = 0, draws: int = 16, jobs: int = 0, plot_steps: int = 1,
           with_plan: bool = True, progress: bool = False):
    """One self-contained HTML report written to ``output``: one what-if per operation or
    scenario file in ``ops`` (see :func:`stepsim.views.report`, which takes the rest)."""
    from stepsim.scenarios.transforms import describe_ops, load_scenario

    _guard([model, ledger, measured], ops, output=output)
    whatifs = []
    for item in ops:
        kind, value = item if isinstance(item, tuple) else ("", None)
        todo = operations([item])
        whatifs.append(((load_scenario(value).name or Path(value).stem) if kind == "scenario"
                        else describe_ops(todo), todo))
    from stepsim.views import report as run

    return run(load_model(model), whatifs, output=output, ledger=ledger, measured=measured,
               draws=draws, plot_steps=plot_steps, with_plan=with_plan, progress=progress,
               **_sim_kw(steps, warmup, seed, jobs))
