"""What the planner verbs of :mod:`stepsim.api_planner` return (``whatif``, ``sweep``,
``ceiling``, ``plan``, ``validate``): one frozen dataclass per verb, as :mod:`stepsim.results`
holds the model verbs' (``calibrate``, ``simulate``, ``diagnose``), with the same
``to_dict()`` (times in ms) and ``to_frame()`` (pandas, optional).

Nothing here computes a result; everything is read off what the verb made.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stepsim.results import _flat, _Result, _Warned

if TYPE_CHECKING:
    from stepsim.scenarios.ceiling import CeilingReport
    from stepsim.scenarios.plan import Plan
    from stepsim.scenarios.predict import Prediction
    from stepsim.scenarios.sweep import SweepResult
    from stepsim.scenarios.validate import LedgerRecord

__all__ = ["WhatIf", "Sweep", "Ceilings", "PlanResult", "Validation"]


@dataclass(frozen=True, repr=False)
class WhatIf(_Warned, _Result):
    """The baseline and the scenario's prediction; ``warnings``: what the model cannot honour
    in the operations (:func:`scenarios.caveats.caveats`)."""

    baseline: Prediction
    scenario: Prediction
    warnings: tuple[str, ...] = ()

    @property
    def speedup(self) -> float:
        return self.baseline.mean_step_us / self.scenario.mean_step_us

    def head(self) -> str:
        """The speed-up, both means and bottlenecks (``print(w)`` shows the warnings after)."""
        b, s = self.baseline, self.scenario
        return (f"WhatIf({s.what}: {self.speedup:.2f}x, {b.mean_step_us / 1e3:.1f} -> "
                f"{s.mean_step_us / 1e3:.1f} ms; {b.bottleneck_label} -> "
                f"{s.bottleneck_label})")

    def to_dict(self) -> dict:
        from stepsim.report.planner import whatif_dict
        return whatif_dict(self.baseline, self.scenario)

    def rows(self) -> list[dict]:
        return [{"": name, **_flat(p.to_dict())} for name, p in
                (("baseline", self.baseline), ("scenario", self.scenario))]


@dataclass(frozen=True, repr=False)
class Sweep(_Warned, _Result):
    """A finished sweep; ``measured``: first-axis value → re-measured step times (µs), for
    the plot."""

    result: SweepResult
    measured: dict[Any, list[float]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def head(self) -> str:
        """The grid's size and its best point (``print(s)``)."""
        r = self.result
        best = r.best
        vals = ", ".join(f"{k}={v}" for k, v in best.values.items())
        return (f"Sweep({' x '.join(r.grid)}: {len(r.points)} points; best {vals} at "
                f"{best.prediction.mean_step_us / 1e3:.1f} ms)")

    def to_dict(self) -> dict:
        from stepsim.report.planner import sweep_dict
        return sweep_dict(self.result)

    def rows(self) -> list[dict]:
        """One row per grid point: the swept values, then the prediction."""
        return [{**pt["values"], **_flat({k: v for k, v in pt.items() if k != "values"})}
                for pt in self.to_dict()["points"]]


@dataclass(frozen=True, repr=False)
class Ceilings(_Warned, _Result):
    """The simulated Amdahl ceiling of every component; ``warnings``: what is wrong with the
    model's own capture (:func:`scenarios.caveats.input_caveats`)."""

    report: CeilingReport
    warnings: tuple[str, ...] = ()

    def head(self) -> str:
        """The baseline and its highest ceiling (``print(c)``)."""
        r = self.report
        top = (f"; highest {r.rows[0].label} {r.rows[0].ceiling:.2f}x" if r.rows else "")
        return f"Ceilings(baseline {r.baseline.mean_step_us / 1e3:.1f} ms{top})"

    def to_dict(self) -> dict:
        from stepsim.report.ceilings import ceiling_dict
        return ceiling_dict(self.report)

    def rows(self) -> list[dict]:
        return self.to_dict()["components"]


