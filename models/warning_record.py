"""A calibration warning as a record: its text, a one-line summary, its kind, its effect on
the predicted step (µs, where the module that writes it holds the numbers) and whether it is
only noted (it changes nothing on the step: a parameter's source, a prior that widens only
what-ifs' intervals), and whether its finding is ``uncovered`` (it moves the step by an amount
no interval covers: the model does not simulate it and no interval draws it).
:mod:`stepsim.warning_order` sorts and prints these; it reads no text.

The module that finds a thing writes its record (:func:`said`); the record travels as the
warning's text (:class:`Said`, a ``str``), so every list of warnings and every test that
greps one reads it as before. :func:`settled` moves the records into
``meta.warnings_ranked`` (the model's JSON: ``warnings`` texts as before, plus the records);
:func:`records` gives each text's record back, from either. A text with none (a warning
whose module sizes nothing, a model file written before the records) is its own unsized
record (kind ``""``).
"""
from __future__ import annotations

from typing import Iterable

from stepsim.models.param_base import StrictModel

__all__ = ["WarningRecord", "Said", "said", "prior_said", "retexted", "retold", "records", "without_kinds",
           "carried", "texts", "settled", "with_effect", "of", "kept_records"]


class WarningRecord(StrictModel):
    """One warning. ``summary``: one terminal line (``""``: the text is its own);
    ``effect_us``: what its finding changes on the predicted step (µs; None: not sized);
    ``noted``: it changes nothing on the step; ``part_of``: the kind of the warning whose
    cause this one shares, whose effect then holds this one's (sized once, this one named
    under it); ``uncovered``: its finding moves the step by an amount no interval covers
    (neither simulated nor drawn), so among the unsized it is read first: a user's calibrate
    printed the oversubscribed ranks' threads (steps 181–349 ms P10–P90) ninth of 11 unsized,
    under "profiler overhead not measurable" (fresh8, 2026-12-07)."""

    text: str
    kind: str = ""
    summary: str = ""
    effect_us: float | None = None
    noted: bool = False
    part_of: str | None = None
    uncovered: bool = False


class Said(str):
    """A warning's text that carries its :class:`WarningRecord` (``.record``)."""

    record: WarningRecord

    def __new__(cls, record: WarningRecord):
        s = super().__new__(cls, record.text)
        s.record = record
        return s

    def __reduce__(self):                # (pickled to a job's worker process)
        return Said, (self.record,)


def said(text: str, kind: str, summary: str = "", effect_us: float | None = None,
         noted: bool = False, part_of: str | None = None, uncovered: bool = False) -> Said:
    """The warning ``text`` with its record (see :class:`WarningRecord`)."""
    return Said(WarningRecord(text=text, kind=kind, summary=summary, effect_us=effect_us,
                              noted=noted, part_of=part_of, uncovered=uncovered))


def prior_said(text: str, path: str, what: str, lo: float, hi: float) -> Said:
    """A parameter not calibrated, taken from its prior ``lo``–``hi``: noted (it widens only
    what-ifs' intervals), summarized as ``what not calibrated: prior lo–hi ...``."""
    return said(text, f"prior:{path}", noted=True,
                summary=f"{what} not calibrated: prior {lo:g}–{hi:g} widens what-ifs' intervals")


def retexted(w: str, text: str, prefix: str = "") -> str:
    """``text`` (``w`` said of other files: ``name: w``) with ``w``'s record
    (:func:`retold`); a plain text where ``w`` has no record."""
    if not isinstance(w, Said):
        return text
    return Said(retold(w.record, text, prefix))


def retold(r: WarningRecord, text: str, prefix: str = "") -> WarningRecord:
    """Record ``r`` said as ``text`` (of other files: ``name: `` + its text), its summary
    headed by the same ``prefix``."""
    return r.model_copy(update={"text": text, "summary": prefix + r.summary if r.summary else ""})


def records(meta) -> list[WarningRecord]:
    """A record for each of ``meta.warnings``, in their order: the text's own
    (:class:`Said`), else the stored one with that text (``meta.warnings_ranked``), else an
    unsized one of kind ``""``."""
    stored = {r.text: r for r in getattr(meta, "warnings_ranked", ())}
    return [w.record if isinstance(w, Said) else stored.get(w) or WarningRecord(text=w)
            for w in meta.warnings]


def without_kinds(meta, kinds) -> list[str]:
    """``meta.warnings``, in order, less those whose record (:func:`records`) is of a kind in
    ``kinds``: readings a later one supersedes."""
    return [w for w, r in zip(meta.warnings, records(meta)) if r.kind not in kinds]


def texts(meta) -> list[str]:
    """``meta.warnings`` each carrying its record (:func:`records`)."""
    return carried(records(meta))


def carried(rs: Iterable[WarningRecord]) -> list[str]:
    """Each record's text, carrying the record where it has a kind (:class:`Said`): for a
    result whose ``warnings`` are texts (``Diagnosed``)."""
    return [Said(r) if r.kind else r.text for r in rs]


def settled(model):
    """``model`` with its warnings plain texts and their records in ``meta.warnings_ranked``
    (what its JSON holds, so the model saved and reloaded is equal to it)."""
    return _with_records(model, records(model.meta))


def with_effect(model, kind: str, effect_us: float | None):
    """``model`` with the effect of its warnings of ``kind`` set (µs; one its caller measured,
    e.g. by simulating: :func:`stepsim.api.calibrate`'s window speed)."""
    return _with_records(model, [r.model_copy(update={"effect_us": effect_us})
                                 if r.kind == kind else r for r in records(model.meta)])


def _with_records(model, rs: list[WarningRecord]):
    """``model`` whose warnings are the texts of ``rs``, and the records of kind stored."""
    meta = model.meta.model_copy(update={"warnings": [r.text for r in rs],
                                         "warnings_ranked": [r for r in rs if r.kind]})
    return model.model_copy(update={"meta": meta})


def of(warnings: Iterable[str]) -> list[WarningRecord]:
    """The record of each warning text (its own, else an unsized one)."""
    return [w.record if isinstance(w, Said) else WarningRecord(text=w) for w in warnings]


def kept_records(stored) -> tuple[list, str | None]:
    """A model file's ``meta.warnings_ranked`` (``stored``) less the records that cannot be
    right (not a record, a field missing, odd or not finite: a model file's NaN refused the
    whole model, though the records are optional), and the warning that counts those dropped
    (None: none). Their warnings stay, printed unsized."""
    from pydantic import ValidationError

    from stepsim.models.param_base import error_at
    from stepsim.simcore.errors import printable

    items = stored if isinstance(stored, list) else [stored]
    kept, why = [], []
    for i, x in enumerate(items):
        try:
            kept.append(x if isinstance(x, WarningRecord) else WarningRecord.model_validate(x))
        except ValidationError as e:
            loc, msg = error_at(e)
            why.append(f"record {i}{f'.{loc}' if loc else ''}: {msg}" if items is stored
                       else f"a {type(stored).__name__}, not a list")
    if not why:
        return kept, None
    return kept, (f"meta.warnings_ranked: {len(why)} of {len(items)} warning record(s) dropped, "
                  f"which cannot be right (the first: {printable(why[0])[:200]}): their warnings "
                  "are printed unsized")
