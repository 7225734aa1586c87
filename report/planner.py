"""Rendering of the what-if planner's results: rich tables, ``--json`` documents and matplotlib
plots (the sweep curve with measured points, the ceilings). Times arrive in µs and are shown
in ms; nothing here computes a result. Validation and the ledger are
:mod:`report.validation`'s, the plan :mod:`report.plan_table`'s (both re-exported here)."""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from rich.table import Table

from stepsim.models.host_speed import factor_range, from_walls, noise_runs
from stepsim.models.run_share import MIN_SHARE_RUNS, share_p10_p90
from stepsim.report.baseline_notes import baseline_notes
from stepsim.report.figures import pyplot, save
from stepsim.report.plan_table import plan_dict, print_plan
from stepsim.report.progress import progress_bar
from stepsim.report.pred_text import interval_text as _interval, run_ahead_note as _run_ahead_note
from stepsim.report.pred_text import cold_resume_lines, host_noise, noise_line, refault_line
from stepsim.report.pred_text import x_text as _x
from stepsim.report.tables import console, json_out as _json, ms_text as _ms, rank_comm_table
from stepsim.report.tables import job_step_line, phase_table
from stepsim.report.validation import print_ledger, print_validation
from stepsim.scenarios.draws import PER_RUN_MEASURED
from stepsim.scenarios.corun_priors import corun_path, priors_caveat
from stepsim.scenarios.ddp_whatifs import cold_resume_added
from stepsim.scenarios.interval_sources import width_line
from stepsim.scenarios.predict import Prediction
from stepsim.scenarios.sweep import SweepResult
from stepsim.simcore.units import us_to_ms

__all__ = ["progress_bar", "whatif_dict", "print_whatif", "sweep_dict", "print_sweep",
           "plot_sweep", "plan_dict", "print_plan", "print_validation", "print_ledger"]


# ---------------------------------------------------------------- whatif -----------------
def whatif_dict(base: Prediction, pred: Prediction) -> dict:
    out = {"baseline": base.to_dict(), "scenario": pred.to_dict(),
           "speedup": base.mean_step_us / pred.mean_step_us}
    out.update(host_noise(pred.model, out["speedup"]) or {})
    cold = cold_resume_added(pred.model)
    if cold:
        out["cold_resume"] = [asdict(c) for c in cold]
    per = _batches(base, pred)
    if per is not None:
        out["batch_sizes"] = list(per)
        out["per_sample_speedup"] = base.mean_step_us / per[0] / (pred.mean_step_us / per[1])
    return out


def _per_sample_ms(us: float) -> str:
    """A time per sample in ms: one decimal from 1 ms up, three significant digits below (a
    fresh user's MLP printed "0.3 -> 0.2 ms" for 0.250 -> 0.226, a 1.11x speed-up)."""
    if not us > 0 or us_to_ms(us) >= 1:
        return _ms(us)
    return _ms(us, min(4, 2 - math.floor(math.log10(us_to_ms(us)))))


def _batches(base: Prediction, pred: Prediction) -> tuple[int, int] | None:
    """The batch sizes of the baseline and the scenario when they differ (None otherwise):
    then a step is not the same work, and the speed-up per sample is the one to read."""
    if base.model is None or pred.model is None:
        return None
    a, b = base.model.loader.batch_size, pred.model.loader.batch_size
    return (a, b) if a is not None and b is not None and a != b else None


