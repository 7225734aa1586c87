"""What a DDP rank's backend threads cost, measured in the training process itself, for the
capture sidecar's ``ddp.threads`` and ``ddp.bucket_cpu`` (:mod:`calibration.sidecar_ddp`):
each thread's CPU, run-queue wait and timeslices from the kernel's
``/proc/self/task/<tid>/schedstat`` (:func:`thread_stats`), over the profiled steps
(:class:`BackendMeter`) and between DDP buckets' readiness (:class:`BucketMeter`).

Used by the harness's window (:mod:`calibration.window`: ``Capture.ddp``, the Lightning and
Hugging Face callbacks) and by the DDP demo's job (:mod:`demo.ddp_job`), so a user's capture
records what the demo's does. Reading the counters costs no training step: one ``schedstat``
read per non-training thread at each bucket's readiness (the MLP of the demo: 2 buckets, 4
threads a rank), only in the profiled steps. Every thread of the process other than the
training thread is counted as the backend's: gloo's worker and TCP loop threads, and with
more than one intra-op thread torch's OpenMP team too (run the ranks at
``torch.set_num_threads(cores // ranks)``; :mod:`models.rank_threads` warns otherwise)."""
from __future__ import annotations

import os
import threading

__all__ = ["thread_stats", "thread_deltas", "BucketMeter", "BackendMeter"]


def thread_stats() -> dict[int, tuple[str, int, int, int]]:
    """Per thread of this process: (name, CPU ns, runqueue wait ns, timeslices), from the
    kernel's ``/proc/self/task/<tid>/schedstat`` (its three fields; empty where the kernel has
    no schedstat). A timeslice is one run on a CPU: each wake-up of a thread that blocks
    (gloo's threads, between messages) starts one."""
    out = {}
    for tid in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ():
        stat = _schedstat(tid)
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if stat is not None:
            out[int(tid)] = (name, *stat)
    return out


