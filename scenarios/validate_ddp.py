"""What a re-measured DDP run did that the predicted multi-rank model does not (after its
operations): torch's intra-op threads a rank, the buckets DDP built, a barrier each step.
:func:`scenarios.validate.same_job` refuses such a run, naming what would match.

A new user's 2-rank gloo job (fresh14, 2026-12-07) was scored against the wrong setting three
ways, none refused:

- a model from a capture at 2 intra-op threads a rank against a run at 1: +479.7 %, scored as
  a baseline check (a multi-rank model's host ops all run one thread, so the plain path's
  check of the ops' threads read 1 = 1; the capture's own count is ``meta.notes
  ['intra_op_threads']``, which ``--fix intra_op_threads`` sets to 1);
- ``DDP(bucket_cap_mb=25)`` (2 buckets: an explicit cap caps the first bucket too) against
  the default model (25 MiB, first bucket 1 MiB: 3 buckets), and the reverse: the cap alone
  read 25 = 25 (the sidecar's ``first_bucket_bytes`` tells them apart);
- a run with ``dist.barrier()`` each step against a straggler-only prediction, and the reverse
  (the trace holds ``gloo:barrier`` spans where the run entered one).
"""
from __future__ import annotations

__all__ = ["threads_mismatch"]


def threads_mismatch(model, run) -> str | None:
    """The run's intra-op threads a rank (its sidecar's ``torch_num_threads``) against those
    of the capture a multi-rank ``model`` was calibrated on (``meta.notes
    ['intra_op_threads']``; 1 after ``--fix intra_op_threads``); None where they match or
    either is unstated."""
    mine = model.meta.notes.get("intra_op_threads")
    theirs = run.torch_threads
    if not isinstance(mine, int) or isinstance(mine, bool) or theirs is None or theirs == mine:
        return None
    if theirs == 1:
        fix = "--fix intra_op_threads would match"
    else:
        fix = (f"no what-if prices {theirs} threads a rank from this model: calibrate a "
               f"capture at {theirs}")
    return (f"torch's intra-op threads are {theirs} a rank in the capture, {mine} in the "
            f"prediction ({fix})")
