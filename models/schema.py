"""Saved StepModels across stepsim versions. ``schema_version`` says which schema wrote a file
(:data:`models.param_base.SCHEMA_VERSION` is the one written now). A file of an older schema
loads, read as the current one, unless it holds a field a later schema changed: its numbers
then mean something the current model cannot express, and it is refused with one line asking
for a re-calibration. A file of a newer schema is refused: upgrade stepsim.

History:

1. the first schema.
2. ``comm.host_cpu_fraction`` (a collective's CPU work per µs of its transfer) replaced by
   ``comm.host_cpu_us_per_mb`` (per MiB of its bytes): a per-µs fit is no per-byte figure,
   so it is not converted.
3. ``host.speed_runs`` (the host speed factors of the capture and its replicates) added;
   beside it ``meta.ranges['host.cpu_scale']`` states the next run's P10–P90, not a uniform
   range. An older model has none and loads as it was (its range drawn uniformly).
4. ``cpu`` host ops' ``capture_threads`` and ``parallel_efficiency`` added (a what-if on
   ``threads`` keeps the parallel part's work). An older model has none and loads as it was
   (such a what-if keeps the parallel part's wall, as before).
5. ``meta.ranges['host.cpu_scale']`` is the stated prior range beside ``host.speed_runs``
   too (the host-speed predictive pools the runs with it), no longer the runs' P10–P90. A
   model of schema 3 or 4 with ``speed_runs`` loads with that range set to the prior every
   calibration stated before replicates replaced it
   (:data:`models.host_speed.HOST_NOISE_PRIOR`); its saved P10–P90 is not read as a prior.
6. ``loader.produce_per_batch_fraction`` added (the share of a batch's produce time that does
   not grow with its samples, measured by a batch-size probe). An older model has none and
   loads as it was (a batch-size what-if scales all of produce, as before).
7. ``cpu`` host ops' ``sample_exponent`` added (the per-sample part grows as samples^p, p
   measured by a batch-size probe whose step grew faster than linearly). An older model has
   none and loads as it was (linear, p = 1).
"""
from __future__ import annotations

from pathlib import Path

from stepsim.models.host_speed import HOST_NOISE_PRIOR
from stepsim.models.param_base import SCHEMA_VERSION
from stepsim.simcore.errors import InputError

__all__ = ["CHANGED", "upgrade"]

CHANGED: dict[str, tuple[int, str]] = {
    "comm.host_cpu_fraction": (2, "replaced by comm.host_cpu_us_per_mb (CPU per MiB of a "
                                  "collective's bytes, not per µs of its transfer)"),
}
"""Dotted field → (the schema that changed it, what became of it)."""


def _holds(data: dict, dotted: str) -> bool:
    node = data
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def upgrade(path: str | Path, data: dict) -> dict:
    """``data`` (a StepModel as parsed from ``path``) as the current schema reads it: an older
    file without changed fields gets the current ``schema_version``; the caller's dict is not
    modified. A version that is not an integer is left to the schema's own error.

    Raises:
        InputError: a file of a newer schema, or one holding a field a later schema changed
            (also without ``schema_version``, as a hand-written file may be).
    """
    given = data.get("schema_version")
    version = given if isinstance(given, int) and not isinstance(given, bool) else None
    if version is not None and version < 1:
        raise InputError(Path(path), f"schema_version {version} is no stepsim schema (they "
                                     f"are 1 to {SCHEMA_VERSION})")
    if version is not None and version > SCHEMA_VERSION:
        raise InputError(Path(path), f"saved by a newer stepsim (schema_version {version}; this "
                                     f"one reads up to {SCHEMA_VERSION}): upgrade stepsim")
    for dotted, (since, what) in CHANGED.items():
        if (version is None or version < since) and _holds(data, dotted):
            old = f"schema_version {version}" if version is not None else "no schema_version"
            raise InputError(Path(path), f"saved by an older stepsim ({old}): {dotted} was {what} "
                                         f"in schema {since}; re-calibrate the model from its "
                                         "trace")
    if version is not None and 3 <= version < 5:
        data = _prior_beside_runs(data)
    if version is not None and version < SCHEMA_VERSION:
        data = {**data, "schema_version": SCHEMA_VERSION}
    return data


def _prior_beside_runs(data: dict) -> dict:
    """A schema 3–4 model's data with ``meta.ranges['host.cpu_scale']`` the stated prior
    where it held the P10–P90 of measured ``host.speed_runs`` (new dicts; ``data`` as given
    when there are none or the fields are not dicts, left to the schema's own errors)."""
    host, meta = data.get("host"), data.get("meta")
    if not (isinstance(host, dict) and host.get("speed_runs") and isinstance(meta, dict)
            and isinstance(meta.get("ranges"), dict) and "host.cpu_scale" in meta["ranges"]):
        return data
    ranges = {**meta["ranges"], "host.cpu_scale": list(HOST_NOISE_PRIOR)}
    return {**data, "meta": {**meta, "ranges": ranges}}
