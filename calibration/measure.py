"""Measured step times of a (re-measured) trace, for validation: no fitting, only reading.

Step time is defined in :mod:`calibration.steps` (start to next start, µs here).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calibration.cpu import step_loader_waits_us, waited_for_cores
from calibration.events import build_table
from calibration.sidecar import load_sidecar
from calibration.steps import find_steps
from calibration.trace_io import load_trace
from simcore.errors import InputError


INPUT_BOUND_SHARE = 0.10
"""Share of the step the host thread must spend waiting on input for a run to count as
input-bound."""


@dataclass(frozen=True)
class MeasuredSteps:
    """Attributes:
        path: the trace.
        step_us: each step's time (µs), start to next start, shape (n_steps,).
        input_wait_us: per step, µs the host thread waited in DataLoader ``next()``.
        bottleneck: in the simulator's vocabulary (``models.metrics``), first rule that
            holds: ``cpu_cores`` when the capture sidecar shows the training step's wall time
            exceeding its CPU time (:func:`calibration.cpu.waited_for_cores`);
            ``input`` when the host thread waits for the DataLoader for at least
            ``INPUT_BOUND_SHARE`` of the step (a faster input pipeline would shorten it);
            else ``device`` when the trace has GPU work (the finer device split is the
            simulator's, not read here) or ``host_compute``.
        warnings: what could not be used (an unreadable ``sidecar.json`` beside the trace).
    """

    path: Path
    step_us: list[float]
    input_wait_us: list[float]
    bottleneck: str
    warnings: list[str] = field(default_factory=list)

    @property
    def mean_us(self) -> float:
        return float(np.mean(self.step_us))

    @property
    def median_us(self) -> float:
        return float(np.median(self.step_us))


def measured_steps(path: str | Path, step_regex: str | None = None,
                   sidecar: str | Path | None = None) -> MeasuredSteps:
    """Read the steps of one trace file.

    ``sidecar``: the capture sidecar of the same run; by default ``sidecar.json`` beside the
    trace is used when it exists and is valid (the capture harness writes both into one
    folder); an invalid one there is ignored with a warning.

    Raises:
        InputError: unreadable/malformed trace or sidecar, or a trace without steps.
    """
    p = Path(path)
    notes: list[str] = []
    side = None
    if sidecar:
        side = load_sidecar(sidecar)
    elif (p.parent / "sidecar.json").is_file():
        try:
            side = load_sidecar(p.parent / "sidecar.json")
        except InputError as e:  # not named by the user: not a reason to fail
            notes.append(f"ignored {e}")
    table = build_table(load_trace(p))
    steps = find_steps(table, step_regex=step_regex)
    if not steps:
        raise InputError(p, "no training steps found; " + "; ".join(steps.warnings))
    step_us = np.array([(s.end_ns - s.start_ns) / 1e3 for s in steps])
    wait = step_loader_waits_us(table, steps)
    share = float(wait.sum() / step_us.sum()) if step_us.sum() > 0 else 0.0
    prof = [s for s in side.steps if s.profiled] if side is not None else []
    compute_wall = float(np.mean(step_us - wait))
    compute_cpu = float(np.mean([s.compute_cpu_us for s in prof])) if prof else None
    if compute_cpu and waited_for_cores(compute_wall, compute_cpu, side.torch_num_threads or 1,
                                        side.host_cores or 1):
        neck = "cpu_cores"
    elif share >= INPUT_BOUND_SHARE:
        neck = "input"
    else:
        neck = "device" if table.gpu_mask().any() else "host_compute"
    return MeasuredSteps(p, [float(v) for v in step_us], [float(v) for v in wait], neck, notes)
