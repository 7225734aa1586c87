"""DistributedDataParallel's gradient buckets and their all-reduces.

Bucketing follows ``torch/csrc/distributed/c10d/reducer.cpp``
(``compute_bucket_assignment_by_size``) as DDP uses it after its first iteration
(``Reducer::rebuild_buckets``): parameters are taken in the order their gradients become
ready, approximated here, as DDP's own comment does, by *reverse registration order*; each
parameter is added whole to the open bucket of its dtype (buckets never mix dtypes or
devices); a bucket closes as soon as its size reaches the current limit, and the limit is
``first_bucket_cap_mb`` for a dtype's first bucket and ``bucket_cap_mb`` after it (MiB, as
``torch/nn/parallel/distributed.py`` converts ``bucket_cap_mb * 1024 * 1024``). Buckets still
open at the end are closed in the order their dtype was first seen.

At run time (``Reducer::mark_bucket_ready``) a bucket's all-reduce is launched when its last
gradient is ready and every earlier bucket has been launched; NCCL runs them one after another
on its stream. A ring all-reduce of ``b`` bytes over ``n`` ranks moves ``2(n−1)/n × b`` bytes
per rank (nccl-tests' bus-bandwidth convention).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from pydantic import ValidationError

from stepsim.models.ddp_host import UNSIZED, apply_ddp_host, host_enqueued, host_launched
from stepsim.models.params import CommParams, DeviceTask, GradParam, HostOp, StepModel
from stepsim.simcore.errors import ModelError, NotApplicable
from stepsim.simcore.units import mib_to_bytes, transfer_us

__all__ = ["Bucket", "build_buckets", "apply_ddp", "collective_us", "comm_time_us",
           "ring_bus_bytes",
           "set_bucket_caps", "is_allreduce"]

MAX_CAP_MB = 2.0 ** 43
"""A bucket cap's bound (MiB): 2**63 bytes, past which a cap in bytes is no integer (torch's
DDP raises OverflowError as it converts one); any real model fits far below it."""


@dataclass(frozen=True)
class Bucket:
    """One DDP bucket.

    Attributes:
        index: position in reduction order (0 = reduced first).
        params: parameter names in the order they were added (gradient-ready order).
        bytes: total gradient bytes.
        dtype: the dtype shared by every gradient in it.
        cap_bytes: the size limit it was built against.
        ready_tasks: device tasks after which its gradients are ready (None: end of backward),
            without repeats, in the order met.
    """

    index: int
    params: tuple[str, ...]
    bytes: int
    dtype: str
    cap_bytes: int
    ready_tasks: tuple[str | None, ...]


def build_buckets(grad_params: list[GradParam], bucket_cap_mb: float = 25.0,
                  first_bucket_cap_mb: float = 1.0) -> list[Bucket]:
    """DDP's buckets for parameters listed in registration order.

    Args:
        grad_params: the model's parameters in registration order (``model.parameters()``).
        bucket_cap_mb: DDP's ``bucket_cap_mb`` (MiB, > 0).
        first_bucket_cap_mb: the first bucket's cap (MiB, > 0; DDP's
            ``_DEFAULT_FIRST_BUCKET_BYTES`` is 1 MiB).

    Returns:
        The buckets in reduction order.

    Raises:
        ModelError: a cap ≤ 0.
    """
    if not (0 < bucket_cap_mb < MAX_CAP_MB and 0 < first_bucket_cap_mb < MAX_CAP_MB):
        raise ModelError(f"bucket caps must be > 0 MiB and below {MAX_CAP_MB:.4g} (2**63 bytes), "
                         f"got bucket_cap_mb={bucket_cap_mb}, "
                         f"first_bucket_cap_mb={first_bucket_cap_mb}")
    limits = (mib_to_bytes(first_bucket_cap_mb), mib_to_bytes(bucket_cap_mb))
    open_: dict[str, list[GradParam]] = {}     # dtype -> params of its open bucket
    n_closed: dict[str, int] = {}               # dtype -> buckets closed so far
    done: list[tuple[list[GradParam], str, int]] = []
    for p in reversed(grad_params):
        cur = open_.setdefault(p.dtype, [])
        cur.append(p)
        cap = limits[min(n_closed.get(p.dtype, 0), 1)]
        if sum(q.bytes for q in cur) >= cap:
            done.append((cur, p.dtype, cap))
            open_[p.dtype] = []
            n_closed[p.dtype] = n_closed.get(p.dtype, 0) + 1
    for dtype, cur in open_.items():
        if cur:
            done.append((cur, dtype, limits[min(n_closed.get(dtype, 0), 1)]))
    return [Bucket(i, tuple(p.name for p in ps), sum(p.bytes for p in ps), dtype, cap,
                   tuple(dict.fromkeys(p.ready_task for p in ps)))
            for i, (ps, dtype, cap) in enumerate(done)]


def ring_bus_bytes(nbytes: float, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of ``nbytes``: ``2(n−1)/n × nbytes``."""
    return 2 * (world_size - 1) / world_size * nbytes if world_size > 1 else 0.0


