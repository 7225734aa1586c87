"""The Amdahl ceilings' output: their table, JSON and picture (``stepsim ceiling``, the report)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rich.table import Table

from stepsim.report.baseline_notes import baseline_notes
from stepsim.report.figures import pyplot, save
from stepsim.report.pred_text import run_ahead_note as _run_ahead_note, x_text as _x
from stepsim.report.tables import console, json_out as _json, ms_text as _ms
from stepsim.scenarios.ceiling import CeilingReport
from stepsim.simcore.units import us_to_ms

__all__ = ["ceiling_dict", "print_ceilings", "plot_ceilings"]

_FLAT = 0.005
"""Ceilings below 1 + this are listed on one line rather than in the table."""


def ceiling_dict(r: CeilingReport) -> dict:
    return {"baseline": r.baseline.to_dict(),
            "components": [{**asdict(x), "free_step_ms": us_to_ms(x.free_step_us)}
                           for x in r.rows],
            "kernel_sum_ms": us_to_ms(r.kernel_sum_us), "kernel_ratio": r.kernel_ratio,
            "kernel_subtracted": r.kernel_subtracted,
            "kernel_free_step_ms": None if r.kernel_free_step_us is None
            else us_to_ms(r.kernel_free_step_us),
            "kernel_ceiling": r.kernel_ceiling}


def print_ceilings(r: CeilingReport, as_json: bool = False) -> None:
    """Components ranked by simulated ceiling, with the subtracted one beside, and the kernel
    line."""
    if as_json:
        return _json(ceiling_dict(r))
    c = console()
    b = r.baseline
    what = "" if b.what == "baseline" else f" ({b.what})"
    c.print(f"baseline: mean step {_ms(b.mean_step_us)} ms{what}; bottleneck "
            f"[bold]{b.bottleneck_label}[/bold]")
    for line in baseline_notes(b):
        c.print(line)
    t = Table(title="Amdahl ceilings (simulated with the component free)", show_edge=False)
    for col in ("component", "step if free ms", "ceiling", "share of step", "subtracted"):
        t.add_column(col, justify="left" if col == "component" else "right")
    flat = [x for x in r.rows if x.ceiling < 1 + _FLAT]
    for x in r.rows:
        if x not in flat:
            t.add_row(x.label, _ms(x.free_step_us), _x(x.ceiling), f"{100 * x.share:.1f}%",
                      _x(x.subtracted))
    c.print(t)
    if flat:
        c.print(f"no gain (< {_FLAT:.1%}) if free: {', '.join(x.label for x in flat)}")
    _run_ahead_note([("baseline", b)])
    if r.kernel_ceiling is None:
        return
    line = (f"kernel-sum / step-wall = {_ms(r.kernel_sum_us)} / {_ms(b.mean_step_us)} ms = "
            f"{r.kernel_ratio:.2f}: any kernel work can give at most {_x(r.kernel_subtracted)}")
    c.print(line + f" (simulated with every kernel free: {_x(r.kernel_ceiling)})")


def plot_ceilings(r: CeilingReport, path: str | Path) -> None:
    """Horizontal bars of the simulated ceilings, subtracted ceilings as ticks; components
    with no gain (< 0.5 %) if free are named in one line beneath, not drawn as empty bars."""
    plt = pyplot()
    flat = [x for x in r.rows if x.ceiling < 1 + _FLAT and x.subtracted < 1 + _FLAT]
    rows = [x for x in reversed(r.rows) if x not in flat] or list(reversed(r.rows[:1]))
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    for y, x in enumerate(rows):
        ax.text(min(max(x.ceiling, x.subtracted), 10) + 0.02, y,
                f" simulated {x.ceiling:.2f}x (step {x.free_step_us / 1e3:.1f} ms)", va="center",
                fontsize=7)
    ys = range(len(rows))
    ax.barh(ys, [min(x.ceiling, 10) - 1 for x in rows], left=1, color="tab:blue",
            label="simulated")
    ax.scatter([min(x.subtracted, 10) for x in rows], ys, marker="|", s=200, color="tab:red",
               label="subtracted (1 / (1 - share))")
    ax.set_yticks(list(ys), [x.label for x in rows], fontsize=8)
    ax.axvline(1, color="grey", lw=1)
    ax.set_xlim(left=0.98)
    end = max(min(max(x.ceiling, x.subtracted), 10) for x in rows)
    ax.set_xlim(right=end + (end - 0.98) * 0.6)   # room for the value written past each bar
    ax.set_xlabel("step-time ceiling (x, from 1 = no gain; capped at 10)")
    ax.set_ylim(-1.5, len(rows) - 0.5)   # an empty row at the bottom holds the legend
    ax.legend(fontsize=8, loc="lower right", ncol=2)
    ax.set_title(f"baseline {r.baseline.mean_step_us / 1e3:.1f} ms: the step if each component "
                 "were free", fontsize=9, loc="left")
    if flat:
        names = ", ".join(x.label for x in flat)
        fig.text(0.01, 0.0, "no gain if free: " + (names if len(names) < 150 else
                                                     names[:148] + "…"),
                 fontsize=7, ha="left", va="top", wrap=True)
    fig.tight_layout()
    save(fig, path)
