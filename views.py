"""The pictures and the report of :mod:`stepsim.api`: where real traces (read by calibration)
meet the simulated steps (drawn by report): measured lanes above simulated ones, re-measured
runs and ledger points beside predictions, calibration warnings said once for a folder of
ranks. The API's verbs call these; they are also usable on their own, with a loaded model and
parsed operations.

Times are µs; outputs are written atomically when named; errors raise
:class:`~stepsim.simcore.errors.StepsimError` subclasses, nothing here prints.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Iterable, Sequence

from stepsim.models.params import StepModel
from stepsim.models.warning_record import WarningRecord, retexted, retold
from stepsim.simcore.errors import StepsimError, shown

__all__ = ["measured_timeline", "draw_simulation", "draw_compare", "report", "ledger_records",
           "ledger_points", "measured_runs", "measured_points", "grouped_warnings"]


def measured_timeline(trace: str | Path, steps: int = 1, scarce: str = ""):
    """The real trace's lanes over ``steps`` steps as a :class:`report.lanes.Timeline`;
    ``scarce`` (a simulated lane name such as ``rank0.host``) is shaded on the trace's rank.
    ``trace`` may be a capture folder (its ``trace.json.gz`` is read), as for other verbs.

    Raises:
        InputError: the trace cannot be read or has no complete step.
    """
    from stepsim.calibration.calibrate import CAPTURE_TRACE
    from stepsim.calibration.lanes import measured_lanes
    from stepsim.report.lanes import Timeline

    if Path(trace).is_dir() and (Path(trace) / CAPTURE_TRACE).is_file():
        trace = Path(trace) / CAPTURE_TRACE
    m = measured_lanes(trace, steps=steps)
    if scarce == "compute" or "." not in scarce:
        scarce = ""
    lane = f"rank{m.rank}.{scarce.split('.', 1)[1]}" if scarce else ""
    return Timeline(f"measured: {shown(m.path.name)}", m.spans, m.marks_us, lane, m.steps)


def draw_simulation(model: StepModel, result, summary, plot: str | Path | None = None,
                    measured: str | Path | None = None, plot_steps: int = 1,
                    queue_plot: str | Path | None = None) -> None:
    """``plot``: the lanes of the simulated step(s), the ``measured`` trace's above them;
    ``queue_plot``: the prefetch queue over time with the workers beneath.

    Raises:
        StepsimError: ``queue_plot`` for a model without DataLoader workers.
    """
    from stepsim.report.charts import plot_queue
    from stepsim.report.lanes import plot_lanes, sim_timeline

    if plot:
        panels = [sim_timeline(result, summary, steps=plot_steps,
                               title=f"simulated: {model.meta.name or 'model'}")]
        if measured:
            panels.insert(0, measured_timeline(measured, plot_steps, summary.scarce_lane))
        plot_lanes(panels, plot)
    if queue_plot:
        try:
            plot_queue(result, queue_plot, steps=max(plot_steps, 6))
        except ValueError as e:
            raise StepsimError(f"--queue-plot: {e}") from None


def draw_compare(base, pred, path: str | Path, plot_steps: int = 1) -> None:
    """The lanes of the baseline above those of the what-if (two
    :class:`scenarios.predict.Prediction`, each re-simulated as it was predicted)."""
    from stepsim.models.simulate import simulate
    from stepsim.report.lanes import plot_lanes, sim_timeline

    panels = []
    for name, p in (("baseline", base), (f"what-if: {pred.what}", pred)):
        res = simulate(p.model, steps=p.steps, warmup=p.warmup, seed=p.seed)
        panels.append(sim_timeline(res, p.summary, steps=plot_steps,
                                   title=f"{name} (mean step {p.mean_step_us / 1e3:.1f} ms)"))
    plot_lanes(panels, path)


def ledger_records(path: str | Path, warnings: list[str] | None = None):
    """The records of a validation ledger; ``warnings`` receives one counting the lines that
    are not records, which are left out (:func:`scenarios.validate.read_ledger`).

    Raises:
        InputError: no such file, or no record in it.
    """
    from stepsim.scenarios.validate import read_ledger
    from stepsim.simcore.errors import InputError
    from stepsim.simcore.files import missing

    if not Path(path).exists():
        raise missing(path, "ledger file")
    said = [] if warnings is None else warnings
    before = len(said)
    records = read_ledger(path, said)
    if not records:   # (what the read said is part of why: 2 GiB of NULs was "empty")
        why = "; ".join(w.removeprefix(f"{Path(path).name}: ") for w in said[before:])
        raise InputError(path, f"the ledger holds no validation record ({why})" if why else
                         "the ledger is empty (no validation records)")
    return records


def report(model: StepModel, whatifs: Sequence[tuple[str, list]] = (), *,
           output: str | Path | None = None, ledger: str | Path | None = None,
           measured: str | Path | None = None, steps: int | None = None, warmup: int = 20,
           seed: int = 0, draws: int = 16, jobs: int = 1, plot_steps: int = 1,
           with_plan: bool = True, progress: bool = False):
    """One self-contained HTML report (:mod:`report.html`) of ``model``: the baseline (its
    lanes below the ``measured`` trace's), each ``(name, operations)`` what-if, the ceilings,
    the plan (unless ``with_plan`` is False), the ``ledger``'s validation and the caveats.
    Returns the :class:`report.document.ReportData`; writes ``output`` when named.

    Raises:
        InputError / ModelError / SimulationError: as the planner verbs do.
    """
    from stepsim.report.document import build_report
    from stepsim.report.html import write_report
    from stepsim.scenarios.caveats import input_caveats

    timeline = measured_timeline(measured, plot_steps) if measured else None
    skipped: list[str] = []
    records = ledger_records(ledger, skipped) if ledger else []
    say = (lambda what: print(f"report: {what}", file=sys.stderr)) if progress else None
    data = build_report(model, list(whatifs), records, timeline, with_plan=with_plan,
                        draws=draws, lane_steps=plot_steps, progress=say, steps=steps,
                        warmup=warmup, seed=seed, jobs=jobs)
    data.caveats[:0] = skipped
    # what the CLI prints, as whatif's warnings: the model's own capture, then the ledger's
    # skipped lines and each what-if's caveats, each once
    data.warnings = list(dict.fromkeys([*input_caveats(model), *skipped,
                                        *(w for x in data.whatifs for w in x.caveats)]))
    if output is not None:
        write_report(data, output)
    return data


def ledger_points(ledger: str | Path, path: str, baseline: tuple[str, object] | None = None,
                  warnings: list[str] | None = None) -> dict:
    """Measured mean steps (µs) per value of ``path`` from the ledger's records that set it
    alone, other what-ifs left out, and ``baseline`` = ``(model name, its value of path)``
    adding that model's baseline records (:func:`report.document.ledger_sweep_points`).

    Raises:
        InputError: an unreadable or empty ledger; StepsimError: fewer than two values.
    """
    from stepsim.report.document import ledger_sweep_points

    records = ledger_records(ledger, warnings)
    found = ledger_sweep_points(records, path, baseline)
    if found is None:
        values = {r.scenario.partition("=")[2] for r in records
                  if r.scenario.startswith(f"set {path}=") and ";" not in r.scenario}
        got = (f"its records set {path} alone to {len(values)} value ({', '.join(values)}): "
               "a measured sweep needs two distinct values" if len(values) == 1 else
               f"no records that set {path} alone, at two distinct values or more")
        raise StepsimError(f"--ledger {shown(ledger)}: {got} (e.g. 'stepsim validate MODEL "
                           f"--set {path}=V TRACE --ledger L' for another V)")
    return found[1]


def fresh_runs(model: StepModel, runs) -> bool:
    """Whether none of ``runs`` (re-measured, :func:`measured_runs`) is a capture ``model``
    was calibrated on, as the model records them (:mod:`calibration.capture_ids`); False for
    a model that records none (calibrated before the record: every run of its setting
    in-sample), and where a run names no id (its sidecar missing, unreadable or without one:
    the model's own capture, its sidecar since edited or lost, was scored as a fresh run)."""
    from stepsim.calibration.capture_ids import capture_ids, model_capture_ids

    known = model_capture_ids(model)
    return known is not None and all((ids := capture_ids([r.path])) and not ids & known
                                     for r in runs)


def measured_runs(traces: Sequence[str | Path]):
    """The re-measured runs and their warnings (each said once per file)."""
    from stepsim.calibration.measure import measured_runs

    runs = measured_runs([str(t) for t in traces])
    warnings = [retexted(w, f"{shown(r.path)}: {w}", f"{shown(r.path)}: ") for r in runs
                for w in dict.fromkeys(r.warnings)]
    return runs, tuple(warnings)


def measured_points(measured, grid: dict) -> tuple[dict, tuple[str, ...]]:
    """``VALUE=TRACE`` texts (or a mapping value → trace) → value → re-measured steps (µs)."""
    from stepsim.scenarios.transforms import parse_value

    pairs = []
    for item in (measured.items() if isinstance(measured, Mapping) else measured):
        if isinstance(item, str):
            value, eq, trace = item.partition("=")
            if not eq or not value.strip() or not trace.strip():
                raise StepsimError(f"bad --measured {item!r}: expected VALUE=TRACE")
            pairs.append((item, value, parse_value(value), trace))
        else:
            pairs.append((f"{item[0]}={item[1]}", str(item[0]), item[0], item[1]))
    from stepsim.scenarios.validate import SETTINGS
    from stepsim.simcore.errors import InputError

    out, warnings = {}, ()
    axis, first = next(iter(grid.items()))
    for text, shown_value, v, trace in pairs:
        if v not in first:
            raise StepsimError(f"--measured {text!r}: {shown_value} is not a value of the first "
                               f"sweep axis ({', '.join(map(str, first))})")
        runs, w = measured_runs([trace])
        stated = (runs[0].loader or {}).get(axis[len("loader."):]) \
            if axis.startswith("loader.") and axis[len("loader."):] in SETTINGS else None
        if stated is not None and stated != v:
            raise InputError(runs[0].path, f"--measured {text!r}: a run of {axis}={stated} "
                             f"(its sidecar), not {shown_value}: it would mark another "
                             "setting's step time at this value")
        out[v], warnings = runs[0].step_us, warnings + w
    return out, warnings


def grouped_warnings(records: Iterable[WarningRecord]) -> tuple[WarningRecord, ...]:
    """Warning records that differ only in the file their text begins with (``name: text``)
    said once, naming the files: a directory of ranks repeats each for every rank."""
    files: dict[str, list[str]] = {}
    first: dict[str, WarningRecord] = {}
    for r in records:
        name, sep, text = r.text.partition(": ")
        key = text if sep and " " not in name else r.text
        files.setdefault(key, []).append(name if key != r.text else "")
        first.setdefault(key, r)
    out = []
    for text, names in files.items():
        names = [n for n in names if n]
        if len(names) > 1:   # a record's summary headed by the same files (warning_order)
            head = f"{names[0]} and {len(names) - 1} other file(s): "
            out.append(retold(first[text], head + text, head))
        else:
            out.append(first[text])
    return tuple(out)
