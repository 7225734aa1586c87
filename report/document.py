"""What one report holds, gathered from the planner: the baseline, the what-ifs, the ceilings,
the plan and the validation ledger, each with the pictures drawn from it.

:func:`build_report` runs the predictions (through :mod:`scenarios`, like the planner verbs
do) and draws every picture into memory; :mod:`report.html` lays them out. The measured
lanes come in from the caller as a :class:`report.lanes.Timeline` (reading a trace belongs to
calibration); nothing here reads a trace.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from stepsim.models.params import StepModel
from stepsim.models.simulate import SimResult, simulate
from stepsim.report.charts import has_queue, plot_plan, plot_queue
from stepsim.report.lanes import Timeline, plot_lanes, sim_timeline
from stepsim.report.ceilings import plot_ceilings
from stepsim.report.planner import plot_sweep
from stepsim.scenarios.ceiling import CeilingReport, ceilings
from stepsim.scenarios.plan import Plan, plan
from stepsim.scenarios.predict import DEFAULT_DRAWS, Prediction, predict
from stepsim.scenarios.sweep import SweepResult, sweep
from stepsim.scenarios.caveats import caveats
from stepsim.scenarios.paths import get_value
from stepsim.scenarios.transforms import parse_value
from stepsim.scenarios.validate import LedgerRecord, LedgerSummary, summarize_ledger
from stepsim.simcore.errors import StepsimError

__all__ = ["WhatIf", "ReportData", "build_report", "ledger_sweep_points"]


@dataclass
class WhatIf:
    """One what-if: its name, operations, prediction, simulated run and the lanes picture
    (baseline above it, PNG bytes)."""

    name: str
    ops: list
    prediction: Prediction
    result: SimResult
    lanes_png: bytes = b""
    caveats: list[str] = field(default_factory=list)


@dataclass
class ReportData:
    """Everything :func:`report.html.render_html` shows. Pictures are PNG bytes (empty when
    there is nothing to draw)."""

    name: str
    model: StepModel
    baseline: Prediction
    base_result: SimResult
    lanes_png: bytes
    queue_png: bytes = b""
    measured_title: str = ""
    whatifs: list[WhatIf] = field(default_factory=list)
    ceilings: CeilingReport | None = None
    ceilings_png: bytes = b""
    plan: Plan | None = None
    plan_png: bytes = b""
    ledger: list[LedgerRecord] = field(default_factory=list)
    ledger_summary: LedgerSummary | None = None
    sweep: SweepResult | None = None
    sweep_png: bytes = b""
    caveats: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    """What the command line prints before the report's line, each once: what is wrong with
    the model's own capture, a ledger's skipped lines (also among the caveats) and each
    what-if's caveats."""


def _png(draw: Callable[[Path], None]) -> bytes:
    """Run ``draw(path)`` into a temporary PNG and return its bytes."""
    with tempfile.TemporaryDirectory(prefix="stepsim-report-") as d:
        p = Path(d) / "figure.png"
        draw(p)
        return p.read_bytes()


def ledger_sweep_points(records: Sequence[LedgerRecord], path: str | None = None,
                        baseline: tuple[str, Any] | None = None
                        ) -> tuple[str, dict[Any, list[float]]] | None:
    """The ledger as measured points of a one-parameter sweep: ``(PATH, {value: [measured
    mean step µs, ...]})`` from the records that each set PATH alone (``set PATH=VALUE``),
    when they hold two distinct values or more; else None. Records of other what-ifs are
    left out (a project's ledger mixes them). Without ``path``, PATH is the one set alone at
    the most distinct values (then by records, then by name). ``baseline`` = ``(model name,
    the model's own value of PATH)`` adds that model's ``baseline`` records at its value.
    """
    by_path: dict[str, dict[Any, list[float]]] = {}
    for r in records:
        if not r.scenario.startswith("set ") or ";" in r.scenario or "=" not in r.scenario:
            continue
        p, _, v = r.scenario[4:].partition("=")
        by_path.setdefault(p, {}).setdefault(parse_value(v), []).append(r.measured_mean_us)
    if path is None:
        if not by_path:
            return None
        path = min(by_path, key=lambda p: (-len(by_path[p]),
                                           -sum(map(len, by_path[p].values())), p))
    pts = by_path.get(path, {})
    if baseline is not None:
        name, value = baseline
        for r in records:
            if r.scenario == "baseline" and r.model == name:
                pts.setdefault(value, []).append(r.measured_mean_us)
    return (path, pts) if len(pts) >= 2 else None


