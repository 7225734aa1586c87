"""DDP's buckets rebuilt in a model whose backward runs on the host (CPU training, gloo).

On the CPU, backward is ``cpu`` work on the host thread and each bucket's all-reduce is
enqueued by a host ``launch`` (``c10d::allreduce_``) when the bucket's last gradient is ready
(``Reducer::mark_bucket_ready``); the host waits for the last one at the end of backward
(a ``sync``). The measured enqueues are anchors: after the first ``k`` buckets, their bytes of
gradient were ready after the backward host time that preceded the k-th enqueue. A new
bucket's gradients are taken to be ready at the backward time interpolated linearly in
cumulative gradient bytes between those anchors (``inferred``: backward time in proportion to
gradient bytes within each measured bucket). The backward host time is then cut at the new
buckets' ready instants, one enqueue (the measured enqueues' mean cost) after each cut, and
the closing ``sync`` waits for the new last bucket. Per-step samples of the backward time are
kept (each new piece takes its share of every step's total). Collectives without bytes (a
barrier) are kept as they are. The optimizer op after the closing sync holds the last bucket's
copy into the gradients: it moves by ``comm.grad_copy_us_per_mb`` times the change in the last
bucket's MiB (DDP demo, 2026-12-06: 0.66-0.78 ms a step for the defaults' 7 MiB, profiled).
"""
from __future__ import annotations

import numpy as np

from stepsim.models.params import DeviceTask, HostOp, StepModel
from stepsim.simcore.errors import ModelError, NotApplicable

__all__ = ["host_launched", "host_enqueued", "apply_ddp_host", "UNSIZED"]


def host_launched(model: StepModel) -> bool:
    """Whether the model's all-reduces are enqueued by host launches and its backward has no
    device task (a CPU training step)."""
    c = model.comm
    coll = {t.id for t in model.device.streams.get(c.comm_stream, [])
            if t.kind == "collective" and t.bytes}
    dev_bwd = any(t.phase == "backward" and t.kind != "collective"
                  for ts in model.device.streams.values() for t in ts)
    return bool(coll) and not dev_bwd and any(
        op.kind == "launch" and op.task in coll for op in model.host.ops)


def host_enqueued(model: StepModel) -> bool:
    """Whether the model's collectives (sized or not) are enqueued by host launches and its
    backward has no device task: a CPU training step, even one whose all-reduces carry no
    bytes (a model calibrated before their sizes were read)."""
    coll = {t.id for ts in model.device.streams.values() for t in ts if t.kind == "collective"}
    dev_bwd = any(t.phase == "backward" and t.kind != "collective"
                  for ts in model.device.streams.values() for t in ts)
    return bool(coll) and not dev_bwd and any(
        op.kind == "launch" and op.task in coll for op in model.host.ops)


UNSIZED = ("the model's host-enqueued all-reduces carry no sizes (bytes), so DDP's buckets "
           "cannot be rebuilt: re-calibrate the capture with this stepsim (it sizes them from "
           "Input Dims, or from the DDP record's parameters when the trace has none)")


