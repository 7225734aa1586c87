"""Named fixes: the optimisations people try, each a pure ``StepModel -> StepModel`` transform
that states exactly what it changes (``stepsim fixes`` prints this table).

Every fix has a *kind*, which says what it would cost to adopt:

* ``systems``: changes how the same computation is fed and scheduled (loader, copies,
  launches, kernel fusion, DDP buckets, a slow node replaced). The planner uses these.
* ``numerics``: changes the arithmetic (mixed precision).
* ``algorithm``: changes the optimisation itself (gradient accumulation changes how often the
  weights are updated).
* ``hardware``: needs different hardware (a faster interconnect).

``relieves`` lists the bottleneck keys (:data:`models.metrics.BOTTLENECK_LABELS`,
``compute:<category>``) a fix is meant to relieve; the planner tries a fix only on those.
``candidates`` are the argument sets the planner tries when the user gives none.

Arguments that nobody measured carry documented assumed defaults; pass measured values where
you have them (``--fix pin_memory:speedup=2.6``).

Semantics followed: the DataLoader's ``num_workers``, ``prefetch_factor`` and ``pin_memory``
as ``torch/utils/data/dataloader.py`` defines them; pageable vs page-locked copies and
``non_blocking`` as PyTorch's CUDA semantics notes ("Use pinned memory buffers") describe
them; CUDA graphs as ``torch.cuda.graphs`` captures them (kernels replayed by one launch, no
synchronisation inside a captured region, static input buffers filled by a copy outside it);
``bucket_cap_mb`` and ``no_sync`` as ``torch/nn/parallel/distributed.py`` uses them (through
:mod:`models.ddp` and ``comm.grad_accum_steps``).
"""
from __future__ import annotations

from pydantic import Field

from stepsim.models.params import Phase, StepModel
from stepsim.scenarios.ddp_whatifs import (AccumArgs, BarrierArgs, BucketArgs, InterconnectArgs,
                                           NoArgs, StragglerArgs, add_straggler,
                                           bucket_candidates, bucket_cap, faster_interconnect,
                                           grad_accumulation, insert_barrier, remove_straggler)
from stepsim.scenarios.fix_types import Fix, FixArgs, FixKind, nothing
from stepsim.scenarios.host_threads import (ThreadsArgs, intra_op_threads, rank_keys,
                                            threads_candidates)
from stepsim.scenarios.paths import set_value, validated
from stepsim.scenarios.primitives import scale
from stepsim.scenarios.select import Selector, copy_direction
from stepsim.simcore.errors import ModelError

__all__ = ["FIXES", "Fix", "FixKind", "get_fix"]


# ---------------------------------------------------------------- input pipeline ---------
class WorkersArgs(FixArgs):
    workers: int | None = Field(default=None, ge=1)
    """DataLoader worker processes (default: twice the current number, at least 2)."""


def _more_workers(m: StepModel, a: WorkersArgs) -> StepModel:
    n = a.workers if a.workers is not None else max(2, 2 * m.loader.num_workers)
    if n == m.loader.num_workers:
        raise nothing("more_workers", f"num_workers is already {n}")
    return set_value(m, "loader.num_workers", n)


def _worker_candidates(m: StepModel) -> list[dict]:
    top = max(2, 2 * m.loader.host_cores)
    return [{"workers": w} for w in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
            if m.loader.num_workers < w <= top]


class PrefetchArgs(FixArgs):
    prefetch_factor: int | None = Field(default=None, ge=1)
    """Batches each worker keeps in flight (default: twice the current)."""


def _prefetch(m: StepModel, a: PrefetchArgs) -> StepModel:
    if m.loader.num_workers == 0:
        raise nothing("prefetch_factor", "num_workers is 0 (prefetch_factor needs workers)")
    n = a.prefetch_factor if a.prefetch_factor is not None else 2 * m.loader.prefetch_factor
    if n == m.loader.prefetch_factor:
        raise nothing("prefetch_factor", f"prefetch_factor is already {n}")
    return set_value(m, "loader.prefetch_factor", n)


def _prefetch_candidates(m: StepModel) -> list[dict]:
    return [{"prefetch_factor": p} for p in (4, 8) if p > m.loader.prefetch_factor]


