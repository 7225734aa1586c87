"""A validation's record in the ledger (:class:`LedgerRecord`, times in µs): what was
predicted and measured, checked to agree with itself (:mod:`scenarios.ledger_bounds`).
:mod:`scenarios.validate` makes, writes and reads them.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator

from stepsim.models.load_bound import LOAD_WARN
from stepsim.models.param_base import StrictScalars
from stepsim.scenarios.ledger_bounds import AtLeastOne, MeasuredUs, StepUs, check_record
from stepsim.simcore.errors import printable

__all__ = ["LedgerRecord"]


class LedgerRecord(StrictScalars):
    """One validation: a prediction and what was measured (times in µs).

    ``error_pct`` is ``100 × (predicted − measured) / measured`` on the mean step;
    ``median_error_pct`` the same on the median. ``inside`` is None without an interval;
    ``bottleneck_agrees`` None without a measured bottleneck.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    time: str
    label: str
    model: str
    scenario: str
    traces: list[str]

    @field_validator("label", "model", "traces", mode="before")
    @classmethod
    def _printable(cls, v):
        """File names become printable UTF-8 (see :func:`simcore.errors.shown`)."""
        return printable(v)
    steps_measured: AtLeastOne
    predicted_mean_us: StepUs
    predicted_median_us: StepUs
    p10_us: StepUs | None
    p50_us: StepUs | None
    p90_us: StepUs | None
    measured_mean_us: MeasuredUs
    measured_median_us: MeasuredUs
    error_pct: float
    median_error_pct: float
    inside: bool | None
    predicted_bottleneck: str
    measured_bottleneck: str | None
    bottleneck_agrees: bool | None
    in_sample: bool = False
    """The prediction is of the setting the model was calibrated on, scored against runs it
    was calibrated on (a replay, not a prediction): kept apart from the score."""
    baseline_check: bool = False
    """The prediction is of the calibration setting, scored against fresh runs the model was
    not calibrated on (:mod:`calibration.capture_ids`): a check of the baseline's level,
    scored on its own line, never in the what-ifs' score (the calibration setting is never
    counted in a headline error)."""
    startup_us: StepUs | None = None
    """The worker start-up step (a multi-process DataLoader's first ``next()`` spawns its
    workers), left out of the measured steps: its mean over the runs that had one (None:
    none seen); ``startup_next_us`` its ``next()``, ``startup_later_next_us`` the median
    ``next()`` after it, ``startup_runs`` how many runs it is of."""
    startup_next_us: StepUs | None = None
    startup_later_next_us: StepUs | None = None
    startup_runs: Annotated[int, Field(ge=0)] = 0
    startup_capture: str | None = None
    """What made the runs with a start-up step (``lightning``, ``transformers``, ``harness``,
    as their sidecars say; None: unsaid or mixed), for what it says of the step."""
    runs: AtLeastOne = 1
    """Re-measured runs pooled (the interval is of their pooled mean: the host's speed once
    per run, the steps' variation through the standard error of ``steps_measured``)."""
    width_sources_pct: dict[str, float] = {}
    """The interval's P90 − P10 (% of the predicted mean) with one source of uncertainty at a
    time (:mod:`scenarios.interval_sources`); empty: not decomposed."""
    outside_load_slowdown: Annotated[float, Field(ge=0)] | None = None
    """How much slower than the machine alone the re-measured run(s) advanced, ``1 / held −
    1`` (``calibration.measure.MeasuredSteps``; of runs pooled, their time-weighted mean,
    ``models.load_bound.pooled_load``); None: not measurable (no sidecar), or a ledger
    written before it was recorded. Past
    :data:`models.load_bound.LOAD_WARN` the record is scored apart (:attr:`outside_load`)."""

    @model_validator(mode="after")
    def _consistent(self):
        check_record(self)      # scenarios.ledger_bounds: numbers that contradict each other
        return self

    @property
    def outside_load(self) -> bool:
        """The measurement ran under outside load past ``LOAD_WARN``: its error is the load's
        as much as the prediction's."""
        return self.outside_load_slowdown is not None and self.outside_load_slowdown > LOAD_WARN

    @property
    def load_explains(self) -> bool:
        """Under outside load and measured slower than predicted (``error_pct`` < 0): the load
        could explain the miss, so a ledger scores the record apart. A loaded run faster than
        predicted stays in the score: outside load only slows a run."""
        return self.outside_load and self.error_pct < 0

    @property
    def width_pct(self) -> float | None:
        """The P10–P90 interval's width, in % of the predicted mean (None without one)."""
        if self.p10_us is None or self.p90_us is None or self.predicted_mean_us <= 0:
            return None
        return 100 * (self.p90_us - self.p10_us) / self.predicted_mean_us
