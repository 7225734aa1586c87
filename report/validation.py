"""Rendering of validation: prediction vs re-measured step time, one row per ledger record,
and the ledger's score (``stepsim validate``, ``stepsim ledger``). Times arrive in µs and are
shown in ms; nothing here computes a result."""
from __future__ import annotations

from dataclasses import asdict
from typing import Sequence

from rich.markup import escape
from rich.table import Table

from stepsim.models.load_bound import LOAD_WARN
from stepsim.report.tables import console, json_out as _json, ms_text as _ms
from stepsim.scenarios.interval_sources import LABELS, width_line
from stepsim.scenarios.predict import interval_scope
from stepsim.scenarios.validate import LedgerRecord, LedgerSummary

LEDGER_ROWS = 100
"""The most records ``stepsim ledger`` shows as rows (the latest): rendering a row costs about
2 ms, so a ledger of 200,000 lines printed every one in about 200 s; the score counts them all,
and ``--json`` lists them all."""

MIN_SHARE_RECORDS = 3
"""Below this many scored records a share (interval coverage, bottleneck agreement) is said as
a count, "1 of 1", not a percentage: "100%" of one record reads as a rate it is not."""


def share_text(fraction: float, n: int) -> str:
    """``fraction`` of ``n`` records in words: "2 of 2" below :data:`MIN_SHARE_RECORDS`
    records, else "67% of 3"."""
    if n < MIN_SHARE_RECORDS:
        return f"{round(fraction * n)} of {n}"
    return f"{fraction:.0%} of {n}"


LABEL_SHOWN = 400
"""The most characters of a record's label (and of its other free text) the table and lines
show: rich folds a cell into lines of the column's width, so a hand-edited 10 MB label took
104 s to print (3 MB: 14 s, 150,000 lines of one cell; 2026-12-06); longer text is cut and
says how much more it holds (``--json`` has it whole)."""


def shown(text: str | None) -> str:
    """``text`` as rich shows it literally: cut past :data:`LABEL_SHOWN` characters, and its
    square brackets escaped (a label ``[/]``, from ``validate --label`` or a hand edit, was a
    rich ``MarkupError`` traceback on every later ``stepsim ledger``)."""
    text = "" if text is None else str(text)
    if len(text) > LABEL_SHOWN:
        text = f"{text[:LABEL_SHOWN]}… ({len(text) - LABEL_SHOWN:,} more characters)"
    return escape(text)


IN_SAMPLE_MARK = "*"
"""The mark of an in-sample record (the calibration setting's own runs: a replay), as the
demo's table marks its calibration row."""
BASELINE_MARK = "†"
"""The mark of a baseline check: the calibration setting against fresh runs the model was
not calibrated on (:attr:`scenarios.validate.LedgerRecord.baseline_check`)."""
LOAD_MARK = "‡"
"""The mark of a record re-measured under outside load and slower than predicted
(:attr:`scenarios.validate.LedgerRecord.load_explains`), as the demo's table marks it."""


def apart_mark(r: LedgerRecord) -> str:
    """The mark a record's row carries when the score leaves it out, as
    :func:`scenarios.ledger_score.summarize_ledger` does: :data:`IN_SAMPLE_MARK` for an
    in-sample record, else :data:`LOAD_MARK` for one the outside load could explain; '' for
    a scored record."""
    if r.in_sample:
        return IN_SAMPLE_MARK
    if r.baseline_check:
        return BASELINE_MARK
    return LOAD_MARK if r.load_explains else ""


def apart_legend(records: Sequence[LedgerRecord]) -> str | None:
    """What the marks of :func:`apart_mark` on ``records`` mean, in one line (None when no
    record carries one)."""
    marks = {apart_mark(r) for r in records}
    parts = ([f"{IN_SAMPLE_MARK} in-sample: the calibration setting's own runs (a replay of "
              "the capture), left out of the score"] if IN_SAMPLE_MARK in marks else []) + (
        [f"{BASELINE_MARK} baseline check: the calibration setting against fresh runs the "
         "model was not calibrated on (the baseline's level), scored on its own line, left "
         "out of the what-ifs' score"] if BASELINE_MARK in marks else []) + (
        [f"{LOAD_MARK} re-measured under outside load and slower than predicted (the load "
         "could explain the error), left out of the score"] if LOAD_MARK in marks else [])
    return "; ".join(parts) or None


