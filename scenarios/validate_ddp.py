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

import numpy as np

from stepsim.models.ddp import build_buckets

__all__ = ["threads_mismatch", "bucket_mismatch", "barrier_mismatch", "model_barrier",
           "barrier_split"]


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


def bucket_mismatch(model, run) -> str | None:
    """DDP's bucket caps in the run (its sidecar's ``bucket_cap_mb`` and
    ``first_bucket_bytes``) against the model's (``comm.bucket_cap_mb``,
    ``comm.first_bucket_cap_mb``): the cap first; then the first bucket's cap where the two
    build other buckets of the model's gradients (``models.ddp.build_buckets``); None where
    they match or the run does not state them."""
    c = model.comm
    cap, first = run.bucket_cap_mb, run.first_bucket_mb
    if cap is None:
        return None
    if abs(cap - c.bucket_cap_mb) > 1e-9 * c.bucket_cap_mb:
        return (f"comm.bucket_cap_mb is {cap:g} in the capture, {c.bucket_cap_mb:g} in the "
                f"prediction (--set comm.bucket_cap_mb={cap:g} would match)")
    if first is None or abs(first - c.first_bucket_cap_mb) <= 1e-9 * c.first_bucket_cap_mb:
        return None
    n = m = None
    if c.grad_params:
        got = [b.params for b in build_buckets(c.grad_params, cap, first)]
        mine = [b.params for b in build_buckets(c.grad_params, c.bucket_cap_mb,
                                                c.first_bucket_cap_mb)]
        if got == mine:
            return None     # the same buckets either way: DDP did what the model does
        n, m = len(got), len(mine)
    if abs(first - cap) <= 1e-9 * cap:
        match = f"--set comm.bucket_cap_mb={cap:g}"
    else:
        match = (f"the run passed no bucket_cap_mb or its own first bucket: "
                 f"--set comm.first_bucket_cap_mb={first:g}")
    built = "" if n is None else f" ({n} bucket(s) against {m})"
    return (f"DDP's first bucket is capped at {first:g} MiB in the capture (its "
            f"first_bucket_bytes: an explicit bucket_cap_mb caps the first bucket too, DDP's "
            f"default is 1 MiB), {c.first_bucket_cap_mb:g} MiB in the prediction{built} "
            f"({match} would match)")


def model_barrier(model) -> bool:
    """Whether the model's step enters a barrier: a collective named one (``--fix barrier``'s,
    or a calibrated ``dist.barrier()``)."""
    return any(t.kind == "collective" and "barrier" in (t.name or t.id).lower()
               for t in model.task_map().values())


def barrier_mismatch(model, run) -> str | None:
    """A barrier the run entered (its trace's ``gloo:barrier`` spans) that the model does not,
    or the reverse; None where both or neither do (the barrier's phase is not compared: the
    trace does not say it in the model's words)."""
    if model.comm.world_size < 2:
        return None
    theirs, mine = bool(run.barriers_us), model_barrier(model)
    if theirs == mine:
        return None
    if theirs:
        n = sum(len(v) for v in run.barriers_us.values())
        return (f"the capture entered a barrier ({n} gloo:barrier span(s) over its ranks), "
                "the prediction none (--fix barrier would match, the barrier before backward)")
    return ("the prediction enters a barrier each step, the capture none (no gloo:barrier "
            "in its trace: re-measure with dist.barrier() in the training loop, before "
            "loss.backward() for --fix barrier's default phase)")


def barrier_split(run) -> str | None:
    """The measured barrier split of a re-measured run: per rank, its median time in
    ``gloo:barrier`` (the skew it waited for the last rank plus the barrier's own transfer,
    µs in the trace, said in ms) over the profiled steps; None without a barrier."""
    if not run.barriers_us:
        return None
    parts = [f"{k} {np.median(v) / 1e3:.2f} ms (P10–P90 {np.percentile(v, 10) / 1e3:.2f}–"
             f"{np.percentile(v, 90) / 1e3:.2f}, {len(v)} spans)"
             for k, v in sorted(run.barriers_us.items())]
    return (f"{run.path}: measured time in the barrier (gloo:barrier, the profiled steps; "
            "median a rank): " + ", ".join(parts))
