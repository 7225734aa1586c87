"""Caveats of DDP what-ifs on a multi-rank model, one line each (:func:`scenarios.caveats.
caveats` adds them): what a what-if changes that the user did not name, and what one host
cannot validate.

- ``--fix faster_interconnect`` on a job whose ranks share one host over gloo: the all-reduce
  there is loopback (memory copies and the ranks' CPU on shared cores), not a link a faster
  interconnect would replace, so the what-if prices a link the job does not have and no run
  on that host can validate it (docs/ddp-quickstart.md, "What one host cannot validate").
  fresh14 (2026-12-07) got "speed-up 1.12x" with no caveat.
- an explicit bucket cap (``--set comm.bucket_cap_mb=X`` or ``--fix bucket_cap_mb:mb=X``) on a
  model at DDP's default first bucket: an explicit cap caps the first bucket too
  (``models.ddp.set_bucket_caps``), so the bucket count moves even at X = 25 (the default's
  cap); fresh14 saw 3 buckets become 2 with no line saying why.
"""
from __future__ import annotations

from typing import Sequence

from stepsim.models.ddp import build_buckets
from stepsim.models.rank_threads import ranks_on_host
from stepsim.scenarios.transforms import FixOp, SetOp

__all__ = ["ddp_caveats"]


def _one_host_gloo(model) -> bool:
    host, ranks = ranks_on_host([r.host for r in model.ranks])
    return (model.comm.world_size > 1 and ranks == model.comm.world_size
            and model.comm.comm_stream == "gloo")


def _cap_given(op) -> float | None:
    if isinstance(op, SetOp) and op.path == "comm.bucket_cap_mb" \
            and isinstance(op.value, (int, float)) and not isinstance(op.value, bool):
        return float(op.value)
    if isinstance(op, FixOp) and op.name == "bucket_cap_mb":
        mb = op.args.get("mb")
        try:
            return float(mb) if mb is not None else None
        except (TypeError, ValueError):
            return None
    return None


def ddp_caveats(model, ops: Sequence) -> list[str]:
    """The caveats above that ``ops`` on ``model`` call for (none on a one-rank model)."""
    out: list[str] = []
    if model.comm.world_size < 2:
        return out
    if any(isinstance(op, FixOp) and op.name == "faster_interconnect" for op in ops) \
            and _one_host_gloo(model):
        out.append("faster_interconnect on a one-host gloo job: its all-reduce is loopback "
                   "(memory copies and the ranks' CPU on the shared cores), not a link a faster "
                   "interconnect replaces, so this prices a link the job does not have and no "
                   "run on this host can validate it (measure it across hosts)")
    c = model.comm
    for op in ops:
        cap = _cap_given(op)
        if cap is None or not c.grad_params or abs(c.first_bucket_cap_mb - cap) <= 1e-9 * cap:
            continue
        try:
            before = len(build_buckets(c.grad_params, c.bucket_cap_mb, c.first_bucket_cap_mb))
            after = len(build_buckets(c.grad_params, cap, cap))
        except ValueError:
            continue      # the op's own error is raised where it is applied
        out.append(f"bucket_cap_mb={cap:g} given explicitly caps DDP's first bucket too "
                   f"({c.first_bucket_cap_mb:g} MiB in the model, DDP's default when no cap "
                   f"is passed): {before} bucket(s) -> {after}")
    return out