def hidden_note(n_records: int, how_to_see: str = "") -> str | None:
    """The line saying how many of ``n_records`` ledger records the table leaves out (it shows
    the latest :data:`LEDGER_ROWS`) and that the score counts them all; ``how_to_see`` is put
    after "below" (e.g. " (--json lists every record)"). None when every record is shown."""
    hidden = n_records - LEDGER_ROWS
    if hidden <= 0:
        return None
    return (f"{hidden} earlier record(s) not shown, the latest {LEDGER_ROWS} below{how_to_see};"
            f" the score counts all {n_records}")


def _record_row(r: LedgerRecord) -> list[str]:
    iv = "-" if r.p10_us is None else f"{_ms(r.p10_us)}-{_ms(r.p90_us)}"
    n = f" ({r.steps_measured})"
    mark = apart_mark(r)
    return [shown(r.label) + (f" {mark}" if mark else ""), _ms(r.predicted_mean_us), iv,
            _ms(r.measured_mean_us) + n,
            _ms(r.measured_median_us) + n, f"{r.error_pct:+.1f}% ({r.median_error_pct:+.1f}%)",
            {True: "yes", False: "no", None: "-"}[r.inside],
            f"{shown(r.predicted_bottleneck)} / {shown(r.measured_bottleneck or '-')}"
            + {True: " ok", False: " differ", None: ""}[r.bottleneck_agrees]]


_RECORD_COLS = ("check", "predicted mean", "P10-P90", "measured mean (steps)",
                "measured median (steps)",
                "error mean (median)", "inside", "bottleneck predicted / measured")