def build_report(model: StepModel, scenarios: Sequence[tuple[str, list]] = (),
                 ledger: Sequence[LedgerRecord] = (), measured: Timeline | None = None,
                 steps: int | None = None, warmup: int = 20, seed: int = 0, draws: int = DEFAULT_DRAWS,
                 jobs: int = 1, with_plan: bool = True, lane_steps: int = 1,
                 progress: Callable[[str], None] | None = None) -> ReportData:
    """Predict the baseline and each ``(name, ops)`` what-if, the ceilings and (unless
    ``with_plan`` is False) the plan; draw the lanes (``measured`` above the simulated
    baseline when given), the queue, each what-if against the baseline, the ceilings, the
    plan, and the ledger's sweep when its records form one.

    Raises:
        ModelError / SimulationError: as the planner verbs do.
    """
    say = progress or (lambda what: None)
    kw = {"steps": steps, "warmup": warmup, "seed": seed}
    say("baseline")
    base = predict(model, [], intervals=draws, jobs=jobs, **kw)
    base_res = simulate(base.model, **{**kw, "steps": base.steps})
    base_tl = sim_timeline(base_res, base.summary, steps=lane_steps, title="simulated baseline "
                           f"(mean step {base.mean_step_us / 1e3:.1f} ms)")
    panels = ([measured] if measured is not None else []) + [base_tl]
    data = ReportData(name=model.meta.name or "model", model=model, baseline=base,
                      base_result=base_res, lanes_png=_png(lambda p: plot_lanes(panels, p)),
                      measured_title=measured.title if measured is not None else "",
                      settings={**kw, "draws": draws})
    if has_queue(base_res):
        data.queue_png = _png(lambda p: plot_queue(base_res, p))
    data.caveats = list(dict.fromkeys(model.meta.warnings))
    for name, ops in scenarios:
        say(f"what-if {name}")
        pred = predict(model, ops, intervals=draws, jobs=jobs, **kw)
        res = simulate(pred.model, **{**kw, "steps": pred.steps})
        tl = sim_timeline(res, pred.summary, steps=lane_steps,
                          title=f"what-if: {name} (mean step {pred.mean_step_us / 1e3:.1f} ms)")
        w = WhatIf(name, list(ops), pred, res, caveats=caveats(model, ops))
        w.lanes_png = _png(lambda p: plot_lanes([base_tl, tl], p))
        data.whatifs.append(w)
    say("ceilings")
    data.ceilings = ceilings(model, [], jobs=jobs, baseline=base, **kw)
    if data.ceilings.rows:
        data.ceilings_png = _png(lambda p: plot_ceilings(data.ceilings, p))
    if with_plan:
        say("plan")
        data.plan = plan(model, [], draws=draws, jobs=jobs, **kw)
        data.plan_png = _png(lambda p: plot_plan(data.plan, p))
        data.caveats += caveats(model, [m.op for m in data.plan.moves])
    data.ledger = list(ledger)
    if data.ledger:
        data.ledger_summary = summarize_ledger(data.ledger)
        found = ledger_sweep_points(data.ledger)
        if found is not None and model.meta.name:  # the model's own baseline records too
            try:
                own = get_value(model, found[0])
            except StepsimError:
                pass
            else:
                found = ledger_sweep_points(data.ledger, found[0], (model.meta.name, own))
        if found is not None:
            path, pts = found
            say(f"sweep {path}")
            try:
                data.sweep = sweep(model, {path: sorted(pts)}, intervals=draws, jobs=jobs, **kw)
            except StepsimError as e:  # a ledger path this model lacks: said, not fatal
                data.caveats.append(f"the ledger's sweep over {path} could not be predicted: {e}")
            else:
                data.sweep_png = _png(lambda p: plot_sweep(data.sweep, p, pts))
    data.caveats = list(dict.fromkeys(data.caveats))
    return data
