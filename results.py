"""What the functions of :mod:`stepsim.api` return: one frozen dataclass per verb, holding the
domain objects it produced (times in µs), with ``to_dict()`` (the document the CLI prints for
``--json``, times in ms) and ``to_frame()`` (the natural table of the result as a pandas
DataFrame, times in ms; pandas is optional: ``pip install 'stepsim[frames]'``).

Nothing here computes a result; everything is read off what the verb made.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from stepsim.models.load_bound import outside_load_slowdown
from stepsim.models.params import StepModel
from stepsim.models.simulate import SimResult, WindowReplay
from stepsim.simcore.units import us_to_ms

# the scenarios, the summaries (models.metrics) and the report modules (rich) are imported where
# a planner verb runs and where a result is turned into a dict: a calibration does not pay for
# them (about 0.1 s)
if TYPE_CHECKING:
    from stepsim.models.metrics import Summary
    from stepsim.scenarios.ceiling import CeilingReport
    from stepsim.scenarios.plan import Plan
    from stepsim.scenarios.predict import Prediction
    from stepsim.scenarios.stepcount import StepCount
    from stepsim.scenarios.sweep import SweepResult
    from stepsim.scenarios.validate import LedgerRecord

REPLAY_WARN = 0.10
"""A calibration whose simulated mean step is further than this (fraction) from the measured
mean is warned about. The mean is the throughput the run pays; a median can differ a lot when
steps arrive in bursts (more workers than cores), so it is reported but not judged."""

__all__ = ["Calibration", "Simulation", "WindowSimulation", "WhatIf", "Sweep", "Ceilings",
           "PlanResult", "Validation", "Diagnosed", "REPLAY_WARN"]


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("to_frame() needs pandas, which is not installed: pip install pandas "
                          "(or pip install 'stepsim[frames]'); to_dict() needs nothing") from None
    return pandas


def _flat(d: dict) -> dict:
    """The scalar entries of a prediction's dict (a table row). A row's ``bottleneck`` is the
    words the printed tables show (``bottleneck_label``), its code ``bottleneck_code``: one
    vocabulary between what a user reads and what a frame's column holds."""
    row = {k: v for k, v in d.items() if not isinstance(v, (dict, list, tuple))}
    if "bottleneck" in row and "bottleneck_label" in row:
        row = {**{k: v for k, v in row.items() if k != "bottleneck_label"},
               "bottleneck": row["bottleneck_label"], "bottleneck_code": row["bottleneck"]}
    return row


class _Result:
    """``to_frame()`` from the rows a result names."""

    def rows(self) -> list[dict]:  # pragma: no cover - every result overrides it
        raise NotImplementedError

    def to_frame(self):
        """The result's table as a pandas DataFrame (times in ms).

        Raises:
            ImportError: pandas is not installed (the message says how to install it).
        """
        return _pandas().DataFrame(self.rows())


