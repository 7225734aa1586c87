"""Dropping a sidecar's stand-alone records that cannot be right (:mod:`calibration.sidecar`)."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from stepsim.models.param_base import error_at


THREAD_SLACK_US, THREAD_SLACK_SHARE = 1000.0, 0.01
"""One thread's CPU time (µs) may pass its wall time by this much (µs, plus this share of the
wall) and still be right: the two clocks are read one after the other (inferred: over 48,000
real batch and step records of 2026-12-04/05 the most was 120 µs, on a ``next()`` of 259 µs);
past it the record cannot be right (a thread runs on one core at a time)."""


def past_wall(cpu_us: float, wall_us: float) -> bool:
    """Whether one thread's CPU time (µs) passes its wall time (µs) beyond the clocks' slack
    (:data:`THREAD_SLACK_US`, :data:`THREAD_SLACK_SHARE`): a record that cannot be right."""
    return cpu_us > wall_us * (1 + THREAD_SLACK_SHARE) + THREAD_SLACK_US


def drop_bad_records(p: Path, data: dict, records: dict, where: str = "") -> list[str]:
    """Remove from ``data`` (in place) the records of its ``records`` lists (name → record
    model) that do not validate, and put in place of the others the records they validate to
    (the model that reads ``data`` takes them as they are: each record is validated once, and
    its dict is not held beside it); one warning per list that lost some (a list of the wrong
    type is left to the validation, which refuses the file)."""
    notes = []
    for key, rec in records.items():
        items = data.get(key)
        if not isinstance(items, list):
            continue
        bad, gone = [], set()
        for i, item in enumerate(items):
            try:
                items[i] = rec.model_validate(item)   # (the dict freed as its record is made)
            except ValidationError as e:
                loc, msg = error_at(e)
                bad.append(f"{where}{'.'.join(filter(None, (key, str(i), loc)))}: {msg}")
                gone.add(i)
        if bad:
            data[key] = [r for i, r in enumerate(items) if i not in gone]
            notes.append(f"{p.name}: dropped {len(bad)} of {len(items)} '{where}{key}' "
                         f"record(s) that cannot be right (first: {bad[0]})")
    return notes


def dropped_note(p: Path, key: str, n: int, total: int, first: str, more: str = "") -> str:
    """The one warning counting ``n`` of ``total`` records of the list ``key`` (with its
    prefix, ``probe.steps``) of sidecar ``p`` dropped as records that cannot be right,
    naming the ``first`` (``"<key>.<i>: why"``); ``more`` goes before it."""
    return (f"{p.name}: dropped {n} of {total} '{key}' record(s) that cannot be right{more} "
            f"(first: {first})")


STEP_END_SLACK_US = 2.0
"""µs a step's end (``t_start_us + wall_us``) may pass the next step's start and still be
taken. The harness stamps a step's end and the next step's start from one monotonic clock, one
read after the other (:func:`calibration.window.step_row`), so an honest record ends first; a
writer that rounds the three numbers to whole µs moves the end by at most 1.5 µs (closed
form). Real captures: every step ended at least 23.1 µs before the next began (18,560 pairs in
472 sidecars of 2026-12-04/06, none past)."""


def drop_overrunning_steps(p: Path, owner, where: str = "") -> list[str]:
    """Drop (in place) the timed step records of ``owner`` that cannot be in their place: one
    loop runs its steps in turn, so

    * a record whose ``t_start_us`` an earlier record already holds is a second record of that
      step (a copied line): it goes without a number of its own, and where it is not a copy of
      the first, the first goes too (which was meant cannot be told), its number kept;
    * a record that starts before the one placed before it (a swapped or reversed pair) goes
      with that one, both numbers kept (each is out of its place; the file was refused whole);
    * a record whose wall runs past the start of the next by more than
      :data:`STEP_END_SLACK_US` goes, its number kept (a 28-hour wall 74 ms before the next
      step fitted an interference outside its prior).

    One warning counting the copies and one counting the rest, each naming its first. The
    numbers (places in the file, the copies not counted) of the dropped steps are kept in
    ``owner._gone_steps`` where it has one (:attr:`calibration.sidecar.Sidecar.gone_steps`:
    the profiled steps' numbers are the trace's ``ProfilerStep#N``)."""
    notes, why = _drop_copies(p, owner, where)
    steps = owner.steps
    timed = [i for i, s in enumerate(steps) if s.t_start_us is not None]
    for i, j in zip(timed, timed[1:]):
        a, b = steps[i], steps[j]
        if b.t_start_us < a.t_start_us:
            why.setdefault(j, f"it starts at {b.t_start_us:g} µs, before {where}steps.{i} "
                              f"({a.t_start_us:g} µs; one loop runs its steps in turn)")
            why.setdefault(i, f"{where}steps.{j} after it starts before it")
            continue
        over = a.t_start_us + a.wall_us - b.t_start_us
        if over > STEP_END_SLACK_US:
            why.setdefault(i, f"its wall_us of {a.wall_us:g} µs ends {over:g} µs after "
                              f"{where}steps.{j} starts; one loop runs its steps in turn")
    notes += remove_records(p, owner, "steps", why, where)
    if why and hasattr(owner, "_gone_steps"):
        owner._gone_steps = frozenset(why)
    return notes


def _drop_copies(p: Path, owner, where: str) -> tuple[list[str], dict[int, str]]:
    """Remove (in place) each step record whose ``t_start_us`` an earlier one holds (no number
    kept): the warning counting them, and the places (in the list left) of the earlier ones
    that it is not a copy of, with why each cannot be right."""
    steps = owner.steps
    first: dict[float, int] = {}
    copies, clash = [], {}
    for i, s in enumerate(steps):
        if s.t_start_us is None:
            continue
        k = first.setdefault(s.t_start_us, i)
        if k != i:
            copies.append(i)
            if s != steps[k]:
                clash.setdefault(k, f"{where}steps.{i} records a step of the same start "
                                    f"({s.t_start_us:g} µs) with other times")
    if not copies:
        return [], {}
    gone = set(copies)
    kept = [i for i in range(len(steps)) if i not in gone]
    place = {i: n for n, i in enumerate(kept)}
    owner.steps = [steps[i] for i in kept]
    c = copies[0]
    at = steps[c].t_start_us
    return [dropped_note(p, f"{where}steps", len(copies), len(steps),
                         f"{where}steps.{c}: a second record of the step that starts at "
                         f"{at:g} µs, as {where}steps.{first[at]}",
                         " as copies")], {place[k]: w for k, w in clash.items()}


def remove_records(p: Path, owner, attr: str, why: dict[int, str], where: str = "") -> list[str]:
    """Drop (in place) the records of ``owner``'s list ``attr`` at the indices of ``why``
    (index: why it cannot be right); the one warning that counts them and names the first
    (none where ``why`` is empty)."""
    if not why:
        return []
    items = getattr(owner, attr)
    first = min(why)
    setattr(owner, attr, [r for i, r in enumerate(items) if i not in why])
    return [dropped_note(p, f"{where}{attr}", len(why), len(items),
                         f"{where}{attr}.{first}: {why[first]}")]