class GpuDecodeArgs(FixArgs):
    share: float = Field(default=0.5, gt=0, le=1)
    """Fraction of a worker's per-batch time that is decoding (assumed 0.5)."""
    gpu_us: float | None = Field(default=None, ge=0)
    """GPU time (µs) to decode one batch (default, assumed: the CPU decode time / 40)."""


def _gpu_decode(m: StepModel, a: GpuDecodeArgs) -> StepModel:
    cpu_us = m.loader.produce.mean_us * a.share
    if cpu_us <= 0:
        raise nothing("gpu_decode", "the loader's produce time is 0")
    tasks = m.task_map()
    at = next((i for i, op in enumerate(m.host.ops) if op.kind == "launch"
               and copy_direction(tasks[op.task]) is None), None)
    if at is None:
        raise nothing("gpu_decode", "no launched device work to run the decode beside")
    data = scale(m, Selector(lane=("loader",), category=("produce",)), 1 - a.share).model_dump()
    first = tasks[m.host.ops[at].task]
    stream = data["device"]["streams"][first.stream]
    pos = next(j for j, t in enumerate(stream) if t["id"] == first.id)
    tid = "gpu_decode"
    while tid in tasks:
        tid += "_"
    stream.insert(pos, {"id": tid, "stream": first.stream, "name": "decode (GPU)",
                        "kind": "kernel", "category": "other", "phase": "data",
                        "dur_us": a.gpu_us if a.gpu_us is not None else cpu_us / 40,
                        "waits": list(first.waits)})
    data["host"]["ops"].insert(at, {"kind": "launch", "name": "launch decode", "task": tid,
                                    "dur_us": m.host.ops[at].dur_us, "category": "other"})
    return validated(data, "fix gpu_decode")


# ---------------------------------------------------------------- copies -----------------
class PinArgs(FixArgs):
    speedup: float = Field(default=2.0, gt=0)
    """Pinned over pageable host-to-device copy rate (assumed 2.0; measure with a copy test)."""


def _pin_memory(m: StepModel, a: PinArgs) -> StepModel:
    tasks = m.task_map()
    pageable = {t.id for t in tasks.values() if copy_direction(t) == "h2d" and not t.pinned}
    blocking = [i for i, op in enumerate(m.host.ops) if op.kind == "sync"
                and op.task is not None and copy_direction(tasks[op.task]) == "h2d"]
    if m.loader.pin_memory and not pageable and not blocking:
        raise nothing("pin_memory", "pin_memory is on and every host-to-device copy is pinned")
    data = m.model_dump()
    data["loader"]["pin_memory"] = True
    for ts in data["device"]["streams"].values():
        for t in ts:
            if t["id"] in pageable:
                t["pinned"] = True
                t["dur_us"] /= a.speedup
                t["breakdown_us"] = {k: v / a.speedup for k, v in t["breakdown_us"].items()}
    data["host"]["ops"] = [op for i, op in enumerate(data["host"]["ops"]) if i not in blocking]
    return validated(data, "fix pin_memory")


# ---------------------------------------------------------------- host launch ------------
class GraphArgs(FixArgs):
    phases: tuple[Phase, ...] = ("forward", "backward", "optimizer")
    """Phases whose kernels are captured (copies of the input batch stay outside)."""
    launch_us: float = Field(default=10.0, ge=0)
    """Host cost (µs) of one graph replay (``cudaGraphLaunch``; assumed 10 µs)."""