def collective_us(nbytes: float, world_size: int, bus_gbps: float, latency_us: float) -> float:
    """Ring all-reduce time (µs): ``latency_us + 2(n−1)/n × nbytes / bus_gbps``; one rank pays
    only the latency.

    Raises:
        ValueError: ``bus_gbps`` ≤ 0.
    """
    return latency_us + transfer_us(ring_bus_bytes(nbytes, world_size), bus_gbps)


def _bus_gbps(model: StepModel, old: list[DeviceTask]) -> float:
    """The bus bandwidth (GB/s) to cost new buckets with: ``comm.bus_gbps``, else the rate the
    measured collectives achieved."""
    c = model.comm
    if c.bus_gbps is not None:
        return c.bus_gbps
    moved = sum(ring_bus_bytes(t.bytes, c.world_size) for t in old if t.bytes)
    spent = sum(max(t.dur_us - c.latency_us, 0.0) for t in old if t.bytes)
    if moved <= 0 or spent <= 0:
        raise NotApplicable("cannot cost DDP buckets: set comm.bus_gbps or give the measured "
                            "collectives their bytes (re-calibrate with this stepsim)")
    return moved / spent / 1e3   # bytes per µs -> GB/s


def apply_ddp(model: StepModel) -> StepModel:
    """Rebuild the model's DDP all-reduces from ``comm.grad_params`` and the bucket caps.

    The collectives on ``comm.comm_stream`` are replaced by one per bucket, in bucket order,
    each waiting for the tasks that make its gradients ready (a gradient without
    ``ready_task`` is ready when the last backward task of every other stream is done). Costs
    come from ``comm.bus_gbps`` and ``comm.latency_us`` (or the measured collectives' rate).
    The old collectives are the backward all-reduces (:func:`_old_buckets`; an all-to-all
    stays where it ran) and the buckets take their places on the stream (:func:`_in_place`).
    What waited for an old all-reduce (tasks, host syncs) waits for the bucket that carries its
    gradients (:func:`_carriers`), and a wait that could then never be met is refused
    (:func:`_refuse_deadlock`); host launches of old collectives become CPU ops of the same
    cost (DDP's hook still runs). With
    no reference to the old collectives, the first optimizer task of each other stream waits
    for the last bucket. A model without ``grad_params`` is returned unchanged. In a model
    whose all-reduces are enqueued by the host (CPU training), the host's backward is cut at
    the new buckets' ready instants instead (:mod:`models.ddp_host`).

    Raises:
        ModelError: no backward task to hang end-of-backward gradients on, no way to cost
            the buckets, or buckets that cannot run as the step was captured.
    """
    c: CommParams = model.comm
    if not c.grad_params:
        return model
    streams = model.device.streams
    old = _old_buckets(streams.get(c.comm_stream, []))
    old_ids = {t.id for t in old}
    if not host_launched(model) and host_enqueued(model):
        raise NotApplicable(UNSIZED)
    gbps = _bus_gbps(model, old)
    if host_launched(model):
        if c.line_bytes is None:    # the measured sizes, before the rebuild replaces them
            c = c.model_copy(update={"line_bytes": max((t.bytes or 0 for t in old), default=0)})
            model = model.model_copy(update={"comm": c})
        cc = c.model_copy(update={"bus_gbps": gbps})
        return apply_ddp_host(
            model, build_buckets(c.grad_params, c.bucket_cap_mb, c.first_bucket_cap_mb),
            lambda nbytes: comm_time_us(cc, nbytes))
    end_bwd = []
    for s, ts in streams.items():
        bwd = [t.id for t in ts if s != c.comm_stream and t.phase == "backward"]
        if bwd:
            end_bwd.append(bwd[-1])
    buckets = build_buckets(c.grad_params, c.bucket_cap_mb, c.first_bucket_cap_mb)
    taken = set(model.task_map()) - old_ids
    new: list[DeviceTask] = []
    for b in buckets:
        tid = f"ddp.bucket{b.index}"
        while tid in taken:
            tid += "_"
        waits = []
        for r in b.ready_tasks:
            if r is None:
                if not end_bwd:
                    raise ModelError("a gradient has no ready_task and the model has no "
                                     "backward task to finish it")
                waits.extend(end_bwd)
            else:
                waits.append(r)
        new.append(DeviceTask(
            id=tid, stream=c.comm_stream, name=f"all_reduce bucket {b.index} ({b.bytes} B)",
            kind="collective", category="communication", phase="backward",
            dur_us=collective_us(b.bytes, c.world_size, gbps, c.latency_us),
            waits=list(dict.fromkeys(waits)), bytes=b.bytes))
    carrier = _carriers(old, new)
    referenced = False

    def remap(ids: list[str]) -> list[str]:
        nonlocal referenced
        if not old_ids.intersection(ids):
            return ids
        referenced = True
        return list(dict.fromkeys(carrier[i] if i in old_ids else i for i in ids))

    new_streams: dict[str, list[DeviceTask]] = {}
    for s, ts in streams.items():
        new_streams[s] = [t if t.id in old_ids else t.model_copy(update={
            "waits": remap(t.waits), "prev_waits": remap(t.prev_waits)}) for t in ts]
    new_streams[c.comm_stream] = _in_place(new_streams.get(c.comm_stream, []), old_ids,
                                           carrier, new)
    _refuse_deadlock(new_streams, old_ids, carrier, streams, c)
    ops: list[HostOp] = []
    for op in model.host.ops:
        if op.task in old_ids and op.kind == "launch":
            ops.append(op.model_copy(update={"kind": "cpu", "task": None,
                                             "name": op.name or "DDP all-reduce launch"}))
        elif op.task in old_ids:
            referenced = True
            ops.append(op.model_copy(update={"task": carrier[op.task]}))
        else:
            ops.append(op)
    if not referenced:
        last = new[-1].id
        for s, ts in new_streams.items():
            opt = next((k for k, t in enumerate(ts) if t.phase == "optimizer"), None)
            if s != c.comm_stream and opt is not None:
                ts[opt] = ts[opt].model_copy(update={"waits": list(dict.fromkeys(ts[opt].waits + [last]))})
    data = model.model_dump()
    data["device"]["streams"] = {s: [t.model_dump() for t in ts] for s, ts in new_streams.items()}
    data["host"]["ops"] = [op.model_dump() for op in ops]
    try:
        return StepModel.model_validate(data)
    except ValidationError as e:   # a cycle _refuse_deadlock does not see (through other streams)
        raise ModelError(f"the rebuilt DDP buckets cannot run as captured: "
                         f"{e.errors()[0]['msg'].removeprefix('Value error, ')}") from None


