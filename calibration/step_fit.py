"""One step's fit (:class:`StepFit`): its device tasks (:mod:`calibration.device_tasks`) and
host ops (:mod:`calibration.host_ops`), with the counts and warnings the notes report."""
from __future__ import annotations

from dataclasses import dataclass, field

from stepsim.calibration.device_tasks import fit_device_tasks
from stepsim.calibration.host_ops import fit_host_ops
from stepsim.calibration.steps import Step
from stepsim.calibration.trace_context import TraceContext
from stepsim.calibration.fit_records import Op, Task
from stepsim.calibration.gpu_kinds import MAX_NUMEL_WORDS
from stepsim.models.warning_record import said

__all__ = ["StepFit", "fit_step"]


@dataclass
class StepFit:
    """One step's host ops and device tasks (durations as measured in that step), each task's
    measured duration and gap by id (µs), the ``next()`` times (µs), the collectives
    (:class:`calibration.device_tasks.DeviceFit`), counts for the notes, warnings, and the
    table rows of the step's own GPU work."""

    step: Step
    ops: list[Op]
    streams: dict[str, list[Task]]
    kernel_us: dict[str, float]
    idle_us: dict[str, float]
    next_us: list[float]
    colls: list[tuple]
    counts: dict
    warnings: list[str]
    acts: list[int] = field(default_factory=list)   # table rows of the step's own GPU work

    def signature(self) -> tuple:
        """The step's structure: its non-cpu host ops in order (a launch with its task; a
        sync's target is left out, being inferred from timing) and each stream's tasks."""
        return (tuple((o.kind, o.name, o.task if o.kind == "launch" else None)
                      for o in self.ops if o.kind != "cpu"),
                tuple(sorted((s, tuple(t.name for t in ts)) for s, ts in self.streams.items())))


def fit_step(ctx: TraceContext, step: Step) -> StepFit:
    """Fit the host ops and device tasks of ``step``."""
    warnings: list[str] = []
    sa = ctx.step_acts(step)
    dev = fit_device_tasks(ctx, step, sa)
    host = fit_host_ops(ctx, step, sa, dev)
    n_overlap, n_unres, ops = dev.n_overlap, host.n_unres, host.ops
    if n_overlap:
        warnings.append(f"{n_overlap} GPU activit(ies) in step {step.number} overlap the one "
                        "before them on the same stream (timestamps a stream cannot have): "
                        "each counts from the other's end, so the stream's busy time is the union")
    if dev.bad_sizes:
        warnings.append(bad_sizes_said(dev.bad_sizes, len(dev.colls), step.number))
    if n_unres:
        warnings.append(f"{n_unres} blocking call(s) in step {step.number} waited on work whose "
                        "dependencies are launched later; modelled as CPU time")
    counts = {"inferred_waits": dev.n_waits, "inferred_prev_step_waits": dev.n_prev_waits,
              "host_syncs": host.n_sync, "host_syncs_blocking": host.n_block,
              "host_threads": ",".join(f"{p}/{t}" for p, t in sa.host_threads),
              "device_tasks": len(sa.acts), "host_ops": len(ops)}
    return StepFit(step=step, ops=ops, streams=dev.streams, kernel_us=dev.kernel_us,
                   idle_us=dev.idle_us, next_us=host.next_us, colls=dev.colls, counts=counts,
                   warnings=warnings, acts=sa.acts)


def bad_sizes_said(names: list[str], n_colls: int, number: int) -> str:
    """The one warning that counts a step's collectives whose record gives a size that cannot
    be right (``names``; of ``n_colls`` collectives in step ``number``): their bytes are taken
    as unknown, as a size not given, and the kernel's measured time is kept. Noted: the
    replayed step reads no bytes; only a what-if that resizes the collectives does."""
    return said(f"{len(names)} of {n_colls} collective(s) in step {number} give a size that "
                f"cannot be right (an element count below 0 or past {MAX_NUMEL_WORDS}, or a "
                f"dtype that is no tensor element type; the first: {names[0]}): their bytes "
                "are taken as not recorded", "collective_bad_size", noted=True,
                summary=f"{len(names)} collective size(s) that cannot be right: bytes unknown")
