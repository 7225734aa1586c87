"""Warnings a user can read: each headed by a one-line summary, those whose finding changes
the predicted step first, largest effect first (ms and % of the step), then those whose effect
is not sized (first those whose finding no interval covers: the record's ``uncovered``), then,
one line each, those that change nothing on the step (a parameter's
source, a prior that widens only what-ifs' intervals).

A new user's calibration printed 11 warnings of 200–600 characters with no sign of which
mattered (newuser4, 2026-12-06: the window-speed ×0.787 and the step-tail +37 ms among
priors that change no step). The texts are unchanged and kept whole: in the model's
``meta.warnings``, the results' ``warnings``, the JSON's ``warnings_ranked`` and, for the
noted ones, behind ``--verbose``.

The summary, the effect (µs) and whether a warning is noted are written by the module that
finds it, as a record (:class:`stepsim.models.warning_record.WarningRecord`, carried by the
text); this module only sorts and prints them. A warning with no record (a module that sizes
nothing, a model file written before the records) keeps its text, a summary cut from its
first clause, and no effect (not sized, never among the noted): no text is read for numbers
(the rules that did so lost a warning's size when it was reworded).

One cause, one size: a record ``part_of`` another kind that is present and sized is folded
into it (its effect added to the other's, itself printed under it as ``[part of the above]``):
the slow profiled window moved both the host speed and the step's work (fresh6, 2026-12-06:
−7.9 % and −3.4 %, printed as two findings).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable

from stepsim.models.param_base import MAX_DURATION_US
from stepsim.models.warning_record import WarningRecord, of

SUMMARY_CHARS = 120
"""A summary's most characters (a terminal line)."""
ONE_LINE = 140
"""A warning no rule summarizes and no longer than this is its own summary and prints as one
line, as before (``--jobs 1000: ...`` is 130: a summary of it would repeat it)."""


@dataclass(frozen=True)
class Ranked:
    """One warning: ``text`` whole, ``summary`` in one line, ``effect_us`` what its finding
    changes on the predicted step (µs; None: not sized), ``noted``: it changes nothing on the
    step; ``part``: it is part of the sized warning printed above it (its effect is in that
    one's); ``uncovered``: its finding is in no interval (the record's)."""

    text: str
    summary: str
    effect_us: float | None = None
    noted: bool = False
    part: bool = False
    uncovered: bool = False

    def effect_said(self, step_us: float | None) -> str:
        """``step +37.4 ms, +13.8 %`` (the % of the measured step, where known)."""
        ms = f"step {self.effect_us / 1e3:+.1f} ms"
        if step_us:
            ms += f", {100 * self.effect_us / step_us:+.1f} %"
        return ms

    def to_dict(self, step_us: float | None = None) -> dict:
        e = None if self.part else self.effect_us
        return {"summary": self.summary, "noted": self.noted,
                "effect_ms": None if e is None else e / 1e3,
                "effect_pct": None if e is None or not step_us else 100 * e / step_us,
                "text": self.text, **({"part_of_above_ms": self.effect_us / 1e3}
                                      if self.part and self.effect_us is not None else {})}


_DEPTH = {"(": 1, ")": -1}
MIN_CLAUSE = 40
"""A clause shorter than this is a name, not a summary (``loader.num_workers=0: ...``,
``host cores unknown: ...``): the summary runs on to the next clause."""


def summary_of(text: str) -> str:
    """A warning's first clause: up to its first ``: `` or ``; `` outside parentheses past
    :data:`MIN_CLAUSE` characters, else its first words, within :data:`SUMMARY_CHARS`; the
    whole text within :data:`ONE_LINE`."""
    if len(text) <= ONE_LINE:
        return text
    depth = 0
    for i, ch in enumerate(text[:SUMMARY_CHARS + 1]):
        depth += _DEPTH.get(ch, 0)
        if depth == 0 and i >= MIN_CLAUSE and text[i:i + 2] in (": ", "; "):
            return text[:i]
    return _cut(text)


def _cut(text: str) -> str:
    """``text`` within :data:`SUMMARY_CHARS`, cut after a word and marked ``…``."""
    if len(text) <= SUMMARY_CHARS:
        return text
    return text[:SUMMARY_CHARS - 1].rsplit(" ", 1)[0].rstrip(",;:( ") + "…"


def rank_one(w: str | WarningRecord) -> Ranked:
    """The warning ``w`` (a text, which may carry its record, or a record) as printed: its
    record's summary, effect and note; without a summary, its first clause
    (:func:`summary_of`), the whole text within :data:`ONE_LINE`. An effect that is not
    finite, or past :data:`~stepsim.models.param_base.MAX_DURATION_US` either way (no step
    changes by more: a model file's 1e308 µs printed as ``[step…`` and summed to inf), is
    not sized."""
    r = w if isinstance(w, WarningRecord) else of([w])[0]
    e = r.effect_us
    effect = e if e is not None and math.isfinite(e) and abs(e) <= MAX_DURATION_US else None
    summary = _cut(r.summary) if r.summary else summary_of(r.text)
    return Ranked(r.text, summary, effect, r.noted, uncovered=r.uncovered)