def comm_time_us(c: CommParams, nbytes: float) -> float:
    """An all-reduce's time (µs) of ``nbytes`` under the transfer line of ``c``
    (:func:`collective_us` with ``c.bus_gbps``, which must be set, and ``c.latency_us``).

    A host-reduced collective (``c.host_cpu_us_per_mb`` > 0: gloo on CPU tensors) larger than
    the line's largest measured size (``c.line_bytes``) costs the line there plus the extra
    MiB's CPU work, ``host_cpu_us_per_mb`` each: on one host the collective is the ranks'
    backend threads copying and reducing, each rank's beside its peer's, so more bytes lengthen
    it by their CPU work on one rank while the hand-offs between the ranks that the rest of
    the span holds stay as measured; the line's slope, fitted to one size through the
    per-collective CPU, holds those hand-offs in proportion to the bytes and extrapolates them
    (measured on the DDP demo's 2 ranks on 2 cores: 8 MiB took 0.34-0.45 ms longer than 7 MiB
    alone after a barrier and 0.12 ms longer (median of 40 demos) at the end of backward, where
    the line made it 0.75-0.86 ms longer; the CPU work 0.43-0.60 ms per MiB). Below that size,
    and for NCCL, the line."""
    line = collective_us(nbytes, c.world_size, c.bus_gbps, c.latency_us)
    top = c.line_bytes
    if not top or nbytes <= top or c.host_cpu_us_per_mb <= 0:
        return line
    return (collective_us(top, c.world_size, c.bus_gbps, c.latency_us)
            + c.host_cpu_us_per_mb * (nbytes - top) / 2 ** 20)


