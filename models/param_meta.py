"""The StepModel's provenance (:class:`Meta`: sources, warnings, notes, parameter ranges) and
its captured window (:class:`ReplayWindow`, replayed step by step from the state the profiler
found). Times in **µs**."""
from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from stepsim.models.param_base import MAX_DURATION_US, Micros, Source, StepMicros, StrictModel
from stepsim.models.warning_record import Said, WarningRecord, kept_records
from stepsim.simcore.errors import printable

MAX_WINDOW_SPEED = 4.0
"""A window whose batches took more than this many times (or less than its inverse) the
run's CPU time of identical work is not the host's speed moving (0.75–1.20× seen): its
records cannot be right, or the run changed its work; the model then keeps the window's
speed and calibration says so (assumed bound; :mod:`calibration.host_noise`,
:mod:`calibration.gloo_window`). The bound of ``meta.notes['window_speed']`` too."""


def within_host_speed(ratio: float) -> bool:
    """Whether ``ratio`` (a window's CPU time of identical work against its run's, either
    way) is a host's speed moving: within 1/:data:`MAX_WINDOW_SPEED`–:data:`MAX_WINDOW_SPEED`
    (beyond it, records that cannot be right). The one bound check of
    :mod:`calibration.host_noise`, :mod:`calibration.gloo_window`,
    :mod:`calibration.gloo_loader` and :mod:`calibration.single_window`."""
    return 1 / MAX_WINDOW_SPEED <= ratio <= MAX_WINDOW_SPEED


NOTE_BOUNDS = {"straggler_release_us": (0.0, MAX_DURATION_US),
               "window_speed": (1 / MAX_WINDOW_SPEED, MAX_WINDOW_SPEED),
               "one_thread_cpu_us": (0.0, MAX_DURATION_US)}
"""The ``meta.notes`` a what-if or a replay reads as a number, with the range a model's
calibration or what-if writes them in: the straggler's late release (µs,
:mod:`scenarios.ddp_release`, taken back by the barrier what-if) and the profiled window's
speed against its run (:func:`models.host_speed.at_capture_speed`). A model file's string,
bool, NaN or value out of range there is refused ('abc' raised a ValueError; '1e400' read as
an infinite lag; 1e18 took every measured resume lag away); and the one-thread rank's CPU a
step (µs, :mod:`calibration.rank_team`), read by ``--fix intra_op_threads``
(:mod:`scenarios.rank_one_thread`), whose 1e300 or 'abc' read as a model without the
readings (break19). A range in ``meta.ranges`` on one of them that takes it out of its bounds
cannot be right: it is dropped, counted in a warning (:meth:`Meta._note_ranges`)."""


