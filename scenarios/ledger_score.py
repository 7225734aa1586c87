"""The score of a validation ledger (:mod:`scenarios.validate`'s records): median and max
|error|, interval coverage, bottleneck agreement, leaving out in-sample records and those the
outside load could explain (each counted on its own)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from stepsim.scenarios.validate import LedgerRecord


@dataclass(frozen=True)
class LedgerSummary:
    """How good the out-of-sample predictions in a ledger were (records of the calibration
    setting itself are counted in ``n_in_sample``, out-of-sample ones re-measured under
    outside load and slower than predicted in ``n_outside_load``; both are left out of every
    score. Loaded ones faster than predicted stay in it, counted in ``n_outside_load_kept``).

    Attributes:
        n: out-of-sample records.
        median_abs_error_pct / max_abs_error_pct: of |error_pct| (None when empty).
        coverage: fraction of records with an interval whose measured mean fell inside it.
        n_intervals: records with an interval.
        bottleneck_agreement: fraction agreeing, of ``n_bottlenecks`` with a measured one.
    """

    n: int
    median_abs_error_pct: float | None
    max_abs_error_pct: float | None
    coverage: float | None
    n_intervals: int
    bottleneck_agreement: float | None
    n_bottlenecks: int
    median_width_pct: float | None = None
    """Median P10–P90 width, in % of the predicted mean, of the records with an interval."""
    n_in_sample: int = 0
    n_baseline_checks: int = 0
    """Records of the calibration setting scored against fresh runs (the baseline's level),
    left out of the score above and summarised on their own."""
    baseline_check_median_error_pct: float | None = None
    """Their median signed error_pct (+: the model's baseline is slower than the runs)."""
    median_width_sources_pct: dict[str, float] | None = None
    """Per source of uncertainty, the median over the decomposed records of its width alone
    (% of the predicted mean)."""
    n_outside_load: int = 0
    max_outside_load_slowdown: float | None = None
    """The largest ``outside_load_slowdown`` of those records (None: none)."""
    outside_load_median_abs_error_pct: float | None = None
    """Their median |error_pct|, said beside them, never in the score."""
    n_outside_load_kept: int = 0
    """Records under outside load yet faster than predicted: scored (the load cannot explain
    a run faster than predicted)."""


def summarize_ledger(records: Sequence[LedgerRecord]) -> LedgerSummary:
    """Score a ledger's out-of-sample records, less those the outside load could explain
    (:attr:`LedgerRecord.load_explains`; see :class:`LedgerSummary`); none gives ``n=0``."""
    n_in = sum(r.in_sample for r in records)
    checks = [r.error_pct for r in records if r.baseline_check and not r.in_sample]
    records = [r for r in records if not r.in_sample and not r.baseline_check]
    loaded = [r for r in records if r.load_explains]
    records = [r for r in records if not r.load_explains]
    errs = [abs(r.error_pct) for r in records]
    widths = [r.width_pct for r in records if r.width_pct is not None]
    with_iv = [r.inside for r in records if r.inside is not None]
    with_b = [r.bottleneck_agrees for r in records if r.bottleneck_agrees is not None]
    return LedgerSummary(
        n=len(records),
        median_abs_error_pct=float(np.median(errs)) if errs else None,
        max_abs_error_pct=max(errs) if errs else None,
        coverage=sum(with_iv) / len(with_iv) if with_iv else None, n_intervals=len(with_iv),
        bottleneck_agreement=sum(with_b) / len(with_b) if with_b else None,
        n_bottlenecks=len(with_b),
        median_width_pct=float(np.median(widths)) if widths else None, n_in_sample=n_in,
        n_baseline_checks=len(checks),
        baseline_check_median_error_pct=float(np.median(checks)) if checks else None,
        median_width_sources_pct=_median_sources([r.width_sources_pct for r in records]),
        n_outside_load=len(loaded),
        max_outside_load_slowdown=max((r.outside_load_slowdown for r in loaded), default=None),
        outside_load_median_abs_error_pct=float(np.median([abs(r.error_pct) for r in loaded]))
        if loaded else None, n_outside_load_kept=sum(r.outside_load for r in records))


def _median_sources(per_record: list[dict[str, float]]) -> dict[str, float] | None:
    """Source → median width over the records that decomposed it (None: none did)."""
    names = dict.fromkeys(k for d in per_record for k in d)
    return {k: float(np.median([d[k] for d in per_record if k in d])) for k in names} \
        if names else None