def is_allreduce(task: DeviceTask) -> bool:
    """A collective whose kernel or annotation names an all-reduce (NCCL's
    ``ncclKernel_AllReduce_*``, ``nccl:all_reduce``): what DDP's buckets launch."""
    n = (task.name or task.id).lower()
    return task.kind == "collective" and ("allreduce" in n or "all_reduce" in n)


def _old_buckets(comm: list[DeviceTask]) -> list[DeviceTask]:
    """The captured DDP all-reduces on the comm stream: the collectives after forward (a
    forward collective is a buffer broadcast), all-reduces only where any is named so (an
    all-to-all or send/recv of embeddings in backward is not DDP's, and stays)."""
    after = [t for t in comm if t.kind == "collective" and t.phase != "forward"]
    named = [t for t in after if is_allreduce(t)]
    return named or after


def _carriers(old: list[DeviceTask], new: list[DeviceTask]) -> dict[str, str]:
    """Each captured all-reduce → the rebuilt bucket by which its gradients are reduced.
    Buckets are reduced in one order (reverse registration order) whatever the caps, so the
    gradients of the k-th captured all-reduce and those before it are the first part of that
    order: they are reduced by the first rebuilt bucket whose running share of the bytes
    reaches theirs. The last captured all-reduce (and one of unknown size) maps to the last
    bucket: what waited for it waits for every gradient."""
    total_old = sum(t.bytes or 0 for t in old)
    totals = list(itertools.accumulate(t.bytes or 0 for t in new))
    out, done, k = {}, 0, 0
    for t in old:
        done += t.bytes or 0
        while k < len(new) - 1 and (not t.bytes or totals[k] * total_old < done * totals[-1]):
            k += 1
        out[t.id] = new[k].id
    if old:
        out[old[-1].id] = new[-1].id
    return out


def _in_place(comm: list[DeviceTask], old_ids: set[str], carrier: dict[str, str],
              new: list[DeviceTask]) -> list[DeviceTask]:
    """The comm stream with the rebuilt buckets where the captured all-reduces ran (each
    bucket at the first one it carries, with any before it not yet placed), so the
    collectives that stay (all-to-all, send/recv) keep their order among them."""
    order = {t.id: i for i, t in enumerate(new)}
    out, placed = [], 0
    for t in comm:
        if t.id not in old_ids:
            out.append(t)
            continue
        upto = order[carrier[t.id]] + 1
        out += new[placed:upto]
        placed = max(placed, upto)
    return out + new[placed:]


