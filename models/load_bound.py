"""How much outside load a capture or a pooled record ran under, and the bound past which
calibration warns and the ledger scores a re-measured run apart (:data:`LOAD_WARN`): read by
calibration (:mod:`calibration.outside_load`), the what-ifs' caveats and the ledger."""
from __future__ import annotations

from typing import Sequence


LOAD_WARN = 0.10
"""Slowdown ``1 / held − 1`` of a capture's own threads by other load above which calibration
warns (:mod:`calibration.outside_load`; ``meta.notes.outside_load_held``) and every what-if
of its model repeats it: the tolerance calibration's replay check uses for the mean step
(``REPLAY_WARN``)."""


def outside_load_slowdown(model) -> float | None:
    """``1 / held − 1`` of the capture ``model`` was calibrated from, when calibration found
    it ran under outside load past :data:`LOAD_WARN`; else None."""
    held = model.meta.notes.get("outside_load_held")
    if isinstance(held, (int, float)) and 0 < held and 1 / held - 1 > LOAD_WARN:
        return 1 / held - 1
    return None


def capture_load_phrase(model) -> str:
    """Where the capture ``model`` was calibrated from ran under outside load, that its
    baseline holds that load, in words (empty: no load found): by :func:`outside_load_slowdown`,
    or by the training step's preempted share (``meta.notes.capture_preempted``: calibration
    kept that off-core time as CPU work, :func:`calibration.cpu.fit_cpu_model`). fresh11's HF
    capture at load 5–6 (2026-12-07) gave a 2,039 ms baseline, about 2× what the same job ran
    at in quieter moments, and ``whatif``'s baseline line did not say so."""
    notes = model.meta.notes
    s = outside_load_slowdown(model)
    if s is not None:
        how = f"about {1 + s:.1f}x slower than the machine alone"
    elif isinstance(p := notes.get("capture_preempted"), (int, float)) and p > 0:
        how = (f"its training step preempted in {100 * p:.0f} % of its context switches, "
               "that time kept as CPU work")
    else:
        return ""
    return (f"the capture ran under outside load ({how}): this baseline holds that load, and "
            "a run on a quiet machine would take less")


def pooled_load(runs: Sequence[tuple[float | None, float]]) -> tuple[float | None, str | None]:
    """The outside load of runs pooled into one record, ``runs``: per run ``(its
    outside_load_slowdown or None, the sum of its measured steps in µs)``. Returns the pool's
    slowdown and a note when a run past :data:`LOAD_WARN` is kept in the score.

    The pooled mean step is the runs' steps summed over their count, so a run whose threads
    advanced ``1 + s`` slower than alone lengthens it by at most its share of the pooled time
    times ``s``: the pool's slowdown is the time-weighted mean of its runs' (over the runs that
    could tell; None when none could). A record is scored apart past ``LOAD_WARN`` as one run
    is, when measured slower than predicted
    (``scenarios.validate.LedgerRecord.load_explains``): one run just past the bound among
    quiet re-measured runs no longer sets the whole pool apart (it was the most loaded run's
    slowdown), and a clearly loaded one still does."""
    known = [(s, w) for s, w in runs if s is not None and w > 0]
    if not known:
        return None, None
    pool = float(sum(s * w for s, w in known) / sum(w for _, w in known))
    over = [s for s, _ in known if s > LOAD_WARN]
    if not over or pool > LOAD_WARN:
        return pool, None
    return pool, (f"{len(over)} of {len(runs)} pooled runs ran under outside load (up to "
                  f"{1 + max(over):.2f}x slower than the machine alone); weighted by each "
                  "run's share of the pooled step time the pooled mean is at most "
                  f"{1 + pool:.2f}x slower, within {100 * LOAD_WARN:.0f} %, so the record is "
                  "scored (past it, scored apart when measured slower than predicted)")