def ranked(warnings: Iterable[str | WarningRecord]) -> tuple[Ranked, ...]:
    """``warnings`` (texts or records, each said once) ordered: sized effects, largest first,
    each followed by its parts (a record ``part_of`` its kind, folded into its effect); then
    the unsized, those no interval covers first (``uncovered``), each group in its own
    order; then the noted, in theirs."""
    rs = list({r.text: r for r in (w if isinstance(w, WarningRecord) else of([w])[0]
                                   for w in warnings)}.values())
    shown = {r.text: rank_one(r) for r in rs}
    sized = {r.kind: r for r in rs if r.kind and shown[r.text].effect_us is not None
             and not r.noted}
    # a parent is part of no other (a chain or a cycle of part_of folds nothing into a part,
    # which is printed only under its own parent: a model file's a<->b lost both)
    parents = {k: p for k, p in sized.items()
               if sized.get(p.part_of) is None or sized[p.part_of] is p}
    parts: dict[str, list[Ranked]] = {}
    for r in rs:
        p = parents.get(r.part_of) if r.part_of else None
        own = shown[r.text]
        if p is not None and p is not r and own.effect_us is not None and not r.noted:
            parent = shown[p.text]
            shown[p.text] = replace(parent, effect_us=parent.effect_us + own.effect_us)
            shown[r.text] = replace(own, part=True)
            parts.setdefault(p.text, []).append(shown[r.text])
    out = [shown[r.text] for r in rs]
    first = sorted((r for r in out if r.effect_us is not None and not r.noted and not r.part),
                   key=lambda r: -abs(r.effect_us))
    return (*(x for r in first for x in (r, *parts.get(r.text, ()))),
            *sorted((r for r in out if r.effect_us is None and not r.noted),
                    key=lambda r: not r.uncovered),
            *(r for r in out if r.noted))


def lines(rs: Iterable[Ranked], step_us: float | None = None, verbose: bool = False
          ) -> list[str]:
    """The ``warning:`` lines of :func:`ranked`'s warnings: each headed by its summary (its
    effect on the step in brackets where sized), its whole text indented below where that is
    longer; the noted together at the end, one line each (their whole text too with
    ``verbose``)."""
    out: list[str] = []
    noted = [r for r in rs if r.noted]
    for r in rs:
        if r.noted:
            continue
        if r.effect_us is None and _is_beginning(r):
            out.append(f"warning: {r.text}")    # said once, whole, as a user may grep it
            continue
        head = _cut(f"[part of the above] {r.summary}") if r.part else r.summary \
            if r.effect_us is None else _cut(f"[{r.effect_said(step_us)}] {r.summary}")
        out.append(f"warning: {head}")
        if r.summary != r.text:
            out.append(f"  {r.text}")
    if noted:
        out.append(f"warning: noted, no effect on the step ({len(noted)}"
                   + ("" if verbose else "; each in full with --verbose") + "):")
        for r in noted:
            out.append(f"  - {r.summary}")
            if verbose and r.summary != r.text:
                out.append(f"      {r.text}")
    return out


def _is_beginning(r: Ranked) -> bool:
    """Whether an unsized warning's summary is only its text's beginning (its first clause, or
    cut and marked ``…``): then the text is printed whole on one line, as before ranking, not
    headed by its own first words. Headed, its words showed twice (the merge's CI: 7 tests
    found a once-said warning twice); headed by its beginning with the rest on the line under
    it, a phrase across the cut was in neither line (the next CI: a ledger warning's
    "error_pct -1 is not what", DDP profiler-overhead lines without their rank)."""
    core = r.summary[:-1] if r.summary.endswith("…") else r.summary
    return r.text.startswith(core)


def printed_texts(printed: str) -> list[str]:
    """Each warning's text from :func:`lines`' output among other lines (a verb's stderr): a
    header's indented detail where it has one, else the header (``warning: `` taken off); a
    noted one's summary, or its detail with ``--verbose``. What a script (or a test) that read
    one ``warning:`` line per warning reads now."""
    out: list[str] = []
    state = None        # "header": a detail may follow; "noted": inside the noted block
    for line in printed.splitlines():
        if line.startswith("warning: noted, no effect on the step ("):
            state = "noted"
        elif line.startswith("warning: "):
            out.append(line[len("warning: "):])
            state = "header"
        elif state == "header" and line.startswith("  "):
            out[-1], state = line[2:], None           # its detail
        elif state == "noted" and line.startswith("  - "):
            out.append(line[len("  - "):])
        elif state == "noted" and line.startswith("      "):
            out[-1] = line.strip()                    # a noted one's detail (--verbose)
        else:
            state = None
    return out