def print_validation(records: Sequence[LedgerRecord], as_json: bool = False,
                     scope: bool = False, per_run: Sequence[dict] | None = None,
                     startup: bool = True, startup_said: bool = False) -> None:
    """Prediction vs measurement, one row per record; ``scope``: also what each record's
    interval is of, in words (:func:`scenarios.predict.interval_scope`), where the record
    has no width by source (whose line says it); ``per_run`` (one record's runs, as
    ``api.validate`` gives them): in the JSON only, each record's ``per_run``, with each
    run's ranks' detail the warnings summarise; ``startup``: each record's left-out first
    step in full (:func:`startup_text`; the ledger says them in one line, as validate said
    each when it ran); ``startup_said``: the ledger the record joins said a left-out first
    step in full before (an earlier setting's validate), so it is said in one short line
    (fresh13, 2026-12-07: one validate per setting repeated the paragraph each time)."""
    if as_json:
        return _json([{**r.model_dump(), **({"per_run": list(per_run)} if per_run is not None
                                            else {})} for r in records])
    t = Table(title="prediction vs re-measured step time (ms)", show_edge=False)
    rows = [_record_row(r) for r in records]

    def longest_word(i: int, floor: int) -> int:
        """Wide enough for the column's longest word (capped), so labels wrap between
        words, never inside one."""
        return min(40, max([floor] + [len(w) for row in rows for w in row[i].split()]))

    for col in _RECORD_COLS:
        if col == "check":   # the what-if in words: takes the width the numbers leave
            t.add_column(col, justify="left", overflow="fold", ratio=1,
                         min_width=longest_word(0, 16))
        elif col.startswith("bottleneck"):
            t.add_column(col, justify="left", overflow="fold",
                         min_width=longest_word(len(_RECORD_COLS) - 1, 8),
                         max_width=max(18, longest_word(len(_RECORD_COLS) - 1, 8)))
        else:
            t.add_column(col, justify="right", overflow="fold",
                         max_width={"P10-P90": 13, "error mean (median)": 15,
                                    "measured mean (steps)": 13,
                                    "measured median (steps)": 13}.get(col, 9))
    for row in rows:
        t.add_row(*row)
    console().print(t)
    legend = apart_legend(records)
    if legend:
        console().print(legend)
    scoped = False
    for r in records:
        of = interval_scope(r.runs, r.steps_measured)
        if r.width_sources_pct:
            console().print(f"{shown(r.label)}: interval of {of}, "
                            + shown(width_line(r.width_pct, r.width_sources_pct)))
        elif scope and r.p10_us is not None:
            console().print(f"{shown(r.label)}: P10-P90 of {of}")
            scoped = scoped or r.runs > 1   # (of one run too: nothing to set apart)
        if r.baseline_check:
            console().print(f"{shown(r.label)}: baseline check (fresh runs of the calibration "
                            f"setting): the model's baseline is {r.error_pct:+.1f}% against "
                            "them (+: predicted slower); every what-if's absolute time carries "
                            "this offset")
        if r.outside_load:
            apart = "in-sample" if r.in_sample else "a baseline check" if r.baseline_check \
                else ""
            console().print(
                f"[yellow]{shown(r.label)}:[/yellow] re-measured under outside load, about "
                f"{1 + r.outside_load_slowdown:.1f}x slower than the machine alone: " + (
                    f"its error is the load's as much as the prediction's ({apart}: out of "
                    "the score in any case)" if apart and r.load_explains else
                    f"yet faster than predicted ({r.error_pct:+.1f}%), which the load cannot "
                    f"explain (it only slows a run; {apart}: out of the score in any case)"
                    if apart else
                    "its error is the load's as much as the prediction's, and a ledger scores "
                    "it apart (re-measure on a quiet machine)" if r.load_explains else
                    f"yet faster than predicted ({r.error_pct:+.1f}%), which the load cannot "
                    "explain (it only slows a run): a ledger keeps it in the score"))
        if startup and r.startup_us is not None and startup_said:
            console().print(f"{shown(r.label)}: the first step left out of the measured steps, "
                            f"{_ms(r.startup_us)} ms (its next() {_ms(r.startup_next_us)} ms), "
                            "as the ledger's earlier records said (ledger --json: startup_us)")
        elif startup and r.startup_us is not None:
            console().print(f"{shown(r.label)}: " + startup_text(
                r.startup_us, r.startup_next_us, r.startup_later_next_us, r.startup_runs,
                r.startup_capture))
    if scoped:   # a pooled interval beside whatif's of one run (newuser3, 2026-12-06: said
        # after a one-run interval, it read as a correction of it)
        console().print("(whatif's and diagnose's intervals are of one run's mean step)")


SPAWN_SHARE = 0.5
"""A left-out first step whose ``next()`` held more than this share of it waited there for its
workers to start (a stated rule: a spawn's wait is the step's bulk)."""


AHEAD = {"lightning": " (Lightning's fetcher fetches ahead of the step)"}
"""Per capture (the sidecar's ``capture``), what of its framework runs before a step's
``next()``: said of a first step whose time lies outside it; nothing for the others (an HF
Trainer run was told of Lightning's fetcher, fresh11, 2026-12-07)."""


def startup_text(step_us: float, next_us: float, later_next_us: float, runs: int,
                 capture: str | None = None) -> str:
    """What validate left out of the measured steps, truthfully: the run's first step, said to
    have waited in ``next()`` for its workers' start-up only where its ``next()`` held most of
    it (``SPAWN_SHARE``). fresh10's Lightning captures left out a 364.5 ms first step whose
    ``next()`` took 9.4 ms and were told its next() had spawned the workers. ``capture``: what
    made the runs (the sidecar's ``capture``), whose framework alone is named (:data:`AHEAD`)."""
    runs_text = f"{runs} run{'s' if runs != 1 else ''}"
    head = (f"the first step (a multi-process DataLoader's start-up) is left out of the "
            f"measured steps: {_ms(step_us)} ms, its next() {_ms(next_us)} ms against a median "
            f"{_ms(later_next_us, 2)} ms after it")
    if next_us > SPAWN_SHARE * step_us:
        return (f"{head}: its next() spawned the workers and waited for their first batch "
                f"({runs_text})")
    return (f"{head}: its next() waited for no start-up, so the other "
            f"{_ms(step_us - next_us)} ms lie outside next(), the first step's own work or a "
            f"start-up paid before it{AHEAD.get(capture or '', '')} ({runs_text})")