def _cuda_graphs(m: StepModel, a: GraphArgs) -> StepModel:
    tasks = m.task_map()

    def captured(op) -> bool:
        return op.kind == "launch" and tasks[op.task].phase in a.phases \
            and copy_direction(tasks[op.task]) is None

    if not any(captured(op) for op in m.host.ops):
        raise nothing("cuda_graphs", f"no launches of {'/'.join(a.phases)} work")
    # stream capture forbids synchronising with the host (CUDA programming guide, "CUDA
    # Graphs": cudaStreamSynchronize and pageable copies are illegal during capture)
    syncs = sum(1 for op in m.host.ops if op.phase in a.phases and (
        op.kind == "sync" or (op.kind == "launch" and tasks[op.task].pinned is False
                              and copy_direction(tasks[op.task]) is not None)))
    if syncs:
        raise nothing("cuda_graphs", f"the {'/'.join(a.phases)} work synchronises with the "
                       f"host {syncs} time(s) per step (syncs, pageable copies), which a "
                       "captured graph cannot; remove them first")
    data = m.model_dump()
    ops, held, open_ = [], [], False
    for src, op in zip(m.host.ops, data["host"]["ops"]):
        if captured(src):
            op["dur_us"] = 0.0 if open_ else a.launch_us
            if not open_:
                op["name"] = "cudaGraphLaunch"
            held, open_ = [], True
            ops.append(op)
        elif src.kind == "cpu" and src.phase in a.phases:
            continue
        elif src.kind == "cpu" and open_:
            held.append(op)
        else:
            ops += held
            held, open_ = [], False
            ops.append(op)
    data["host"]["ops"] = ops + held
    return validated(data, "fix cuda_graphs")


# ---------------------------------------------------------------- kernels ----------------
class FuseArgs(FixArgs):
    factor: float = Field(default=0.5, gt=0, le=1)
    """Fused time over unfused time of the elementwise work (assumed 0.5: the chain reads and
    writes memory once instead of once per kernel)."""


def _fused_elementwise(m: StepModel, a: FuseArgs) -> StepModel:
    tasks = m.task_map()
    ew = {tid: t.category_us().get("elementwise", 0.0) for tid, t in tasks.items()}
    if not any(ew.values()):
        raise nothing("fused_elementwise", "no elementwise kernels")
    out = scale(m, Selector(lane=("device",), category=("elementwise",)), a.factor).model_dump()
    for op in out["host"]["ops"]:
        t = tasks.get(op["task"]) if op["kind"] == "launch" else None
        if t is not None and t.dur_us > 0 and ew[t.id]:
            op["dur_us"] *= 1 - ew[t.id] / t.dur_us * (1 - a.factor)
    return validated(out, "fix fused_elementwise")


class PrecisionArgs(FixArgs):
    factor: float = Field(gt=0)
    """New over old time of the selected categories in reduced precision (you give it: it
    depends on the GPU's tensor cores and the shapes; 0.5 is common for bf16 GEMMs)."""
    categories: tuple[str, ...] = ("gemm", "conv")


def _mixed_precision(m: StepModel, a: PrecisionArgs) -> StepModel:
    return scale(m, Selector(lane=("device",), category=a.categories), a.factor)


