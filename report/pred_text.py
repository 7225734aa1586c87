"""How a prediction reads in a table: its P10 / P50 / P90 interval, a speed-up, whether that
speed-up is within the host's run-to-run noise, and the warning for a host that ran ahead of
its device (the planner's and the plan's tables)."""
from __future__ import annotations

import math
from typing import Sequence

from stepsim.models.host_drift import two_run_noise
from stepsim.models.run_share import MIN_SHARE_RUNS
from stepsim.report.tables import console, ms_text as _ms
from stepsim.scenarios.ddp_whatifs import cold_resume_added
from stepsim.scenarios.predict import Prediction

__all__ = ["interval_text", "x_text", "run_ahead_note", "host_noise", "noise_line",
           "refault_line"]


def interval_text(p: Prediction) -> str:
    """``P10 / P50 / P90`` in ms, or ``-`` without an interval."""
    if not p.has_interval:
        return "-"
    return f"{_ms(p.p10_step_us)} / {_ms(p.p50_step_us)} / {_ms(p.p90_step_us)}"


def x_text(v: float) -> str:
    """A speed-up or ceiling as ``1.25x`` (``inf``)."""
    return "inf" if math.isinf(v) else f"{v:.2f}x"


def run_ahead_note(named: Sequence[tuple[str, Prediction]]) -> None:
    """Warn about predictions whose host ran ahead of the device (a transient step time)."""
    ahead = [(n, p) for n, p in named if p.runs_ahead]
    if ahead:
        which = ", ".join(f"{n} ({_ms(p.mean_step_us)} ms; the device needs "
                          f"{_ms(p.device_floor_us)} ms)" for n, p in ahead)
        console().print(f"[yellow]warning:[/yellow] the host runs ahead of the device in: "
                        f"{which}. Nothing makes the host wait, so the simulated window saw "
                        "its transient pace, which lasts only until the launch queue fills; "
                        "the steady step is at least the device's time.")


def host_noise(model, speedup: float) -> dict | None:
    """Whether a predicted ``speedup`` (old step over new) is within the host's run-to-run
    noise as one re-measured run of each setting sees it
    (:func:`models.host_drift.two_run_noise`): ``{"host_noise_pct": P10–P90 half-width of
    one run's speed against another's, "host_noise_source", "within_host_noise": |ln
    speedup| under the half-width's log}``; None without a model or a stated range."""
    noise = two_run_noise(model) if model is not None else None
    if noise is None or not speedup > 0 or math.isinf(speedup):
        return None
    half, source = noise
    return {"host_noise_pct": 100 * half, "host_noise_source": source,
            "within_host_noise": abs(math.log(speedup)) < math.log1p(half)}


def noise_line(what: str, noise: dict, interval: tuple[float, float] | None = None) -> str:
    """The line that says ``what`` (a predicted change) cannot be told from host noise; with
    the baseline's ``interval`` (P10, P90 of one run's mean step, µs), what each of the two is
    of: the noise compares two runs' host speed, one of the sources the interval draws with
    all the others (fresh8's whatif, 2026-12-07: 141–1027 ms, 7.3x, beside "±26 %", read as
    two statements that disagree)."""
    said = (f"{what} within this host's run-to-run noise (±{noise['host_noise_pct']:.0f} %, "
            f"P10–P90 of one run's speed against another's, from "
            f"{noise['host_noise_source']}): one re-measured run of each setting cannot "
            "confirm it; compare the means of several (validate pools runs)")
    if interval is None or not interval[0] > 0:
        return said
    lo, hi = interval
    return (f"{said}; the ±{noise['host_noise_pct']:.0f} % is the host's speed alone, one "
            f"source of the interval ({_ms(lo)}–{_ms(hi)} ms, {hi / lo:.1f}x), which is of "
            "one run's mean step with every source drawn")


def refault_line(model, drawn: bool = True) -> str | None:
    """What a prediction's training step holds for page faults (:mod:`calibration.page_faults`):
    ``host.refault_share`` of the CPU µs its most re-faulting step spent faulting freed memory
    in again (each cpu op's ``refault_us``), and how far a run that re-faults every step, or
    none, lies from it; None where the model has none. Whether a run re-faults is its heap's,
    so the share is assumed (its middle the point): a user's whatif baseline sat between the
    capture's unprofiled steps and its re-faulting ones with nothing to say why. ``drawn``
    False: the prediction holds the share (the user's ``--set``), said so (fresh10's
    ``--set host.refault_share=0`` was still called "drawn 0–1")."""
    ops = [op for op in model.host.ops if op.kind == "cpu" and op.refault_us > 0] \
        if model is not None else []
    if not ops:
        return None
    most = sum(op.refault_us for op in ops)
    share, rng = model.host.refault_share, model.host.refault_share_range
    runs = model.host.refault_share_runs
    how = ("as set, held in the interval" if not drawn or rng is None or rng[1] <= rng[0]
           else f"measured over {len(runs)} runs, the mean of a validation's runs drawn from "
                "their Student t in the interval" if len(runs) >= MIN_SHARE_RUNS
           else f"assumed, drawn {rng[0]:g}–{rng[1]:g} per run in the interval")
    what = model.meta.notes.get("refault_growth") or (
        "the capture's most re-faulting step spent faulting memory in again")
    return (f"page faults: the training step holds {share:.2f} of the {_ms(most)} ms of CPU a "
            f"step {what} "
            f"(host.refault_share, {how}): a run whose heap re-faults every step pays "
            f"{_ms((1 - share) * most)} ms more a step, one that never does "
            f"{_ms(share * most)} ms less")


def cold_resume_lines(model) -> list[str]:
    """What the straggler and barrier what-ifs added to ``model`` for cold resumes
    (:func:`scenarios.ddp_whatifs.cold_resume_added`), a line per rank and phase."""
    return [f"cold resume (comm.cold_resume, the capture's probe): rank {c.rank}'s {c.phase} "
            f"+{_ms(c.added_us, 2)} ms CPU a step ({c.share:.1%} of its CPU there, after "
            f"{_ms(c.pause_us)} ms off its data)" for c in cold_resume_added(model)]