def print_ledger(records: Sequence[LedgerRecord], s: LedgerSummary,
                 as_json: bool = False) -> None:
    """Every record, then the score: median and max |error|, interval coverage, bottleneck
    agreement; the in-sample records and those the outside load could explain counted apart."""
    if as_json:
        return _json({"summary": asdict(s), "records": [r.model_dump() for r in records]})
    c = console()
    note = hidden_note(len(records), " (--json lists every record)")
    if note:
        c.print(note)
    shown_records = records[-LEDGER_ROWS:]
    print_validation(shown_records, startup=False)
    first = sum(r.startup_us is not None for r in shown_records)
    if first:   # fresh13 (2026-12-07): a paragraph each, repeated from validate's
        c.print(f"{first} record{'s' if first != 1 else ''}' first step (a multi-process "
                "DataLoader's start-up) left out of the measured steps, as validate said of "
                "each (ledger --json: startup_us)")
    if s.n_in_sample:
        c.print(f"{s.n_in_sample} in-sample record{'s' if s.n_in_sample != 1 else ''} (the "
                "calibration setting itself) left out of the score")
    if s.n_baseline_checks:
        c.print(f"{s.n_baseline_checks} baseline check{'s' if s.n_baseline_checks != 1 else ''}"
                " (the calibration setting against fresh runs) left out of the score: median "
                f"error {s.baseline_check_median_error_pct:+.1f}% (+: the model's baseline "
                "slower than the runs)")
    if s.n_outside_load:
        c.print(f"{s.n_outside_load} record{'s' if s.n_outside_load != 1 else ''} re-measured "
                f"under outside load (up to {1 + s.max_outside_load_slowdown:.1f}x slower than "
                f"the machine alone) left out of the score: median |error| "
                f"{s.outside_load_median_abs_error_pct:.1f}%, the load's as much as the "
                "prediction's")
    if s.n_outside_load_kept:
        c.print(f"{s.n_outside_load_kept} record{'s' if s.n_outside_load_kept != 1 else ''} "
                "re-measured under outside load yet faster than predicted kept in the score "
                "(the load only slows a run: it cannot explain that error)")
    if s.n == 0:
        c.print("the ledger has no out-of-sample prediction")
        return
    c.print(f"{s.n} out-of-sample prediction{'s' if s.n != 1 else ''} (errors of the mean "
            f"step): median |error| {s.median_abs_error_pct:.1f}%, "
            f"max |error| {s.max_abs_error_pct:.1f}%")
    if s.coverage is not None:
        # a record can say inside without its P10/P90 (a hand-written one): no width then
        width = "" if s.median_width_pct is None else \
            f", median width {s.median_width_pct:.1f}% of the prediction"
        c.print(f"interval coverage: {share_text(s.coverage, s.n_intervals)} (P10-P90 aims at "
                f"80% of runs without outside load past {100 * LOAD_WARN:.0f}%){width}")
    if s.median_width_sources_pct:
        c.print("median width by source, each alone: " + ", ".join(
            f"{shown(LABELS.get(k, k))} {v:.1f}%" for k, v in sorted(
                s.median_width_sources_pct.items(), key=lambda kv: -kv[1])))
    if s.bottleneck_agreement is not None:
        c.print(f"bottleneck agreement: {share_text(s.bottleneck_agreement, s.n_bottlenecks)}")
