"""Amdahl ceilings, simulated: for each component of the step, the step time if it cost nothing,
and the speed-up that bounds any change to it.

A component is made free by a transform and the model is simulated again (same seed), so
overlap is accounted for: a copy hidden under compute has a ceiling near 1 however long it
is, where subtracting its share would promise more. The components, and how each is freed:

================  ===============================================================
key               made free by
================  ===============================================================
input             every loader cost scaled by 0 (produce, pin, unpickle)
cpu_cores         ``loader.host_cores`` raised to one core per runnable thread (the
                  training step's intra-op threads among them)
h2d / d2h / d2d   copies in that direction scaled by 0
launch            host launch calls scaled by 0
host_compute      host CPU ops scaled by 0
sync              host sync calls' own CPU cost scaled by 0 (the wait itself is charged
                  to what it waits for, as the critical path charges it)
compute:<cat>     kernels (and memsets) of that category scaled by 0 (the categories of
                  :data:`models.params.CATEGORIES`; other breakdown keys, such as idle
                  time a calibration folded into a task, are not components)
comm              collectives scaled by 0 (and ``comm.latency_us`` := 0)
arrival_skew      every rank's skew removed
================  ===============================================================

Only components the model has (with a non-zero cost) are listed. Beside each, ``share`` is its
part of the critical path (:mod:`models.metrics`) and ``subtracted`` the ceiling that share
alone would give, ``1 / (1 − share)``, for comparison. The *kernel* line reads kernel-sum ÷
step-wall and the ceiling it implies for any kernel work, next to the simulated step with every
kernel free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from stepsim.models.metrics import amdahl_ceiling, label
from stepsim.models.params import CATEGORIES, StepModel
from stepsim.scenarios.parallel import Progress, run_many
from stepsim.scenarios.predict import Prediction, predict
from stepsim.scenarios.select import Selector, copy_direction
from stepsim.scenarios.stepcount import simulate_counted
from stepsim.scenarios.transforms import Operation, RemoveOp, ScaleOp, SetOp, apply_ops

_KERNELS = ("kernel", "memset")
_COMPUTE = set(CATEGORIES) - {"communication"}


@dataclass(frozen=True)
class CeilingRow:
    """One component (times in µs).

    Attributes:
        key / label: the component (a bottleneck key) and its words.
        free_step_us: simulated mean step with the component free.
        ceiling: baseline mean step ÷ ``free_step_us``.
        share: its fraction of the baseline's critical path (0 when it has none).
        subtracted: ``1 / (1 − share)``, the ceiling a subtraction would claim.
        ops: the transform that made it free, in words.
    """

    key: str
    label: str
    free_step_us: float
    ceiling: float
    share: float
    subtracted: float
    ops: str


@dataclass(frozen=True)
class CeilingReport:
    """Ceilings of one model (after ``base`` operations), ranked by ceiling, highest first.

    Attributes:
        baseline: the prediction they are relative to.
        rows: one per component.
        kernel_sum_us / kernel_ratio: per step, the sum of compute-kernel time, and that ÷ the
            step.
        kernel_subtracted: ``1 / (1 − kernel_ratio)`` (inf when kernels cover the step).
        kernel_free_step_us / kernel_ceiling: simulated step, and ceiling, with every kernel
            free (None when the model has no kernels).
    """

    baseline: Prediction
    rows: tuple[CeilingRow, ...]
    kernel_sum_us: float
    kernel_ratio: float
    kernel_subtracted: float
    kernel_free_step_us: float | None
    kernel_ceiling: float | None

    @property
    def top(self) -> CeilingRow | None:
        return self.rows[0] if self.rows else None


def components(model: StepModel) -> dict[str, list[Operation]]:
    """Bottleneck key → the operations that make that component free, for every component
    ``model`` has with a non-zero cost (see the module docstring)."""
    out: dict[str, list[Operation]] = {}
    ld = model.loader
    pin_cost = ld.pin_memory and ld.batch_bytes > 0
    if ld.produce.mean_us > 0 or ld.unpickle_us > 0 or pin_cost or ld.produce_by_worker:
        out["input"] = [ScaleOp(select=Selector(lane=("loader",)), factor=0)]
    threads = (ld.num_workers * ld.threads_per_worker + (ld.pin_memory and ld.num_workers > 0)
               + (model.team_threads() if model.host.uses_core else 0))
    if threads > ld.host_cores:
        out["cpu_cores"] = [SetOp(path="loader.host_cores", value=threads)]
    tasks = model.task_map().values()
    for d in ("h2d", "d2h", "d2d"):
        if any(copy_direction(t) == d and t.dur_us > 0 for t in tasks):
            out[d] = [ScaleOp(select=Selector(direction=(d,)), factor=0)]
    ops = model.host.ops
    if any(op.kind == "launch" and op.dur_us > 0 for op in ops):
        out["launch"] = [ScaleOp(select=Selector(lane=("host",), kind=("launch",)), factor=0)]
    if any(op.kind == "cpu" and (op.dur_us > 0 or op.samples_us) for op in ops):
        out["host_compute"] = [ScaleOp(select=Selector(lane=("host",), kind=("cpu",)), factor=0)]
    if any(op.kind == "sync" and op.dur_us > 0 for op in ops):
        out["sync"] = [ScaleOp(select=Selector(lane=("host",), kind=("sync",)), factor=0)]
    cats: dict[str, float] = {}
    for t in tasks:
        if t.kind in _KERNELS:
            for c, us in t.category_us().items():
                cats[c] = cats.get(c, 0.0) + us
    for c in sorted(c for c, us in cats.items() if us > 0 and c in _COMPUTE):
        out[f"compute:{c}"] = [ScaleOp(select=Selector(lane=("device",), kind=_KERNELS,
                                                       category=(c,)), factor=0)]
    if any(t.kind == "collective" for t in tasks):
        out["comm"] = [ScaleOp(select=Selector(kind=("collective",)), factor=0)] + (
            [SetOp(path="comm.latency_us", value=0.0)] if model.comm.latency_us else [])
    if any(r.slower() for r in model.ranks):
        out["arrival_skew"] = [RemoveOp(select=Selector(rank=tuple(r.rank for r in model.ranks)))]
    return out


def _free_step(item) -> float:
    model, ops, steps, warmup, seed = item
    return simulate_counted(apply_ops(model, ops), steps, warmup, seed,
                            keep="steps")[0].mean_step_us


def ceilings(model: StepModel, base: Sequence[Operation] = (), steps: int | None = None, warmup: int = 20,
             seed: int = 0, jobs: int = 1, progress: Progress | None = None,
             baseline: Prediction | None = None) -> CeilingReport:
    """Simulated ceilings of ``model`` after ``base`` operations.

    Args:
        baseline: the prediction of ``model`` after ``base`` with the same steps and seed, if
            already made (it is computed otherwise).
        jobs / progress: processes and progress hook for the simulations.

    Raises:
        ModelError: a base op that does not apply, or a model that cannot be simulated.
    """
    base_pred = baseline or predict(model, base, steps=steps, warmup=warmup, seed=seed)
    current = base_pred.model if base_pred.model is not None else apply_ops(model, base)
    comps = components(current)
    kernel_ops = [ScaleOp(select=Selector(lane=("device",), kind=_KERNELS), factor=0)]
    has_kernels = any(k.startswith("compute:") for k in comps)
    todo = list(comps.items()) + ([("kernels", kernel_ops)] if has_kernels else [])
    free = run_many(_free_step, [(current, ops, steps, warmup, seed) for _, ops in todo],
                    jobs=jobs, progress=progress)
    b = base_pred.mean_step_us
    shares = base_pred.summary.shares
    rows = []
    for (key, ops), f in zip(todo[:len(comps)], free):
        share = min(shares.get(key, 0.0), 1.0)
        rows.append(CeilingRow(key, label(key), f, b / f if f > 0 else float("inf"), share,
                               amdahl_ceiling(share), "; ".join(o.describe() for o in ops)))
    rows.sort(key=lambda r: (-r.ceiling, r.key))
    s = base_pred.summary
    kfree = free[-1] if has_kernels else None
    return CeilingReport(
        base_pred, tuple(rows), s.kernel_sum_us, s.kernel_ratio,
        amdahl_ceiling(min(s.kernel_ratio, 1.0)), kfree,
        (b / kfree if kfree else float("inf")) if has_kernels else None)