@dataclass(frozen=True, repr=False)
class PlanResult(_Warned, _Result):
    """A greedy chain of fixes; ``warnings``: the caveats of its moves. Each prediction's
    ``bottleneck`` is the one :class:`WhatIf` names; the chain's ``largest_ceiling`` rows
    (:class:`scenarios.plan.Plan`) are the components whose removal would gain most."""

    plan: Plan
    warnings: tuple[str, ...] = ()

    def head(self) -> str:
        """The chain's start, end and moves (``print(p)``)."""
        p = self.plan
        a, b = p.baseline.mean_step_us, p.final_prediction.mean_step_us
        moves = "; ".join(m.op.describe() for m in p.moves)
        return (f"PlanResult({a / 1e3:.1f} -> {b / 1e3:.1f} ms ({a / b:.2f}x) in "
                f"{len(p.moves)} move(s){': ' + moves if moves else ''})")

    def to_dict(self) -> dict:
        from stepsim.report.planner import plan_dict
        return plan_dict(self.plan)

    def rows(self) -> list[dict]:
        """Row 0 the baseline (as the CLI's table), then one row per move."""
        d = self.to_dict()
        base = {"move": 0, "fix": "(baseline)", **_flat(d["baseline"]), "speedup": 1.0,
                "next_bottleneck": d["first_bottleneck"],
                "next_label": d["first_bottleneck_label"],
                **{k.removeprefix("first_"): v for k, v in d.items()
                   if k.startswith("first_largest_ceiling")}}
        return [base] + [{"move": i, **_flat(m)} for i, m in enumerate(d["moves"], 1)]


@dataclass(frozen=True, repr=False)
class Validation(_Warned, _Result):
    """A prediction scored against re-measured runs; ``record`` is what a ledger holds.
    ``print(v)`` shows the score in one line, then the warnings (it printed the whole record
    and prediction as one dataclass dump of some 5,000 characters, a fresh user's, 2026-12-05)."""

    record: LedgerRecord
    prediction: Prediction
    warnings: tuple[str, ...] = ()
    runs: tuple[dict, ...] = ()
    """Per re-measured run: ``trace``, ``steps``, ``mean_us``, ``median_us`` (µs) and
    ``held`` (its threads' share of the core time they could hold; None unmeasured)."""
    startup_said: bool = False
    """Whether a record the ledger held before this one has a left-out first step (its
    validate said why in full, so this one's says it in a line)."""

    def head(self) -> str:
        """Predicted and measured mean, the error, whether inside P10–P90, the bottlenecks."""
        r = self.record
        ms = lambda us: f"{us / 1e3:.1f}"  # noqa: E731
        band = (f", P10-P90 {ms(r.p10_us)}-{ms(r.p90_us)} ms" if r.p10_us is not None
                and r.p90_us is not None else "")
        inside = "" if r.inside is None else ", inside" if r.inside else ", outside"
        agree = {True: "agree", False: "differ", None: "not compared"}[r.bottleneck_agrees]
        apart = " (in-sample)" if r.in_sample else " (baseline check)" if r.baseline_check \
            else ""
        return (f"Validation({r.label}{apart}: predicted "
                f"{ms(r.predicted_mean_us)} ms{band}; measured {ms(r.measured_mean_us)} ms "
                f"over {r.steps_measured} steps of {r.runs} run(s); error {r.error_pct:+.1f} %"
                f"{inside}; bottleneck {r.predicted_bottleneck} / {r.measured_bottleneck}, "
                f"{agree})")

    def to_dict(self) -> dict:
        """The record, and each run's line (``per_run``, as ``validate --json`` gives it)."""
        return {**self.record.model_dump(), "per_run": [dict(r) for r in self.runs]}

    def rows(self) -> list[dict]:
        return [{k: v for k, v in self.to_dict().items() if k not in ("traces", "per_run")}]
