"""DDP's buckets inferred from a GPU (NCCL) trace recorded without the capture harness.

The trace does not list the model's parameters, but each bucket's all-reduce carries its size
(``In msg nelems`` × dtype, or the ``nccl:all_reduce`` annotation's ``Input Dims``; see
:mod:`calibration.gpu_kinds`). The backward all-reduces with a size, in the order they ran, are
taken as DDP's buckets in reduction order, and each becomes one pseudo-parameter
(``GradParam`` named ``bucket<k>``, listed in registration order, i.e. reversed) whose
gradient is ready after the backward device task the host launched last before the bucket's
all-reduce (or the task the all-reduce was seen to wait for). The model's ``comm.comm_stream``
becomes the stream those all-reduces run on, so a ``bucket_cap_mb`` what-if rebuilds them
(``models.ddp.apply_ddp``). Everything is marked ``inferred``: buckets can be merged by a
larger cap, never split by a smaller one (a pseudo-parameter is one bucket's gradients).
"""
from __future__ import annotations

from collections import Counter

from stepsim.models.ddp import is_allreduce
from stepsim.models.params import GradParam, StepModel

__all__ = ["infer_buckets"]


def _is_allreduce(t) -> bool:
    return t.phase == "backward" and bool(t.bytes) and is_allreduce(t)


def infer_buckets(model: StepModel) -> StepModel:
    """``model`` with ``comm.grad_params`` inferred from its backward all-reduces (see the
    module docstring); unchanged when it already lists gradients or has no sized all-reduce."""
    if model.comm.grad_params:
        return model
    where = Counter(s for s, ts in model.device.streams.items() for t in ts if _is_allreduce(t))
    if not where:
        return model
    stream = where.most_common(1)[0][0]
    colls = [t for t in model.device.streams[stream] if _is_allreduce(t)]
    tasks = model.task_map()
    last_bwd: str | None = None
    ready: dict[str, str | None] = {}
    for op in model.host.ops:
        t = tasks.get(op.task) if op.kind == "launch" and op.task else None
        if t is None:
            continue
        if t.stream != stream and t.phase == "backward" and t.kind != "collective":
            last_bwd = t.id
        elif t.id in {c.id for c in colls}:
            ready[t.id] = last_bwd
    params = []
    for k, c in enumerate(colls):
        waits = [w for w in c.waits if w in tasks and tasks[w].stream != stream]
        params.append(GradParam(name=f"bucket{k}", bytes=c.bytes,
                                ready_task=waits[-1] if waits else ready.get(c.id)))
    comm = model.comm.model_copy(update={"grad_params": params[::-1], "comm_stream": stream})
    sources = {**model.meta.sources, "comm.grad_params": "inferred",
               "comm.comm_stream": "inferred"}
    warning = (f"DDP buckets inferred from {len(colls)} backward all-reduce(s) and their "
               "message sizes (no capture sidecar): a bucket_cap_mb what-if can merge them, "
               "never split one")
    meta = model.meta.model_copy(update={
        "sources": sources, "warnings": [*model.meta.warnings, warning],
        "notes": {**model.meta.notes, "buckets": "inferred"}})
    return model.model_copy(update={"comm": comm, "meta": meta})