def apply_ddp_host(model: StepModel, buckets, cost_us) -> StepModel:
    """``model`` with its host-launched all-reduces replaced by ``buckets``
    (:class:`models.ddp.Bucket`, in reduction order); ``cost_us(nbytes)`` gives a bucket's
    transfer time (µs).

    Raises:
        ModelError: the host ops have no closing sync on the last all-reduce.
    """
    c = model.comm
    stream = model.device.streams[c.comm_stream]
    old = [t for t in stream if t.kind == "collective" and t.bytes]
    old_ids = {t.id for t in old}
    ops = model.host.ops
    launch_at = [j for j, op in enumerate(ops) if op.kind == "launch" and op.task in old_ids]
    close = next((j for j in range(len(ops) - 1, -1, -1)
                  if ops[j].kind == "sync" and ops[j].task in old_ids), None)
    if close is None or close < launch_at[-1]:
        raise ModelError("cannot rebuild DDP buckets: the host does not wait for the last "
                         "all-reduce at the end of backward")
    first = launch_at[0]
    while first > 0 and ops[first - 1].kind == "cpu" and ops[first - 1].phase == "backward":
        first -= 1
    section = ops[first:close]
    cpu = [op for op in section if op.kind == "cpu"]
    # anchors: (cumulative bytes ready, cumulative backward host time) at each enqueue
    size = {t.id: t.bytes for t in old}
    xs, ts, b, t_us = [0.0], [0.0], 0.0, 0.0
    for op in section:
        if op.kind == "cpu":
            t_us += op.dur_us
        elif op.kind == "launch" and op.task in old_ids:
            b += size[op.task]
            xs.append(b)
            ts.append(t_us)
    total_t = t_us
    new_bytes = np.cumsum([bk.bytes for bk in buckets], dtype=float)
    scale = b / new_bytes[-1] if new_bytes[-1] > 0 else 1.0
    ready = np.interp(new_bytes * scale, xs, ts)
    enqueue_us = float(np.mean([ops[j].dur_us for j in launch_at]))
    n_steps = min((len(op.samples_us) for op in cpu if op.samples_us), default=0)
    per_step = (np.sum([op.samples_us[:n_steps] for op in cpu if op.samples_us], axis=0)
                if n_steps and all(op.samples_us for op in cpu) else None)
    taken = set(model.task_map()) - old_ids
    tasks, new_ops, prev = [], [], 0.0
    for bk, r in zip(buckets, list(ready) + [total_t]):
        tid = f"ddp.bucket{bk.index}"
        while tid in taken:
            tid += "_"
        tasks.append(DeviceTask(id=tid, stream=c.comm_stream, name=f"all_reduce bucket "
                                f"{bk.index} ({bk.bytes} B)", kind="collective",
                                category="communication", phase="backward",
                                dur_us=cost_us(bk.bytes), bytes=bk.bytes))
        new_ops.append(_piece(r - prev, total_t, per_step))
        new_ops.append(HostOp(kind="launch", name="c10d::all_reduce enqueue", dur_us=enqueue_us,
                              task=tid, phase="backward"))
        prev = r
    new_ops.append(_piece(total_t - prev, total_t, per_step))
    sync = ops[close].model_copy(update={"task": tasks[-1].id,
                                         "name": "wait for the all-reduces (untraced)"})
    host = [op.model_copy(update={"task": tasks[-1].id}) if op.task in old_ids else op
            for op in ops[:first] + ops[close + 1:]]
    after = _copy_moved(host[first:], c.grad_copy_us_per_mb * (tasks[-1].bytes - size.get(
        ops[close].task, tasks[-1].bytes)) / 2**20)
    host = host[:first] + new_ops + [sync] + after
    at = next(i for i, t in enumerate(stream) if t.id in old_ids)
    kept = [t for t in stream if t.id not in old_ids]
    streams = dict(model.device.streams)
    streams[c.comm_stream] = kept[:at] + tasks + kept[at:]
    data = model.model_dump()
    data["device"]["streams"] = {s: [t.model_dump() for t in v] for s, v in streams.items()}
    data["host"]["ops"] = [op.model_dump() for op in host]
    return StepModel.model_validate(data)


def _copy_moved(after: list[HostOp], delta_us: float) -> list[HostOp]:
    """The host ops after the closing sync, the first (the optimizer op, which holds the last
    bucket's copy into the gradients, ``CommParams.grad_copy_us_per_mb``) moved by
    ``delta_us``, each of its samples alike, none below 0."""
    if not after or after[0].kind != "cpu" or delta_us == 0.0:
        return after
    op = after[0]
    upd = {"dur_us": max(op.dur_us + delta_us, 0.0)}
    if op.samples_us:
        upd["samples_us"] = [max(v + delta_us, 0.0) for v in op.samples_us]
    return [op.model_copy(update=upd)] + after[1:]


def _piece(dur_us: float, total_us: float, per_step) -> HostOp:
    """A ``cpu`` op of backward host work: ``dur_us`` of ``total_us``, with that share of every
    measured step's backward time as its samples."""
    dur_us = max(dur_us, 0.0)
    samples = None
    if per_step is not None and total_us > 0:
        samples = [float(v) * dur_us / total_us for v in per_step]
    return HostOp(kind="cpu", name="backward", dur_us=dur_us, samples_us=samples,
                  phase="backward", category="backward")
