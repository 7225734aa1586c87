"""Which captures a model was calibrated on, so that ``validate`` tells a replay of them from
a fresh run of the same setting.

A capture is named by its sidecar's host and ``iter_start_us`` (the instant its loader's
iterator started, µs on the host's monotonic clock: no two captures on a host share it).
``calibrate`` records the ids of the capture's and every replicate's sidecars (every rank's)
in ``meta.notes[CAPTURES_NOTE]``; ``validate`` of the calibration setting is in-sample when a
run it scores is one of them, and a check of the baseline's level when none is (a model
calibrated before the note existed: every run of its setting counts as in-sample, as before).
The note is written only when each of the model's captures names an id (:func:`calibration_note`):
one that names none (a sidecar from before the field, a trace recorded without the harness)
would be taken for a fresh run of its own setting (break22, 2026-12-07).
"""
from __future__ import annotations

from pathlib import Path

import orjson

from stepsim.calibration.sidecar import sidecar_beside
from stepsim.simcore.errors import InputError
from stepsim.simcore.files import read_input

__all__ = ["CAPTURES_NOTE", "calibration_note", "capture_ids", "model_capture_ids"]

CAPTURES_NOTE = "calibration_captures"
"""The ``meta.notes`` key of the comma-separated capture ids a model was calibrated on."""


def _sidecars(path: Path) -> list[Path]:
    if path.is_dir():
        return [f for f in (path / "sidecar.json", *sorted(path.glob("rank*/sidecar.json")),
                            *sorted(path.glob("*.sidecar.json"))) if f.is_file()]
    if path.name.endswith("sidecar.json"):
        return [path] if path.is_file() else []
    side = sidecar_beside(path)
    return [side] if side is not None else []


def capture_ids(paths) -> frozenset[str]:
    """The ids (``host@iter_start_us``) of the sidecars of ``paths`` (capture folders, a DDP
    job's folder, traces, sidecars); a sidecar that cannot be read or names no instant adds
    none (its run is then not known as a capture)."""
    return frozenset(i for p in paths for side in _sidecars(Path(p)) for i in _id(side))


def _id(side: Path) -> tuple[str, ...]:
    """The id of the sidecar ``side`` (none where it cannot be read or names no instant)."""
    try:    # (bounded: a 450 MB sidecar, refused by its reader, was read whole here: 2.6 GB)
        d = orjson.loads(read_input(side, "sidecar"))
    except (InputError, orjson.JSONDecodeError):
        return ()
    at = d.get("iter_start_us") if isinstance(d, dict) else None
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        return (f"{d.get('host_name') or '?'}@{float(at):.3f}",)
    return ()


def calibration_note(trace, sidecar, replicates) -> str | None:
    """The :data:`CAPTURES_NOTE` text of a model calibrated on ``trace`` (with its ``sidecar``,
    None: the one beside it) and ``replicates``; None where one of them names no id (the note
    would say that capture is not the model's: a replay of it scored as a fresh run)."""
    each = [frozenset(_id(Path(sidecar))) if sidecar is not None else capture_ids([trace]),
            *(capture_ids([r]) for r in replicates)]
    return ",".join(sorted(frozenset().union(*each))) if all(each) else None


def model_capture_ids(model) -> frozenset[str] | None:
    """The capture ids ``model`` records it was calibrated on; None where it records none (a
    model calibrated before the note, or without a sidecar)."""
    said = model.meta.notes.get(CAPTURES_NOTE)
    return frozenset(said.split(",")) if isinstance(said, str) and said else None