def print_whatif(base: Prediction, pred: Prediction, as_json: bool = False) -> None:
    """Baseline vs scenario: mean and median step (ms), interval, bottleneck, speed-up; for a
    model of several ranks, each rank's collectives (arrival skew vs transfer) and phases."""
    if as_json:
        return _json(whatif_dict(base, pred))
    c = console()
    if _unchanged(base, pred):    # a no-op (its warning says why): one line, not the tables;
        # what the baseline holds (a loaded capture) is still said
        c.print(f"what if {pred.what}: the baseline's prediction, unchanged: mean "
                f"{_ms(base.mean_step_us)} ms, median {_ms(base.median_step_us)} ms"
                + (f", P10 / P50 / P90 {_interval(base)} ms" if base.has_interval else "")
                + f", bottleneck {base.bottleneck_label} (speed-up 1.00x)")
        for line in baseline_notes(base):
            c.print(line)
        return None
    t = Table(title=f"what if: {pred.what}", show_edge=False)
    for col in ("", "mean ms", "median step ms", "mean: P10 / P50 / P90", "bottleneck"):
        t.add_column(col, justify="left" if col in ("", "bottleneck") else "right")
    for name, p in (("baseline", base), ("scenario", pred)):
        t.add_row(name, _ms(p.mean_step_us), _ms(p.median_step_us), _interval(p),
                  p.bottleneck_label)
    c.print(t)
    x = base.mean_step_us / pred.mean_step_us
    c.print(f"speed-up {_x(x)}; bottleneck: "
            f"[bold]{base.bottleneck_label}[/bold] -> [bold]{pred.bottleneck_label}[/bold]")
    if base.host_speed:
        c.print(f"times {base.host_speed}")
    for line in baseline_notes(base):
        c.print(line)
    faults = [(n, refault_line(p.model, "host.refault_share" in p.uncertain)) for n, p in (("baseline", base), ("scenario", pred))]
    for name, line in ([("baseline and scenario", faults[0][1])] if faults[0][1] == faults[1][1]
                       else faults):
        if line:
            c.print(f"{name}: {line}")
    for line in cold_resume_lines(pred.model):
        c.print(line)
    noise = host_noise(pred.model, x)
    if noise and noise["within_host_noise"]:
        c.print(noise_line(f"the predicted change ({_x(x)}) is", noise,
                           (base.p10_step_us, base.p90_step_us) if base.has_interval else None))
    per = _batches(base, pred)
    if per is not None:
        a, b = (p.mean_step_us / n for p, n in zip((base, pred), per))
        c.print(f"per sample (batches of {per[0]} -> {per[1]}): {_per_sample_ms(a)} -> "
                f"{_per_sample_ms(b)} ms, "
                f"speed-up {_x(a / b)}")
    if base.summary.rank_comm or pred.summary.rank_comm:
        c.print(rank_comm_table([("baseline", base.summary), ("scenario", pred.summary)]))
    if base.summary.rank_phases_us and pred.summary.rank_phases_us:
        c.print(phase_table(base.summary, pred.summary))
        c.print(job_step_line(base.summary, pred.summary))
    _steps_note([("baseline", base), ("scenario", pred)])
    _uncertainty_note(pred)
    if (said := which_number([("baseline", base), ("scenario", pred)])) is not None:
        c.print(said)
    if pred.width_sources:
        c.print(f"scenario interval {width_line(pred.width_pct, pred.width_sources)}")
    _run_ahead_note([("baseline", base), ("scenario", pred)])


def _unchanged(base: Prediction, pred: Prediction) -> bool:
    """Whether the scenario's prediction is the baseline's to the µs: its mean, median, interval
    and bottleneck (a what-if that changes nothing simulates the same steps with the same
    seed; fresh13's ``--set loader.pin_memory=true`` on a CPU model printed both tables, the
    noise paragraph and the notes for a 1.00x no-op)."""
    return (base.mean_step_us == pred.mean_step_us
            and base.median_step_us == pred.median_step_us
            and (base.p10_step_us, base.p90_step_us) == (pred.p10_step_us, pred.p90_step_us)
            and base.bottleneck_label == pred.bottleneck_label)


def _steps_note(named: Sequence[tuple[str, Prediction]]) -> None:
    """How many steps each prediction simulated and how well they pin its mean."""
    for name, p in named:
        if p.count is not None:
            console().print(f"{name}: {p.count.describe()}")


def _uncertainty_note(p: Prediction) -> None:
    c = console()
    if p.has_interval and not p.draws:
        c.print("interval: the model has no uncertain parameter and no sampled duration, so "
                "it is the point estimate")
    if p.draws:
        varied = ", ".join(_range_text(p, k, lo, hi) for k, (lo, hi) in p.uncertain.items())
        c.print(f"interval (P10-P90 of {p.scope}): {p.draws} Monte Carlo draws over sampled "
                "durations"
                + (f" and {varied}" if varied else " (no inferred or assumed parameters)")
                + (f"; each draw simulated {p.draw_steps} steps (its own standard error "
                   f"{100 * p.draw_std_error_us / p.mean_step_us:.1f} % of the mean, median "
                   "over the draws)" if p.draw_std_error_us is not None and p.mean_step_us > 0
                   else ""))
    if p.draws and p.skipped:
        c.print(f"[dim]{not_varied_line(p.skipped)}[/dim]")