class Meta(StrictModel):
    """Where the model came from and what it could not calibrate."""

    name: str = ""
    sources: dict[str, Source] = Field(default_factory=dict)
    traces: list[str] = Field(default_factory=list)
    steps_used: list[int] = Field(default_factory=list)
    measured_step_us: list[StepMicros] = Field(default_factory=list)
    """Measured step times (start to next start, µs) of the steps used."""
    warnings: list[str] = Field(default_factory=list)
    warnings_ranked: list[WarningRecord] = Field(default_factory=list)
    """The records of those warnings whose module sized or noted them, by text
    (:mod:`models.warning_record`; a model file without them loads, its warnings unsized)."""
    notes: dict[str, str | float | int | bool | None] = Field(default_factory=dict)
    ranges: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Optional uncertainty of parameters, as ``path -> (low, high)`` *factors* applied to the
    value at that dotted path (``loader.produce: [0.7, 1.4]``). Paths in ``sources`` marked
    ``inferred`` or ``assumed`` without an entry here get the planner's defaults (±20 %,
    ±50 %); see :mod:`scenarios.predict`."""

    @model_validator(mode="before")
    @classmethod
    def _records(cls, data):
        """The records a warning's text carries (:class:`~models.warning_record.Said`) kept
        in ``warnings_ranked`` (the text itself is validated to a plain ``str``); a stored
        record that cannot be right dropped, counted in a warning
        (:func:`~models.warning_record.kept_records`)."""
        if isinstance(data, dict) and data.get("warnings_ranked") is not None:
            kept, dropped = kept_records(data["warnings_ranked"])
            if dropped:
                ws = data.get("warnings")
                data = {**data, "warnings_ranked": kept,
                        "warnings": [*(ws or []), dropped] if isinstance(ws, list | None)
                        else ws}
        ws = data.get("warnings") if isinstance(data, dict) else None
        if isinstance(ws, list) and any(isinstance(w, Said) for w in ws):
            stored = list(data.get("warnings_ranked") or [])
            data = {**data, "warnings_ranked": stored + [
                w.record.model_copy(update={"text": printable(w.record.text)})
                for w in ws if isinstance(w, Said)]}
        return data

    @field_validator("name", "traces", "warnings", mode="before")
    @classmethod
    def _printable(cls, v):
        """File names become printable UTF-8 (see :func:`simcore.errors.shown`)."""
        return printable(v)

    @field_validator("notes")
    @classmethod
    def _numeric_notes(cls, notes):
        """The notes read as numbers (:data:`NOTE_BOUNDS`) are numbers in their range."""
        for key, (lo, hi) in NOTE_BOUNDS.items():
            v = notes.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                  or not lo <= v <= hi):
                raise ValueError(f"{key!r} must be a number {lo:g} to {hi:g}, not "
                                 f"{printable(repr(v))[:40]}")
        return notes

    @model_validator(mode="before")
    @classmethod
    def _note_ranges(cls, data):
        """A range on a bounded note (:data:`NOTE_BOUNDS`) whose ends take the note out of its
        bounds dropped, counted in a warning (break19: ``[0.5, 1e6]`` on the one-thread CPU
        drew 1e6 × it, which the fix read as a model without the reading and refused the
        whole what-if with a line telling the user to re-calibrate)."""
        if not isinstance(data, dict) or not isinstance(data.get("ranges"), dict) \
                or not isinstance(data.get("notes"), dict):
            return data
        bad = []
        for key, (lo, hi) in NOTE_BOUNDS.items():
            v, r = data["notes"].get(key), data["ranges"].get(f"meta.notes.{key}")
            if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(
                    r, (list, tuple)) and len(r) == 2 and all(isinstance(x, (int, float))
                                                               for x in r):
                if lo <= v * r[0] and v * r[1] <= hi:
                    continue
                if lo <= v <= hi and 0 <= r[0] <= r[1]:
                    bad.append(f"meta.notes.{key}")
        if not bad:
            return data
        ws = data.get("warnings")
        line = (f"{len(bad)} range(s) dropped from meta.ranges ({', '.join(bad)}): their ends "
                "take the note out of its bounds (NOTE_BOUNDS), so they cannot be right")
        return {**data, "ranges": {k: r for k, r in data["ranges"].items() if k not in bad},
                "warnings": [*ws, line] if isinstance(ws, list) else ws if ws else [line]}

    @model_validator(mode="after")
    def _check_ranges(self):
        for path, (lo, hi) in self.ranges.items():
            if not (0 <= lo <= hi):
                raise ValueError(f"ranges[{path!r}] must satisfy 0 <= low <= high, got ({lo}, {hi})")
        return self


class ReplayWindow(StrictModel):
    """The captured window of a trace, kept so the calibrated baseline can be replayed step
    by step from the state the profiler found (``simulate(..., replay=True)``): the check that
    the simulator reproduces what was measured, including a transient (a device backlog, a run
    of input stalls) that a steady-state simulation of the representative step does not show.

    Attributes:
        steps: the captured step numbers, in order, without holes (``ProfilerStep#N``).
        calibrated: per step, whether it had its own fit (a complete step with the
            representative's structure); the others replay the representative's durations and
            are left out of the comparison.
        measured_step_us: per step, its measured time (µs, start to next start; the last
            step's tail is GPU-inclusive, see ``calibration.steps``).
        stream_busy_us: per stream, how long (µs) after the first step's start the stream was
            still running work launched before it (the backlog the window starts with).
        last_gpu_inclusive: the window's last step was the trace's last, so its measured time
            runs to the end of its GPU work (else to the next step's start).
    """

    steps: list[int]
    calibrated: list[bool]
    measured_step_us: list[StepMicros]
    stream_busy_us: dict[str, Micros] = Field(default_factory=dict)
    last_gpu_inclusive: bool = False

    @model_validator(mode="after")
    def _check_lengths(self):
        n = len(self.steps)
        if n == 0 or len(self.calibrated) != n or len(self.measured_step_us) != n:
            raise ValueError("replay: steps, calibrated and measured_step_us must be non-empty "
                             "and of one length")
        if any(v < 0 for v in self.measured_step_us) or any(
                v < 0 for v in self.stream_busy_us.values()):
            raise ValueError("replay: times must be >= 0")
        return self
