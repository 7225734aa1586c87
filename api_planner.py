"""The planner verbs of :mod:`stepsim.api` (``whatif``, ``sweep``, ``ceiling``, ``plan``,
``validate``): the what-if operations applied to a model and predicted, each with the CLI's
names and defaults; :mod:`stepsim.api` documents the conventions they share.
"""
from __future__ import annotations


import os
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from stepsim.api_common import (caveats, guard, input_warnings, is_step_model, load_model,
                                model_name, operations, progress_bar, sim_kw)
from stepsim.limits import (DEFAULT_DRAWS, DEFAULT_STEPS, DEFAULT_WARMUP, ArgumentError,
                            bounded)
from stepsim.simcore.errors import StepsimError

if TYPE_CHECKING:
    from stepsim.models.params import StepModel
    from stepsim.results_planner import Ceilings, PlanResult, Sweep, Validation, WhatIf

__all__ = ["whatif", "sweep", "ceiling", "plan", "validate"]


@bounded
def whatif(model: str | Path | StepModel, ops: Sequence = (), *, scenario=None, set=None,
           scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
           warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = DEFAULT_DRAWS,
         jobs: int = 0,
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
    from stepsim.results_planner import WhatIf
    from stepsim.scenarios.noop import NOTHING, unchanged_prediction
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.predict_many import predict_many
    from stepsim.scenarios.transforms import apply_ops
    from stepsim.views import draw_compare

    guard([model], ops, scenario, save_model=save_model, compare=compare)
    m = load_model(model)
    todo = operations(ops, scenario, set, scale, remove, fix)
    warnings = caveats(m, todo)
    if not todo:
        raise StepsimError("whatif needs at least one --set, --scale, --remove, --fix or "
                           "--scenario")
    apply_ops(m, todo)   # an op that does not apply is refused before the baseline runs
    kw = sim_kw(steps, warmup, seed, jobs)
    with progress_bar("baseline", progress and draws > 0) as prog:
        together = prog is None and not width_sources
        if together:   # both in one executor call, the same predictions
            base, pred = predict_many(m, [[], todo], intervals=draws, **kw)
        else:
            base = predict(m, [], intervals=draws, progress=prog, **kw)
    if not together:
        with progress_bar("scenario", progress and draws > 0) as prog:
            pred = predict(m, todo, intervals=draws, progress=prog, decompose=width_sources,
                           **kw)
    same = unchanged_prediction(pred.what, _steps_of(base), _steps_of(pred))
    if same and not any(NOTHING in w for w in warnings):
        warnings += (same,)
    if save_model:
        save(pred.model, save_model)
    if compare:
        draw_compare(base, pred, compare, plot_steps)
    return WhatIf(baseline=base, scenario=pred, warnings=warnings)


def _steps_of(p) -> tuple:
    """What a prediction's simulated steps came to: their count, mean, median, P10 and P90."""
    s = p.summary
    return (p.steps, s.mean_step_us, s.median_step_us, s.p10_step_us, s.p90_step_us)


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
    from stepsim.results_planner import Sweep
    from stepsim.scenarios.sweep import sweep as run
    from stepsim.scenarios.paths import get_value
    from stepsim.views import ledger_points, measured_points

    traces = [m.split("=", 1)[-1] if isinstance(m, str) else m[1] for m in
              (measured.items() if isinstance(measured, Mapping) else measured)]
    guard([model, *traces, ledger], ops, scenario, plot=plot)
    m = load_model(model)
    from stepsim.scenarios.options import sweep_grid

    grid = sweep_grid(axes)
    points, warnings = measured_points(measured, grid)
    if ledger:
        axis = next(iter(grid))
        try:
            own = (model_name(model, m), get_value(m, axis))
        except StepsimError:  # a path the model lacks: the sweep itself says so
            own = None
        skipped: list[str] = []
        for v, pts in ledger_points(ledger, axis, own, skipped).items():
            points.setdefault(v, pts)
        warnings += tuple(skipped)
    with progress_bar("sweep", progress) as prog:
        todo = operations(ops, scenario, set, scale, remove, fix)
        warnings += caveats(m, todo, list(grid))
        r = run(m, grid, todo, intervals=draws, progress=prog, knee_tol=knee_tol,
                **sim_kw(steps, warmup, seed, jobs))
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
    from stepsim.report.ceilings import plot_ceilings
    from stepsim.results_planner import Ceilings
    from stepsim.scenarios.ceiling import ceilings

    guard([model], ops, scenario, plot=plot)
    m = load_model(model)
    with progress_bar("ceilings", progress) as prog:
        r = ceilings(m, operations(ops, scenario, set, scale, remove, fix), progress=prog,
                     **sim_kw(steps, warmup, seed, jobs))
    if plot:
        plot_ceilings(r, plot)
    return Ceilings(report=r, warnings=input_warnings(m))


@bounded
def plan(model: str | Path | StepModel, ops: Sequence = (), *, scenario=None, set=None,
         scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
         warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = DEFAULT_DRAWS,
           jobs: int = 0,
         allow: Sequence[str] | None = None, fix_arg: Sequence[str] = (), min_gain: float = 0.02,
         max_moves: int = 8, save_scenario: str | Path | None = None,
         plot: str | Path | None = None, progress: bool = False) -> PlanResult:
    """A greedy chain of named fixes, each relieving the component with the largest simulated
    ceiling that an allowed fix relieves. The result names, before and after each move, the
    bottleneck as :func:`whatif` names it (``first_bottleneck``, ``next_bottleneck``) and
    the largest ceiling (``*largest_ceiling*``) apart.

    Args:
        allow: fix kinds the plan may use (default: systems).
        fix_arg: ``"NAME:ARG=V,..."`` arguments for a fix instead of its candidates.
        save_scenario: write the chain as a scenario YAML.
        plot: write the step after each fix as a bar chart.
    """
    import yaml

    from stepsim.results_planner import PlanResult
    from stepsim.scenarios.plan import plan as run
    from stepsim.scenarios.transforms import Scenario
    from stepsim.scenarios.op_text import parse_fix
    from stepsim.simcore.atomic import write_atomic

    guard([model], ops, scenario, save_scenario=save_scenario, plot=plot)
    m = load_model(model)
    fix_args: dict = {}
    for text in [fix_arg] if isinstance(fix_arg, str) else fix_arg:
        op = parse_fix(text)
        fix_args[op.name] = {**fix_args.get(op.name, {}), **op.args}
    with progress_bar("plan", progress) as prog:
        base = operations(ops, scenario, set, scale, remove, fix)
        p = run(m, base, allow=tuple(allow or ("systems",)), fix_args=fix_args,
                min_gain=min_gain, max_moves=max_moves, draws=draws, progress=prog,
                **sim_kw(steps, warmup, seed, jobs))
    if save_scenario:
        label = m.meta.name or (str(model) if not is_step_model(model) else "model")
        sc = Scenario(name=f"plan for {label}", description=p.stop, ops=tuple(p.ops))
        write_atomic(Path(save_scenario),
                     yaml.safe_dump(sc.model_dump(), sort_keys=False).encode())
    if plot:
        from stepsim.report.charts import plot_plan

        plot_plan(p, plot)
    from stepsim.scenarios.caveats import move_threads
    moves = [mv.op for mv in p.moves]
    return PlanResult(plan=p, warnings=caveats(m, [*base, *moves])
                      + tuple(move_threads(m, base, moves)))


@bounded
def validate(model: str | Path | StepModel, traces, ops: Sequence = (), *, scenario=None,
             set=None, scale=None, remove=None, fix=None, steps: int | None = DEFAULT_STEPS,
             warmup: int = DEFAULT_WARMUP, seed: int = 0, draws: int = DEFAULT_DRAWS,
             jobs: int = 0,
             ledger: str | Path | None = None, label: str | None = None,
             progress: bool = False, width_sources: bool = False) -> Validation:
    """A prediction against re-measured trace(s) (pooled); ``ledger`` appends the record to a
    JSON-lines file (with the runs' outside load: a loaded record is scored apart; without an
    operation that changes the model, the record is of the calibration setting, in-sample,
    and scored apart too). The
    interval is of the runs' pooled mean (the host's speed once per run, the steps' variation
    through the standard error of the measured steps); ``width_sources``: its width by source
    of uncertainty, one at a time, too.

    Raises:
        InputError: an unreadable trace or ledger; ModelError: no measured step.
    """
    from stepsim.models.load_bound import pooled_load
    from stepsim.results_planner import Validation
    from stepsim.scenarios.predict import predict
    from stepsim.scenarios.transforms import apply_ops
    from stepsim.scenarios.validate import append_ledger, same_job, validate as score
    from stepsim.scenarios.validate_ddp import barrier_split
    from stepsim.views import fresh_runs, measured_runs

    if isinstance(traces, (str, os.PathLike)):
        traces = [traces]
    if not isinstance(traces, Iterable) or not (traces := list(traces)):
        # validate(m, []) was an IndexError, validate(m, None) a TypeError
        raise ArgumentError(f"traces: expected a trace path or a list of them, got {traces!r}")
    guard([model, *traces], ops, scenario, ledger=ledger)
    m = load_model(model)
    todo = operations(ops, scenario, set, scale, remove, fix)
    runs, warnings = measured_runs(traces)
    after = apply_ops(m, todo)
    same_job(after, runs, todo)
    # what the runs' own barriers measured a rank (the what-if's split is whatif's to say)
    warnings = (*warnings, *(s for s in map(barrier_split, runs) if s))
    steps_us = [s for r in runs for s in r.step_us]
    fresh = fresh_runs(m, runs)    # none of the runs is a capture the model was calibrated on
    neck = Counter(r.bottleneck for r in runs).most_common(1)[0][0]
    with progress_bar("predict", progress and draws > 0) as prog:
        pred = predict(m, todo, intervals=draws, progress=prog, runs=len(runs),
                       measured_steps=len(steps_us), decompose=width_sources,
                       **sim_kw(steps, warmup, seed, jobs))
    ups = [r.startup for r in runs if r.startup is not None]
    load, load_note = pooled_load([(r.outside_load_slowdown, sum(r.step_us)) for r in runs])
    rec = score(pred, steps_us, neck, label=label or pred.what, traces=[str(t) for t in traces],
                model_name=model_name(model, m), startup=[(u.step_us, u.next_us, u.later_next_us)
                                                     for u in ups],
                startup_capture=ups[0].capture if len({u.capture for u in ups}) == 1 else None,
                outside_load_slowdown=load,
                # no operation, or none that changes the model: the calibration setting itself,
                # in-sample on a run it was calibrated on, else a check of the baseline's level
                in_sample=after == m and not fresh, baseline_check=after == m and fresh)
    skipped: list[str] = []
    earlier = append_ledger(ledger, rec, skipped) if ledger else []
    per_run = tuple({"trace": str(r.path), "steps": len(r.step_us),
                     "mean_us": r.mean_us if r.step_us else 0.0,
                     "median_us": r.median_us if r.step_us else 0.0,
                     "held": None if r.outside_load_slowdown is None
                     else 1 / (1 + r.outside_load_slowdown),
                     "detail": [str(w) for w in r.detail]} for r in runs)
    return Validation(record=rec, prediction=pred,
                      warnings=caveats(m, todo) + warnings + (load_note,) * bool(load_note)
                      + tuple(skipped), runs=per_run,
                      startup_said=any(r.startup_us is not None for r in earlier))
