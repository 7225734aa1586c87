"""Checks that the capture sidecars of one DDP job's ranks agree where they must.

One model is calibrated from every rank's trace and sidecar, and some settings are read once
for the whole job: DDP's own (``world_size``, ``backend``, the bucket caps and options, the
parameter list) must be the same on every rank, since DDP builds its buckets and collectives
from them on each rank alike (ranks whose buckets differ would reduce different sizes: the
job hangs or fails, so files that disagree are not one job), and the DataLoader settings and
torch's intra-op threads are taken from one rank's sidecar for every rank (``LoaderParams``:
each rank has its own loader of these settings), so ranks that differ there cannot be modelled
by one. Either refuses the files in one line naming both and the field
(:class:`simcore.errors.InputError`). Fields that may differ between the ranks of one real job
(host name, cores, CPU count, the steps' times, thread CPU) are not compared; the torch version
may legitimately differ but is unusual, so it is a warning.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.simcore.errors import InputError

__all__ = ["check_ranks_agree", "MUST_AGREE", "SHOULD_AGREE"]

MUST_AGREE = (
    "ddp.world_size", "ddp.backend", "ddp.bucket_cap_mb", "ddp.first_bucket_bytes",
    "ddp.bucket_cap_mb_list", "ddp.gradient_as_bucket_view", "ddp.find_unused_parameters",
    "ddp.static_graph", "ddp.broadcast_buffers", "ddp.hosts", "ddp.params",
    "loader.num_workers", "loader.batch_size", "loader.prefetch_factor", "loader.pin_memory",
    "loader.persistent_workers", "loader.in_order", "loader.drop_last", "torch_num_threads",
)
"""Dotted sidecar fields every rank of one DDP job must record alike (a value absent from
one file, None or an empty list, is not compared)."""

SHOULD_AGREE = ("torch_version",)
"""Fields that may differ between the ranks of a real job, but rarely do: a warning."""

_WHY = {"ddp": "DDP builds each rank's buckets and collectives from it, so ranks that differ "
               "are not one job",
        "loader": "the model holds one DataLoader setting for every rank",
        "torch_num_threads": "the model holds one intra-op thread count for every rank"}


def field_of(side, dotted: str):
    obj = side
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if dotted == "ddp.params":      # what DDP checks across ranks: names, shapes, dtypes
        return [(p.name, tuple(p.shape), p.numel, p.dtype, p.requires_grad, p.ddp_ignored)
                for p in obj] or None
    return obj if obj != [] else None


def agree_text(field: str, v) -> str:
    if field == "ddp.params":
        return f"{len(v)} parameters"
    return repr(v)


def check_ranks_agree(sides: dict[int, tuple[Path, object]]) -> list[str]:
    """Compare every rank's sidecar (``sides``: rank -> (file, :class:`calibration.sidecar.
    Sidecar`)) with the lowest rank's; returns the warnings (:data:`SHOULD_AGREE`).

    Raises:
        InputError: a :data:`MUST_AGREE` field that two ranks record differently, naming the
            later rank's file, the field and the other file.
    """
    if len(sides) < 2:
        return []
    order = sorted(sides)
    f0, s0 = sides[order[0]]
    warnings = []
    for r in order[1:]:
        f, s = sides[r]
        for field in MUST_AGREE + SHOULD_AGREE:
            a, b = field_of(s0, field), field_of(s, field)
            if a is None or b is None or a == b:
                continue
            if field == "ddp.params":
                k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                detail = (f"parameter {k} is {b[k][0]} {list(b[k][1])} {b[k][3]} here, "
                          f"{a[k][0]} {list(a[k][1])} {a[k][3]} in {Path(f0).name}"
                          if k < min(len(a), len(b)) else
                          f"{agree_text(field, b)} here, {agree_text(field, a)} in {Path(f0).name}")
            else:
                detail = f"{agree_text(field, b)} here, {agree_text(field, a)} in {Path(f0).name}"
            if field in SHOULD_AGREE:
                warnings.append(f"{Path(f).name}: {field} is {detail} (ranks of one job "
                                "usually run one torch)")
                continue
            why = _WHY[field.split(".")[0]]
            raise InputError(f, f"{field} is {detail}: the ranks of one DDP job must agree "
                                f"({why})")
    return warnings
