"""The DDP demo job's per-bucket meter of the backend threads' CPU (:class:`BucketMeter`),
written into the capture sidecar's ``ddp.bucket_cpu`` by :mod:`demo.ddp_job`."""
from __future__ import annotations

from stepsim.demo.ddp_stats import thread_stats


class BucketMeter:
    """The backend threads' CPU time, run-queue wait (µs) and timeslices between DDP buckets'
    readiness, per bucket.

    A tensor hook on the last parameter of each bucket to get its gradient (the last index
    of DDP's ``rebuilt_per_bucket_param_indices`` group) runs on the training thread just
    before that gradient is accumulated, so just before DDP enqueues the bucket's all-reduce;
    it reads the CPU time of every other thread of the process (the kernel's schedstat). The
    CPU from one bucket's mark to the next (the last: to the step's end) is taken as that
    bucket's all-reduce's: gloo's TCP loop thread serves every collective, so its total over a
    step cannot say which bucket cost what, and these marks do. Active only while ``on``."""

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
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    vals = [int(x) for x in f.read().split()[:3]]
            except (OSError, ValueError):
                continue
            for j, v in enumerate(vals):
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
        """The sidecar's ``ddp.bucket_cpu`` (:class:`calibration.sidecar.BucketCPU`)."""
        for h in self.handles:
            h.remove()
        if not self.steps or not self.handles:
            return []
        return [{"bytes": b, "cpu_us": max(c, 0.0), "runqueue_us": max(w, 0.0),
                 "timeslices": max(int(round(n)), 0), "steps": self.steps}
                for b, (c, w, n) in zip(self.sizes, self.cpu)]
