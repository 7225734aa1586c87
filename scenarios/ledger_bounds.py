"""What a ledger record's numbers can be: a record outside these cannot be right (a hand edit,
a cut or garbled line) and is dropped and counted like any line that is not a record
(:func:`scenarios.validate.read_ledger`), instead of being scored.

* step times (µs) are ≥ 0 and at most 30 days, the longest a trace may span
  (``calibration.trace_ts.MAX_SPAN_US``); measured ones are > 0, as validation requires;
* at least one measured step, at least one run;
* P10 ≤ P50 ≤ P90 where given;
* ``error_pct`` and ``median_error_pct`` are what the record's own predicted and measured
  step times give, ``100 × (predicted − measured) / measured``, to 1e-6 of the error's size
  (a record is written with every digit, so only an edit moves them apart).
"""
from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field

__all__ = ["StepUs", "MeasuredUs", "AtLeastOne", "check_record"]

_MAX_STEP_US = 30 * 86_400 * 1e6
StepUs = Annotated[float, Field(ge=0, le=_MAX_STEP_US)]
MeasuredUs = Annotated[float, Field(gt=0, le=_MAX_STEP_US)]
AtLeastOne = Annotated[int, Field(ge=1)]


def check_record(rec) -> None:
    """Raise ValueError saying what contradicts itself in ledger record ``rec``."""
    qs = [(n, getattr(rec, n)) for n in ("p10_us", "p50_us", "p90_us")]
    qs = [(n, v) for n, v in qs if v is not None]
    for (a, x), (b, y) in zip(qs, qs[1:]):
        if x > y:
            raise ValueError(f"{a} {x:g} µs is above {b} {y:g} µs")
    for err, pred, meas in (("error_pct", "predicted_mean_us", "measured_mean_us"),
                            ("median_error_pct", "predicted_median_us", "measured_median_us")):
        want = 100 * (getattr(rec, pred) - getattr(rec, meas)) / getattr(rec, meas)
        got = getattr(rec, err)
        if not math.isclose(got, want, rel_tol=0, abs_tol=0.05):
            raise ValueError(f"{err} {got:g} is not what {pred} and {meas} give ({want:g})")
    for src, w in rec.width_sources_pct.items():
        if w < 0:   # P90 - P10 of one source's draws: a hand edit gave "host ±-25 %"
            raise ValueError(f"width_sources_pct[{src!r}] {w:g} %: an interval's width (P90 "
                             "- P10) is at least 0")