FIXES: dict[str, Fix] = {f.name: f for f in (
    Fix("more_workers", "systems",
        "loader.num_workers := workers (default twice the current, at least 2); each worker "
        "takes a share of loader.host_cores.",
        WorkersArgs, ("input",), _more_workers, _worker_candidates, repeatable=True),
    Fix("prefetch_factor", "systems",
        "loader.prefetch_factor := prefetch_factor (default twice the current): more batches in "
        "flight per worker, which absorbs jitter but adds no throughput.",
        PrefetchArgs, ("input",), _prefetch, _prefetch_candidates, repeatable=True),
    Fix("intra_op_threads", "systems",
        "every host CPU op with a parallel part: threads := threads (torch.set_num_threads; "
        "default the cores the DataLoader's threads leave, at least 1; without threads it "
        "applies only where the step's team and the workers are more runnable threads than "
        "cores); the parallel part keeps its work, its captured wall × capture_threads × "
        "parallel_efficiency (assumed by calibration and varied by the intervals, or the "
        "efficiency given, then measured) (scenarios.host_threads). On DDP ranks whose "
        "threads oversubscribe their host's cores: one thread a rank, the host ops' CPU from "
        "the capture's least-spun steps and gloo's CPU from its own threads "
        "(scenarios.rank_one_thread).",
        ThreadsArgs, ("cpu_cores", "input"), intra_op_threads, threads_candidates,
        repeatable=True, relieves_on=rank_keys),
    Fix("gpu_decode", "systems",
        "loader.produce × (1 − share); a 'decode (GPU)' kernel of gpu_us µs (default: the "
        "removed CPU time / 40, assumed) is added before the first launched device task, on its "
        "stream, with its own launch.",
        GpuDecodeArgs, ("input",), _gpu_decode,
        needs_device="the decode would move to a GPU"),
    Fix("pin_memory", "systems",
        "loader.pin_memory := true (the pin thread copies each batch into page-locked memory); "
        "every unpinned host-to-device copy: pinned (its launch no longer blocks the host), "
        "duration ÷ speedup (default 2, assumed); host syncs on those copies are deleted "
        "(non_blocking=True).",
        PinArgs, ("h2d", "sync"), _pin_memory,
        # (``--set loader.pin_memory=true`` there is a caveat instead, scenarios.caveats)
        needs_device="pinned memory only speeds host-to-device copies"),
    Fix("cuda_graphs", "systems",
        "launches of captured work (phases, default forward/backward/optimizer; input copies "
        "stay outside) are collapsed, per run between syncs, into one cudaGraphLaunch of "
        "launch_us µs (default 10, assumed); host CPU ops of those phases, or between captured "
        "launches, are deleted (the replay skips that Python).",
        GraphArgs, ("launch", "host_compute"), _cuda_graphs,
        needs_device="a CUDA graph replays GPU kernels"),
    Fix("fused_elementwise", "systems",
        "elementwise device time × factor (default 0.5, assumed); each launch's cost shrinks by "
        "the same proportion of its task's elementwise share (fewer kernels to launch).",
        FuseArgs, ("compute:elementwise",), _fused_elementwise,
        needs_device="it fuses GPU elementwise kernels"),
    Fix("mixed_precision", "numerics",
        "device time of categories (default gemm, conv) × factor, which you must give.",
        PrecisionArgs, ("compute:gemm", "compute:conv"), _mixed_precision, lambda m: [],
        needs_device="it scales GPU kernels' time"),
    Fix("bucket_cap_mb", "systems",
        "comm.bucket_cap_mb := mb, then DDP's buckets and all-reduces are rebuilt from "
        "comm.grad_params (models.ddp).",
        BucketArgs, ("comm",), bucket_cap, bucket_candidates, repeatable=True),
    Fix("faster_interconnect", "hardware",
        "comm.bus_gbps × k (default 2); without a cost model, every collective's duration ÷ k.",
        InterconnectArgs, ("comm",), faster_interconnect),
    Fix("grad_accumulation", "algorithm",
        "comm.grad_accum_steps := micro_batches (default 4): all but the last micro-batch of "
        "an optimizer step run under no_sync, without collectives or optimizer phase; step "
        "time is per micro-batch.",
        AccumArgs, ("comm", "compute:optimizer"), grad_accumulation),
    Fix("remove_straggler", "systems",
        "every rank's delay_us := 0, phase_extra_us := {} and phase_wall_us := {} (the slow "
        "node replaced).",
        NoArgs, ("arrival_skew",), remove_straggler),
    Fix("straggler", "systems",
        "rank's phase_extra_us[phase] += ms × 1000 on a phase with device tasks, else "
        "phase_wall_us[phase] += ms × 1000 (wall-clock time busy on a core, not scaled by the "
        "host's speed): a slower rank, for the others to wait for; with comm.cold_resume (the "
        "gloo harness's probe), the rank's next phase's CPU × cold_share(ms) is added there "
        "too: it resumes cold (scenarios.ddp_whatifs; never proposed by the planner).",
        StragglerArgs, ("arrival_skew",), lambda m, a: add_straggler(m, a.rank, a.phase, a.ms), lambda m: []),
    Fix("barrier", "systems",
        "a barrier (zero-byte collective) entered by the host before phase, so each rank's "
        "arrival skew shows apart from transfer; with comm.cold_resume, a rank it holds for a "
        "straggler pays phase's CPU × cold_share(wait) more (scenarios.ddp_whatifs; never "
        "proposed).",
        BarrierArgs, ("arrival_skew",), lambda m, a: insert_barrier(m, a.phase), lambda m: []),
)}


def get_fix(name: str) -> Fix:
    """The fix called ``name``. Raises ModelError listing the known names."""
    try:
        return FIXES[name]
    except KeyError:
        raise ModelError(f"unknown fix {name!r} (fixes: {', '.join(FIXES)})") from None