def _schedstat(tid) -> tuple[int, int, int] | None:
    """Thread ``tid``'s (CPU ns, run-queue wait ns, timeslices) from the kernel's
    ``/proc/self/task/<tid>/schedstat``; None where it cannot be read (a thread that ended, a
    kernel without schedstat)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            cpu_ns, wait_ns, slices = (int(x) for x in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    return cpu_ns, wait_ns, slices


def thread_deltas(before: dict, after: dict, main_tid: int) -> list[dict]:
    """What each thread used between two :func:`thread_stats` (µs, timeslices); ``main``
    marks the training thread."""
    rows = []
    for tid, (name, cpu, wait, slices) in after.items():
        _, c0, w0, s0 = before.get(tid, (name, 0, 0, 0))
        rows.append({"tid": tid, "name": name, "main": tid == main_tid,
                     "cpu_us": (cpu - c0) / 1e3, "runqueue_us": (wait - w0) / 1e3,
                     "timeslices": slices - s0})
    return rows


class BucketMeter:
    """The backend threads' CPU time, run-queue wait (µs) and timeslices between DDP buckets'
    readiness, per bucket.

    A tensor hook on the last parameter of each bucket to get its gradient (the last index
    of DDP's ``rebuilt_per_bucket_param_indices`` group) runs on the training thread just
    before that gradient is accumulated, so just before DDP enqueues the bucket's all-reduce;
    it reads the CPU time of every other thread of the process (the kernel's schedstat). The
    CPU from one bucket's mark to the next (the last: to the step's end) is taken as that
    bucket's all-reduce's: gloo's TCP loop thread serves every collective, so its total over a
    step cannot say which bucket cost what, and these marks do. Active only while ``on``.
    DDP reports its rebuilt buckets after its first step: a meter made before has no marks."""

    def __init__(self, ddp, main_tid: int):
        # a plain module (no DDP: no buckets) has no marks
        data = ddp._get_ddp_logging_data() if hasattr(ddp, "_get_ddp_logging_data") else {}
        groups = [[int(i) for i in g.split()] for g in
                  str(data.get("rebuilt_per_bucket_param_indices") or "").split(",") if g.strip()]
        self.sizes = [int(v) for v in str(data.get("rebuilt_bucket_sizes") or "").split(",")
                      if v.strip()]
        self.tids = [t for t in thread_stats() if t != main_tid]
        self.cpu = [[0.0, 0.0, 0.0] for _ in groups]   # CPU µs, run-queue µs, timeslices
        self.steps, self.on, self.marks = 0, False, []
        params = [p for p in getattr(ddp, "module", ddp).parameters() if p.requires_grad]
        self.handles = [] if len(groups) != len(self.sizes) else [
            params[g[-1]].register_hook(lambda grad, k=k: self._mark(k))
            for k, g in enumerate(groups) if g]

    def _read(self) -> list[float]:
        """The other threads' summed (CPU µs, run-queue wait µs, timeslices) so far."""
        total = [0, 0, 0]
        for tid in self.tids:
            for j, v in enumerate(_schedstat(tid) or ()):
                total[j] += v
        return [total[0] / 1e3, total[1] / 1e3, float(total[2])]

    def _mark(self, k: int) -> None:
        if self.on:
            self.marks.append((k, self._read()))

    def end_step(self) -> None:
        """Close a step: each bucket's CPU up to the next mark (the last: up to now)."""
        if self.on and [k for k, _ in self.marks] == list(range(len(self.cpu))) and self.cpu:
            ts = [v for _, v in self.marks] + [self._read()]
            for k in range(len(self.cpu)):
                for j in range(3):
                    self.cpu[k][j] += ts[k + 1][j] - ts[k][j]
            self.steps += 1
        self.marks = []

    def rows(self) -> list[dict]:
        """The sidecar's ``ddp.bucket_cpu`` (:class:`calibration.sidecar_ddp.BucketCPU`)."""
        for h in self.handles:
            h.remove()
        if not self.steps or not self.handles:
            return []
        return [{"bytes": b, "cpu_us": max(c, 0.0), "runqueue_us": max(w, 0.0),
                 "timeslices": max(int(round(n)), 0), "steps": self.steps}
                for b, (c, w, n) in zip(self.sizes, self.cpu)]


def other_threads(before: dict, after: dict, main_tid: int) -> list[dict]:
    """The sidecar's ``ddp.threads`` (:class:`calibration.sidecar_ddp.ThreadCPU`): every
    thread but the training one, between two :func:`thread_stats`."""
    return [{k: t[k] for k in ("tid", "name", "cpu_us", "runqueue_us", "timeslices")}
            for t in thread_deltas(before, after, main_tid) if not t["main"]]


class BackendMeter:
    """A DDP rank's backend CPU over a capture's profiled steps, for its sidecar: call
    :meth:`start` on the training thread as the first profiled step starts, :meth:`end_step`
    after each profiled step, :meth:`finish` after the last; :meth:`finish` writes
    ``threads`` and ``bucket_cpu`` into the ``ddp`` record given."""

    def __init__(self, model):
        self.model = model
        self.meter: BucketMeter | None = None
        self._before: dict | None = None
        self._tid = threading.get_native_id()

    def start(self) -> None:
        self._tid = threading.get_native_id()
        self.meter = BucketMeter(self.model, self._tid)
        self.meter.on = True
        self._before = thread_stats()

    def end_step(self) -> None:
        if self.meter is not None:
            self.meter.end_step()

    def finish(self, ddp: dict) -> None:
        """Write ``ddp["threads"]`` and ``ddp["bucket_cpu"]`` (only when started)."""
        if self.meter is None:
            return
        ddp["threads"] = other_threads(self._before, thread_stats(), self._tid)
        self.meter.on = False
        ddp["bucket_cpu"] = self.meter.rows()
        self.meter = None
