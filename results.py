"""What the functions of :mod:`stepsim.api` return: one frozen dataclass per verb, holding the
domain objects it produced (times in µs; the planner verbs' results, :mod:`stepsim.api_planner`'s,
are in :mod:`stepsim.results_planner`), with ``to_dict()`` (the document the CLI prints for
``--json``, times in ms) and ``to_frame()`` (the natural table of the result as a pandas
DataFrame, times in ms; pandas is optional: ``pip install 'stepsim[frames]'``).

Nothing here computes a result; everything is read off what the verb made.
"""
from __future__ import annotations

from dataclasses import dataclass
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
    from stepsim.scenarios.stepcount import StepCount

REPLAY_WARN = 0.10
"""A calibration whose simulated mean step is further than this (fraction) from the measured
mean is warned about. The mean is the throughput the run pays; a median can differ a lot when
steps arrive in bursts (more workers than cores), so it is reported but not judged."""

__all__ = ["Calibration", "Simulation", "WindowSimulation", "Diagnosed", "REPLAY_WARN"]


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