def _refuse_deadlock(streams: dict[str, list[DeviceTask]], old_ids: set[str],
                     carrier: dict[str, str], before: dict[str, list[DeviceTask]],
                     c: CommParams) -> None:
    """A task the trace shows waiting for a captured all-reduce, whose rebuilt bucket also
    waits for gradients its own stream makes only after it, would never run: say so.

    Raises:
        ModelError: naming the task, the all-reduce, the bucket and the gradient.
    """
    waits_on = {t.id: [w for w in t.waits if w in old_ids] for ts in before.values() for t in ts}
    buckets = {t.id: t for t in streams[c.comm_stream] if t.id in set(carrier.values())}
    for s, ts in streams.items():
        pos = {t.id: i for i, t in enumerate(ts)}
        for i, t in enumerate(ts):
            for w in waits_on.get(t.id, ()):
                late = [r for r in buckets[carrier[w]].waits if pos.get(r, -1) >= i]
                if late:
                    raise ModelError(
                        f"bucket_cap_mb={c.bucket_cap_mb:g}, first_bucket_cap_mb="
                        f"{c.first_bucket_cap_mb:g} cannot apply to this model as captured: "
                        f"{t.id} ({t.phase}, stream {s}) waits in the trace for the all-reduce "
                        f"{w}, whose gradients these caps put in one bucket ({carrier[w]}) with "
                        f"gradients ready only after {t.id} (at {late[0]}), so the wait could "
                        "never be met (the trace's wait is a stream event after that "
                        "all-reduce, not one DDP makes; smaller caps keep the buckets apart)")


def set_bucket_caps(model: StepModel, bucket_cap_mb: float | None = None,
                    first_bucket_cap_mb: float | None = None) -> StepModel:
    """The model with DDP's bucket caps set (MiB) and its buckets rebuilt (:func:`apply_ddp`).

    ``bucket_cap_mb`` alone means ``DistributedDataParallel(bucket_cap_mb=X)``: as torch's
    ``_BucketCapacityConfig.create`` does (``torch/nn/parallel/distributed.py``), an explicit
    cap also caps the first bucket (the 1 MiB first bucket is DDP's default only when
    ``bucket_cap_mb`` is not given), unless ``first_bucket_cap_mb`` is given too.

    Raises:
        ModelError: the model lists no DDP gradients (``comm.grad_params``): there is nothing
            to rebuild, and the what-if would silently change nothing.
    """
    if not model.comm.grad_params:
        raise NotApplicable("the model lists no DDP gradients (comm.grad_params), so bucket caps "
                         "cannot be applied: record the DDP model with the capture harness "
                         "(Capture.ddp(model) on every rank) or calibrate traces whose collectives "
                         "carry their sizes (In msg nelems / Input Dims)")
    upd = {}
    if bucket_cap_mb is not None:
        upd["bucket_cap_mb"] = upd["first_bucket_cap_mb"] = bucket_cap_mb
    if first_bucket_cap_mb is not None:
        upd["first_bucket_cap_mb"] = first_bucket_cap_mb
    for k, v in upd.items():
        if not 0 < v < MAX_CAP_MB:   # torch's int(bucket_cap_mb * 2**20) overflows past it too
            raise ModelError(f"comm.{k} must be > 0 MiB and below {MAX_CAP_MB:.4g} MiB (2**63 "
                             f"bytes), got {v}")
    try:
        return apply_ddp(model.model_copy(update={"comm": model.comm.model_copy(update=upd)}))
    except ValidationError as e:   # a bucket's cost past what a duration holds (1e12 µs)
        err = e.errors()[0]
        raise ModelError(f"bucket caps {', '.join(f'{k}={v:g}' for k, v in upd.items())} give "
                         f"a bucket whose {'.'.join(map(str, err['loc']))} "
                         f"{err['input']!r} is not allowed ({err['msg']}): the model's "
                         "comm.grad_params sizes or its all-reduce cost (comm.bus_gbps, "
                         "comm.host_cpu_us_per_mb) cannot be right") from None