class _Warned:
    """A result whose ``warnings`` the CLI prints as ``warning:`` lines before it: ``print``
    and ``repr`` show its head line, then each warning on its own line, as the CLI does."""

    warnings: tuple[str, ...]

    def head(self) -> str:  # pragma: no cover - every result overrides it
        raise NotImplementedError

    def __str__(self) -> str:
        return "\n".join([self.head()] + [f"warning: {w}" for w in self.warnings])

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True, repr=False)
class Calibration(_Warned, _Result):
    """A calibrated model and how well it reproduces its own trace (µs).

    Attributes:
        model: the StepModel (saved to ``output`` when one was given).
        output: where it was written, or None.
        warnings: the calibration's warnings, each said once (a folder of ranks repeats them);
            ``ranked``: the same, summarized, sized and ordered (:mod:`stepsim.warning_order`).
        window: the replay of the captured window, step by step (None: a CPU capture or
            several ranks, which have none).
        steady_mean_us / steady_median_us: the simulated steady state of the representative
            step (what predictions use).
    """

    model: StepModel
    output: str | None
    warnings: tuple[str, ...]
    window: WindowReplay | None
    steady_mean_us: float
    steady_median_us: float
    ranked: tuple = ()

    @property
    def measured_step_us(self) -> list[float]:
        return list(self.model.meta.measured_step_us)

    @property
    def measured_mean_us(self) -> float:
        return float(np.mean(self.measured_step_us))

    @property
    def measured_median_us(self) -> float:
        return float(np.median(self.measured_step_us))

    @property
    def steady_mean_error(self) -> float:
        """(simulated − measured) / measured of the mean step."""
        return self.steady_mean_us / self.measured_mean_us - 1.0

    @property
    def steady_median_error(self) -> float:
        return self.steady_median_us / self.measured_median_us - 1.0

    @property
    def steady_warning(self) -> str | None:
        """Why the steady state is not to be trusted, when its mean step is more than
        :data:`REPLAY_WARN` off the measured one; None otherwise."""
        if abs(self.steady_mean_error) <= REPLAY_WARN:
            return None
        window = self.model.replay is not None
        if outside_load_slowdown(self.model) is not None:
            why = "the capture ran under outside load"    # calibration.outside_load's bound
        elif window:
            why = ("the captured steps were not all in one steady state, or the model misses "
                   "something the run did")
        else:
            why = "the model misses something the run did"
        head = (f"the {'steady state' if window else 'replay'}'s mean step is "
                f"{100 * self.steady_mean_error:+.0f} % off the measured one "
                f"({self.steady_mean_us / 1e3:.1f} against {self.measured_mean_us / 1e3:.1f} ms)"
                f": {why}")
        if any(r.effect_us is not None and not r.noted and not r.part for r in self.ranked):
            return head + " (the warnings above marked [step ...] size what moves it)"
        # fresh14 (2026-12-07): +12.0 % and "see the warnings above", none of which sized it
        return (head + "; no warning above sizes a cause, so the gap is unmodelled: every "
                "what-if's absolute time carries it (its ratio to this baseline less so): "
                "read what-ifs as speed-ups, or validate a fresh run of this setting "
                "(stepsim validate MODEL RUN, the baseline check †) to measure the level, "
                "and re-capture on a quiet machine if it repeats")

    def head(self) -> str:
        """The measured steps, the steady state's error and the output (``print(cal)``)."""
        return (f"Calibration({len(self.measured_step_us)} steps: measured mean "
                f"{self.measured_mean_us / 1e3:.1f} ms, steady state "
                f"{self.steady_mean_us / 1e3:.1f} ms ({100 * self.steady_mean_error:+.1f} %)"
                + (f" -> {self.output}" if self.output else "") + ")")

    def to_dict(self) -> dict:
        from stepsim.report.tables import window_dict
        return {"output": self.output, "steps": len(self.measured_step_us),
                "measured_mean_ms": us_to_ms(self.measured_mean_us),
                "measured_median_ms": us_to_ms(self.measured_median_us),
                "window": None if self.window is None else window_dict(self.window),
                "steady_state": {"mean_ms": us_to_ms(self.steady_mean_us),
                                 "median_ms": us_to_ms(self.steady_median_us),
                                 "mean_error_pct": 100 * self.steady_mean_error,
                                 "median_error_pct": 100 * self.steady_median_error},
                "warnings": list(self.warnings), "warnings_ranked": [
                    r.to_dict(self.measured_mean_us) for r in self.ranked]}

    def rows(self) -> list[dict]:
        """One row per measured step (with the window replay's columns when there is one)."""
        if self.window is not None:
            from stepsim.report.tables import window_dict
            return window_dict(self.window)["steps"]
        return [{"step": i, "measured_ms": us_to_ms(s)} for i, s in
                enumerate(self.measured_step_us)]


@dataclass(frozen=True, repr=False)
class Simulation(_Warned, _Result):
    """A simulated steady state: the model, the raw result, its summary, and how many steps
    it simulated with the mean's standard error (µs); ``warnings``: what is wrong with the
    model's own capture (:func:`scenarios.caveats.input_caveats`)."""

    model: StepModel
    result: SimResult
    summary: Summary
    count: StepCount | None = None
    warnings: tuple[str, ...] = ()

    def head(self) -> str:
        s = self.summary
        return (f"Simulation({s.mean_step_us / 1e3:.1f} ms mean step, median "
                f"{s.median_step_us / 1e3:.1f} ms; {s.bottleneck_label})")

    def to_dict(self) -> dict:
        from stepsim.report.tables import summary_dict
        return summary_dict(self.summary, self.count)

    def rows(self) -> list[dict]:
        """One row per measured step: the job's step (its slowest rank) and each rank's."""
        per_rank = self.result.step_us
        return [{"step": i, "step_ms": us_to_ms(float(job)),
                 **{f"rank{r}_ms": us_to_ms(float(per_rank[k, i]))
                    for k, r in enumerate(self.result.ranks)}}
                for i, job in enumerate(self.result.job_step_us)]


@dataclass(frozen=True)
class WindowSimulation(_Result):
    """The captured window replayed step by step next to the measurement (µs)."""

    model: StepModel
    replay: WindowReplay

    def to_dict(self) -> dict:
        from stepsim.report.tables import window_dict
        return window_dict(self.replay)

    def rows(self) -> list[dict]:
        return self.to_dict()["steps"]


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


@dataclass(frozen=True, repr=False)
class Diagnosed(_Warned, _Result):
    """The diagnosis tree (:class:`scenarios.diagnose.Diagnosis`); ``warnings``: the
    calibration's (a trace) or what is wrong with the model's own capture (a model), and a
    plot that could not be drawn."""

    diagnosis: Any
    warnings: tuple[str, ...] = ()

    def head(self) -> str:
        d = self.diagnosis
        b = d.baseline
        return (f"Diagnosed({d.name}: baseline {b.mean_step_us / 1e3:.1f} ms, "
                f"{b.bottleneck_label}; {len(d.findings)} findings)")

    def to_dict(self) -> dict:
        from stepsim.report.diagnose import diagnosis_dict

        return diagnosis_dict(self.diagnosis)

    def rows(self) -> list[dict]:
        """One row per finding: its stage, key, verdict and first what-if (ms)."""
        out = []
        for f in self.diagnosis.findings:
            w = f.whatifs[0] if f.whatifs else None
            out.append({"stage": f.stage, "key": f.key, "verdict": f.verdict,
                        "fix": w.fix if w else None,
                        "step_ms": us_to_ms(w.step_us) if w and w.step_us else None})
        return out