def which_number(named: Sequence[tuple[str, Prediction]]) -> str | None:
    """Which of the predictions' numbers to believe, in one line (fresh6, 2026-12-06: the
    baseline's point 293.4 ms sat near its P90, 303.4, with no word on which to take): the
    P10–P90 for a run, the P50 its middle; the mean is the model at each parameter's point
    value, which the draws over the unmeasured ones need not centre on. None without draws."""
    offs = [f"{name}'s {100 * (p.mean_step_us / p.p50_step_us - 1):+.1f} %" for name, p in named
            if p.draws and p.p50_step_us and p.p10_step_us is not None]
    if not offs:
        return None
    return ("which to believe: for a re-measured run's mean step, P10-P90 (meant to hold 8 of "
            "10 runs; the ledger scores it) and P50 its middle; 'mean ms' is the model at each "
            f"parameter's point value, off the P50 here by {', '.join(offs)}")


def _range_text(p: Prediction, path: str, lo: float, hi: float) -> str:
    """One varied parameter's range as the draws take it: the host's speed from measured runs
    as the P10–P90 of their predictive (:func:`models.host_speed.factor_range`), not the
    stated prior beside it."""
    # the host's runs against its own range only: another path's range beside them (the
    # interference prior's 0–0.16) is no speed range, and prior_log_sd refused it
    runs = noise_runs(p.model.host, (lo, hi)) if p.model is not None and \
        path == "host.cpu_scale" else []
    if len(runs) >= 2:
        a, b = factor_range(runs, (lo, hi), p.runs)
        walls = from_walls(p.model.host, runs)
        return (f"{path} x[{a:.3g}, {b:.3g}] (P10-P90 from {len(runs)} measured runs"
                + (", their wall time: it spreads wider than their CPU time" if walls else "")
                + ")")
    shares = getattr(p.model.host, PER_RUN_MEASURED[path], []) if p.model is not None and \
        path in PER_RUN_MEASURED else []
    if len(shares) >= MIN_SHARE_RUNS:    # drawn from the runs, not from the range beside them
        a, b = share_p10_p90(shares, max(p.runs, 1))
        return (f"{path} [{a:.3g}, {b:.3g}] (P10-P90 of {max(p.runs, 1)} run(s)' mean, the "
                f"Student-t predictive of {len(shares)} measured runs)")
    return f"{path} x[{lo:g}, {hi:g}]"


ZERO_PREFIX = "0: "
"""How :func:`scenarios.draws.uncertain_params` begins the reason of a value at 0."""


UNREAD_PREFIX = "not read here: "
"""How :func:`scenarios.draws.uncertain_params` begins the reason of a value nothing reads."""


def not_varied_line(skipped: dict[str, str]) -> str:
    """The uncertain parameters an interval could not vary, in one line: those at 0 counted
    (a factor range varies nothing there; ``skipped`` in ``--json`` names each), those nothing
    in the setting reads named (their reasons in ``--json``), each other with its reason."""
    zero = [k for k, why in skipped.items() if why.startswith(ZERO_PREFIX)]
    unread = [k for k, why in skipped.items() if why.startswith(UNREAD_PREFIX)]
    rest = [f"{k} ({why})" for k, why in skipped.items()
            if not why.startswith((ZERO_PREFIX, UNREAD_PREFIX))]
    parts = ([f"{len(zero)} inferred or assumed value(s) at 0, which no factor varies (named "
              "in skipped in --json)"] if zero else []) + (
        [f"{len(unread)} value(s) nothing in this setting reads: {', '.join(unread)}"]
        if unread else []) + rest
    return "not varied: " + "; ".join(parts)


# ---------------------------------------------------------------- sweep ------------------
def sweep_dict(r: SweepResult) -> dict:
    first = r.points[0].prediction.mean_step_us
    per = _per_sample(r)
    return {"grid": r.grid, "base": r.base,
            "points": [{"values": p.values, **p.prediction.to_dict(),
                        "speedup_vs_first": first / p.prediction.mean_step_us,
                        **({"ms_per_sample": us_to_ms(per[i])} if per else {})}
                       for i, p in enumerate(r.points)],
            "knees": {k: {**asdict(v), "step_ms": us_to_ms(v.step_us),
                          "best_step_ms": us_to_ms(v.best_step_us)} for k, v in r.knees.items()}}


def _per_sample(r: SweepResult) -> list[float] | None:
    """Each point's mean step per sample (µs) when the points' batch sizes differ (a sweep of
    ``loader.batch_size``: a step is then not the same work); None otherwise."""
    sizes = [pt.prediction.model.loader.batch_size if pt.prediction.model is not None else None
             for pt in r.points]
    if None in sizes or len(set(sizes)) < 2:
        return None
    return [pt.prediction.mean_step_us / n for pt, n in zip(r.points, sizes)]


