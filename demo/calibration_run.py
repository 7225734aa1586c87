"""Which of its calibration setting's runs the plain demo calibrates from: the least loaded.

The demo captures its calibration setting 5-8 times (the capture and its replicates, from which
the host's run-to-run speed is measured). The model's durations are those of one run's profiled
window, so a window that ran under outside load moves every prediction by that load, which no
interval covers. The demo used to calibrate from the first run whatever its load: a new user's
demo (2026-12-06 13:54) calibrated on a run whose threads held 57 % of the core time they could
have held, while its 5th, 7th and 8th runs held 99-100 %, and scored 0 of 4 inside (+42 to
+77 %).

The measure is calibration's own (:mod:`calibration.outside_load`): the share ``held`` of the
core time the run's runnable threads could have held over the profiled window, from the
sidecar's CPU times and run-queue waits. The demo takes the earliest run whose ``held`` is at
least :data:`QUIET_HELD`, else the run with the highest ``held`` (a run whose sidecar cannot
tell counts below every measured one), and the other runs are its replicates. Among quiet runs
``held`` does not rank them (see :data:`QUIET_HELD`), and the run's host speed does not move the
predictions: the replicates set ``host.cpu_scale`` to every run's centre
(:func:`calibration.host_noise.apply_replicates`), whichever is the capture.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.calibration.run_load import load_over
from stepsim.calibration.sidecar import load_sidecar

QUIET_HELD = 0.98
"""``held`` (calibration's share of the core time a run's threads could have held, 1 quiet) at
or above which a run counts as quiet, so that the earliest such run is taken (measured: the 56
calibration-setting runs of the 7 plain demos of 2026-12-06 08:51-15:26 read 0.538-0.968 (12
runs) or 0.984-1.003 (44; past 1 the reading's rounding), nothing between; assumed bound in
that gap)."""


def choose_run(held: list[float | None]) -> int:
    """The index of the run to calibrate from, given each run's ``held`` (None: not measured):
    the first at least :data:`QUIET_HELD`, else the highest, else the first."""
    quiet = [i for i, h in enumerate(held) if h is not None and h >= QUIET_HELD]
    if quiet:
        return quiet[0]
    known = [i for i, h in enumerate(held) if h is not None]
    return max(known, key=lambda i: (held[i], -i)) if known else 0


def why_chosen(held: list[float | None], k: int, names: list[str]) -> str:
    """The demo's line on the chosen run ``k`` of the runs named ``names`` and why."""
    def pct(h):
        return "?" if h is None else f"{100 * min(h, 1.0):.0f} %"

    n = len(held)
    which = f"run {k + 1} of {n} ({names[k]})"
    h = held[k]
    if h is None:
        why = "no run's sidecar could tell its outside load"
    elif h >= QUIET_HELD:
        why = (f"its threads held {pct(h)} of the core time they could have held in its "
               f"profiled window, the first run at {100 * QUIET_HELD:.0f} % or more (quiet)")
    else:
        why = (f"its threads held {pct(h)} of the core time they could have held in its "
               f"profiled window, the most of any run, but less than {100 * QUIET_HELD:.0f} %: "
               "every run ran under outside load, and the model carries it")
    return (f"calibrating from {which}, the least loaded: {why}; each run's share "
            + ", ".join(pct(v) for v in held) + "; the others are its replicates")


def calibration_run(runs: list[Path]) -> tuple[int, list[float | None], str]:
    """``(index, each run's held, the line saying why)`` for the runs' folders ``runs``
    (each with ``sidecar.json``)."""
    held = []
    for d in runs:
        load = load_over(load_sidecar(d / "sidecar.json"))
        held.append(load.held if load is not None and load.held > 0 else None)
    k = choose_run(held)
    return k, held, why_chosen(held, k, [d.name for d in runs])
