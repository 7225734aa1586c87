"""Dropping a sidecar's stand-alone records that cannot be right (:mod:`calibration.sidecar`)."""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from stepsim.models.param_base import error_at


def drop_bad_records(p: Path, data: dict, records: dict, where: str = "") -> list[str]:
    """Remove from ``data`` (in place) the records of its ``records`` lists (name → record
    model) that do not validate; one warning per list that lost some (a list of the wrong
    type is left to the validation, which refuses the file)."""
    notes = []
    for key, rec in records.items():
        items = data.get(key)
        if not isinstance(items, list):
            continue
        keep, bad = [], []
        for i, item in enumerate(items):
            try:
                rec.model_validate(item)
                keep.append(item)
            except ValidationError as e:
                loc, msg = error_at(e)
                bad.append(f"{where}{'.'.join(filter(None, (key, str(i), loc)))}: {msg}")
        if bad:
            data[key] = keep
            notes.append(f"{p.name}: dropped {len(bad)} of {len(items)} '{where}{key}' "
                         f"record(s) that cannot be right (first: {bad[0]})")
    return notes
