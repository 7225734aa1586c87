"""The diagnosis of a trace or a model behind :func:`stepsim.api.diagnose`: a trace is
calibrated, and its file (the trace itself, a capture folder's, or a rank folder's first) gives
the evidence a model does not hold: the roofline of its kernels, its memory headroom and its
kernel-sum ÷ step-wall; then the tree of :mod:`scenarios.diagnose` is walked.

Times are µs; errors raise :class:`~stepsim.simcore.errors.StepsimError` subclasses.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.models.params import StepModel, load_model
from stepsim.simcore.errors import StepsimError, shown
from stepsim.views import grouped_warnings

MEMORY_WHY_NOT_CPU = "no device kernels (a CPU run): no device memory to fit"
"""Why a CPU run has no memory verdict, on its trace and on its model alike."""


def _trace_file(path: Path) -> Path | None:
    """The one trace file a roofline and memory profile read: the file itself, a capture
    folder's trace, or the first per-rank file (or rank folder's trace) of a directory (None:
    none found)."""
    from stepsim.calibration.calibrate import CAPTURE_TRACE

    if path.is_file():
        return path
    if (path / CAPTURE_TRACE).is_file():
        return path / CAPTURE_TRACE
    files = sorted(f for f in path.iterdir() if f.name.endswith((".json", ".json.gz")))
    if files:
        return files[0]
    # a job's capture folder of rank folders (rank0/trace.json.gz, ...): the first rank's
    # (fresh14: "no trace file in the folder" beside rank0/ and rank1/)
    ranks = sorted(d / CAPTURE_TRACE for d in path.iterdir() if (d / CAPTURE_TRACE).is_file())
    return ranks[0] if ranks else None


def _is_model(path: Path) -> bool:
    """A StepModel file (YAML, or JSON with ``schema_version``), not a trace."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return True
    if path.is_file() and path.suffix.lower() == ".json":
        with open(path, "rb") as f:
            head = f.read(4096)
        return b'"schema_version"' in head and b'"traceEvents"' not in head
    return False


def _trace_evidence(path: Path, step_regex, peak):
    """(roofline and kernels or None, why not, memory verdict or None, kernel-sum ÷ wall or
    None, where it was measured) of the trace behind ``path``."""
    from stepsim.calibration.events import build_table
    from stepsim.calibration.memory_events import memory_from_table
    from stepsim.calibration.roofline_inputs import work_from_table
    from stepsim.calibration.trace_io import load_trace
    from stepsim.scenarios.gpus import machine_for, parse_peaks
    from stepsim.scenarios.memory import memory_verdict
    from stepsim.scenarios.roofline import roofline

    tf = _trace_file(path)
    if tf is None:
        return None, (), "no trace file in the folder", None, None, ""
    table = build_table(load_trace(tf))
    work = work_from_table(table, step_regex)
    roof, why = None, ""
    if not work.kernels:
        why = "no device kernels in the trace (a CPU run): the step is host work"
    else:
        machine = machine_for(work.device, parse_peaks(peak) if peak else None)
        if machine is None:
            name = work.device.get("name")
            why = ((f"the GPU ({name}) is not in the table of known GPUs" if name else
                    "the trace does not name its GPU (no deviceProperties)") +
                   ": give its peaks with --peak fp32=FLOPS,bf16=FLOPS,bw=BYTES_PER_S")
        else:
            roof = roofline(work.kernels, machine, len(work.steps))
    mem = memory_from_table(table, step_regex)
    ratio = work.kernel_ratio if work.steps else None
    mean_us = sum(work.step_us) / len(work.step_us) if work.step_us else 0.0
    source = (f"measured in {tf.name} over {len(work.steps)} step(s) of {mean_us / 1e3:.2f} ms "
              "mean")
    return roof, work.kernels, why, memory_verdict(mem) if mem else None, ratio, source


def diagnose(input: str | Path | StepModel, step_regex: str | None, peak: str | None,
             plot: str | Path | None, **kw):
    """The :class:`results.Diagnosed` of a trace (a file, capture folder or rank folder) or a
    StepModel (a file or an object); ``kw`` are :func:`scenarios.diagnose.diagnose`'s
    simulation options (steps, warmup, seed, jobs, draws).

    Raises:
        InputError: an unreadable trace or model; ModelError: a bad ``peak``.
    """
    from stepsim.fit import calibrate as fit
    from stepsim.report.diagnose import plot_roofline
    from stepsim.results import Diagnosed
    from stepsim.scenarios.diagnose import diagnose as walk

    path = None if isinstance(input, StepModel) else Path(input)
    if path is not None and not path.exists():
        raise StepsimError(f"{shown(path)}: no such file or folder")
    if path is None or _is_model(path):
        if peak:
            from stepsim.scenarios.gpus import parse_peaks

            parse_peaks(peak)
        m = input if path is None else load_model(path)
        gpu = m.on_device()
        why = ("a model has no kernel shapes (give the trace)" if gpu else
               "the model has no device work (a CPU run): the step is host work")
        # a CPU model says the trace's reason: there is no device memory to fit either way
        # named by the file the user gave (its capture folder's name is the model's)
        d = walk(m, name="" if path is None else path.name, roof_why_not=why,
                 memory_why_not=MEMORY_WHY_NOT_CPU if not gpu else
                 "a model has no memory events (give the trace)", **kw)
        from stepsim.scenarios.caveats import input_caveats

        # what is wrong with the model's own capture, said before the tree as whatif says it
        return Diagnosed(d, tuple(input_caveats(m)) + ((f"no roofline plot: {why}",)
                                                        if plot else ()))
    from stepsim.models.warning_record import carried, records

    model = fit(path, step_regex=step_regex)
    roof, kernels, why, mem, ratio, source = _trace_evidence(path, step_regex, peak)
    d = walk(model, name=path.name, kernel_ratio=ratio, ratio_source=source, roof=roof,
             kernels=kernels, roof_why_not=why, memory=mem,
             memory_why_not="no device memory events (record with profile_memory=True)"
             if kernels else MEMORY_WHY_NOT_CPU, **kw)
    warnings = carried(grouped_warnings(records(model.meta)))   # (Diagnosed.warnings: texts)
    if plot and roof is None:
        warnings += (f"no roofline plot: {why}",)
    elif plot:
        plot_roofline(roof, plot)
    return Diagnosed(d, warnings)