def _setting(pt, path: str) -> str:
    """A sweep point's value of ``path`` as the table shows it: ``-`` (not applicable) for a
    prefetch_factor at num_workers=0, which PyTorch's DataLoader refuses (the loader there
    has no prefetch queue)."""
    m = pt.prediction.model
    if path == "loader.prefetch_factor" and m is not None and m.loader.num_workers == 0:
        return "-"
    return str(pt.values[path])


def print_sweep(r: SweepResult, as_json: bool = False) -> None:
    """One row per grid point, then the knee of each parameter and why."""
    if as_json:
        return _json(sweep_dict(r))
    c = console()
    t = Table(title=f"sweep ({r.base})", show_edge=False)
    for p in r.grid:
        t.add_column(p, justify="right")
    # the interval column only when the points have intervals (``--draws``)
    intervals = any(pt.prediction.has_interval for pt in r.points)
    per = _per_sample(r)
    cols = ("mean ms", "median ms") + (("P10 / P50 / P90 ms",) if intervals else ()) + (
        ("ms / sample",) if per else ()) + ("vs first", "bottleneck")
    for col in cols:
        t.add_column(col, justify="left" if col == "bottleneck" else "right")
    first = r.points[0].prediction.mean_step_us
    for i, pt in enumerate(r.points):
        p = pt.prediction
        t.add_row(*(_setting(pt, k) for k in r.grid), _ms(p.mean_step_us),
                  _ms(p.median_step_us), *((_interval(p),) if intervals else ()),
                  *((f"{per[i] / 1e3:.2f}",) if per else ()),
                  _x(first / p.mean_step_us), p.bottleneck_label)
    c.print(t)
    for k in r.knees.values():
        c.print(f"knee of {k.path}: [bold]{k.value}[/bold] ({_ms(k.step_us)} ms; best "
                f"{k.best_value} at {_ms(k.best_step_us)} ms"
                + (f" ({', '.join(map(str, k.best_ties))} the same)" if k.best_ties else "")
                + f"): {k.reason}")
        caveat = priors_caveat(r.points[0].prediction.model) if corun_path(k.path) else ""
        if caveat:
            c.print(f"  {caveat}")
    _run_ahead_note([(", ".join(f"{k}={v}" for k, v in pt.values.items()), pt.prediction)
                     for pt in r.points])


def plot_sweep(r: SweepResult, path: str | Path,
               measured: dict[Any, Sequence[float]] | None = None) -> None:
    """The sweep curve against the first parameter (one line per combination of the others),
    P10–P90 band when the points have intervals, the knee marked, and measured step times
    (µs, per value of the first parameter) as points with their mean."""
    plt = pyplot()
    x_path = next(iter(r.grid))
    others = [p for p in r.grid if p != x_path]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    groups: dict[tuple, list] = {}
    for pt in r.points:
        groups.setdefault(tuple(pt.values[o] for o in others), []).append(pt)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r.grid[x_path])
    pos = {v: (v if numeric else i) for i, v in enumerate(r.grid[x_path])}
    for key, pts in groups.items():
        xs = [pos[p.values[x_path]] for p in pts]
        name = ", ".join(f"{o}={v}" for o, v in zip(others, key)) or "predicted"
        ax.plot(xs, [us_to_ms(p.prediction.mean_step_us) for p in pts], "o-", label=name)
        if all(p.prediction.has_interval for p in pts):
            ax.fill_between(xs, [us_to_ms(p.prediction.p10_step_us) for p in pts],
                            [us_to_ms(p.prediction.p90_step_us) for p in pts], alpha=0.25,
                            label=f"{name}: P10–P90")
    knee = r.knees.get(x_path)
    if knee is not None:
        ax.axvline(pos[knee.value], color="grey", ls="--", lw=1)
        ax.annotate(f"knee: {knee.value}", (pos[knee.value], us_to_ms(knee.step_us)),
                    textcoords="offset points", xytext=(6, 8), fontsize=8)
    shown = [(v, steps) for v, steps in (measured or {}).items() if v in pos and steps]
    for i, (v, steps) in enumerate(shown):
        ax.scatter([pos[v]] * len(steps), [us_to_ms(s) for s in steps], marker="x",
                   color="black", s=12, alpha=0.4)
        ax.scatter([pos[v]], [us_to_ms(sum(steps) / len(steps))], marker="D", color="black",
                   s=30, label="measured (mean)" if i == 0 else None)
    if not numeric or all(isinstance(v, int) for v in pos):   # no 1.5 workers on the axis
        ax.set_xticks(list(pos.values()), [str(v) for v in pos])
    ax.set_xlabel(x_path)
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save(fig, path)
