"""The plan's rendering: its ``--json`` document and its table (times in µs, shown in ms).

Each row names the step's *bottleneck* once, as ``whatif`` and ``simulate`` name it (issue 10,
one answer per question), and what comes *next*: its *largest ceiling*
(:mod:`scenarios.ceiling`), the component whose removal would shorten the step most, which
the next move relieves first ("same" where it is the bottleneck). A move's fix names the
component it relieves only where that is not the row above's next (the chain went down the
ranking to a component an allowed fix relieves)."""
from __future__ import annotations

from rich.table import Table

from stepsim.report.pred_text import interval_text as _interval, run_ahead_note as _run_ahead_note
from stepsim.report.pred_text import host_noise, noise_line, x_text as _x
from stepsim.report.tables import console, json_out as _json, ms_text as _ms
from stepsim.scenarios.plan import Plan
from stepsim.simcore.units import us_to_ms

__all__ = ["PLAN_TITLE", "PLAN_COLUMNS", "plan_dict", "plan_rows", "print_plan"]

PLAN_TITLE = "plan (greedy: each move relieves the largest ceiling an allowed fix can)"
PLAN_COLUMNS = ("#", "fix", "step ms", "P10 / P50 / P90 ms", "speed-up", "bottleneck",
                "next: largest ceiling")
"""The plan's table: each move's fix (``-> component`` where it relieves another than the row
above's next); ``bottleneck`` the step's as ``whatif`` and ``simulate`` name it
(:func:`models.bottleneck.name_bottleneck`); ``next: largest ceiling`` the component whose
removal would shorten the step most (:mod:`scenarios.ceiling`), with that ceiling, the one
the next move relieves first ("same" where it is the bottleneck)."""


def _ceiling_keys(row, prefix: str = "") -> dict:
    """A ceiling row as flat fields: ``largest_ceiling_component`` (its key), ``_label`` and
    ``largest_ceiling`` (the speed-up if it were free), each None without one."""
    return {f"{prefix}largest_ceiling_component": row.key if row else None,
            f"{prefix}largest_ceiling_label": row.label if row else None,
            f"{prefix}largest_ceiling": row.ceiling if row else None}


def plan_dict(p: Plan) -> dict:
    """The chain as a document (ms): ``first_bottleneck`` and each move's ``next_bottleneck``
    are the bottleneck as ``whatif`` names it; ``*largest_ceiling*`` the top ceiling."""
    b = p.baseline
    noise = [host_noise(m.prediction.model, m.speedup) for m in p.moves]
    return {"baseline": b.to_dict(),
            "first_bottleneck": b.bottleneck, "first_bottleneck_label": b.bottleneck_label,
            **_ceiling_keys(p.largest_ceiling, "first_"),
            "moves": [{"fix": m.op.describe(), "relieves": m.relieves.key,
                       "relieves_label": m.relieves.label, "before_ms": us_to_ms(m.before_step_us),
                       **m.prediction.to_dict(), "speedup": m.speedup,
                       "next_bottleneck": m.prediction.bottleneck,
                       "next_label": m.prediction.bottleneck_label,
                       **_ceiling_keys(m.largest_ceiling),
                       "within_host_noise": n["within_host_noise"] if n else None,
                       "enables": m.enables,
                       "tried": [{"op": d, "mean_step_ms": None if s is None else us_to_ms(s)}
                                 for d, s in m.tried]} for m, n in zip(p.moves, noise)],
            "host_noise_pct": next((n["host_noise_pct"] for n in noise if n), None),
            "speedup": p.speedup, "stop": p.stop, "category_share": p.category_share}


def plan_rows(p: Plan, arrow: str = "->", x=_x) -> list[tuple[str, ...]]:
    """The cells of the plan's table (:data:`PLAN_COLUMNS`), baseline first; each component
    named once in a row (the text table's and the HTML report's)."""
    def nxt(row, neck: str) -> str:
        if row is None:
            return "-"
        return f"{'same' if row.key == neck else row.label} ({x(row.ceiling)})"

    b = p.baseline
    rows = [("0", "(baseline)", _ms(b.mean_step_us), _interval(b), "", b.bottleneck_label,
             nxt(p.largest_ceiling, b.bottleneck))]
    above = p.largest_ceiling
    for i, m in enumerate(p.moves, 1):
        fix = m.op.describe().removeprefix("fix ")
        if above is None or m.relieves.key != above.key:
            fix += f" {arrow} {m.relieves.label}"
        if m.enables:
            fix += f" (for move {i + 1})"
        rows.append((str(i), fix, _ms(m.prediction.mean_step_us), _interval(m.prediction),
                     x(m.speedup), m.prediction.bottleneck_label,
                     nxt(m.largest_ceiling, m.prediction.bottleneck)))
        above = m.largest_ceiling
    return rows


def print_plan(p: Plan, as_json: bool = False) -> None:
    """The chain: each move, the step after it, the component it relieved, the bottleneck
    after it and the component with the largest ceiling after it."""
    if as_json:
        return _json(plan_dict(p))
    c = console()
    b = p.baseline
    t = Table(title=PLAN_TITLE, show_edge=False)
    # the interval column only when the plan drew intervals (``--draws``)
    keep = [b.has_interval or col != "P10 / P50 / P90 ms" for col in PLAN_COLUMNS]
    rows = [[cell for cell, k in zip(row, keep) if k] for row in plan_rows(p)]
    for i, col in enumerate(c for c, k in zip(PLAN_COLUMNS, keep) if k):
        if col in ("#", "step ms", "speed-up"):     # numbers: whole
            t.add_column(col, justify="right", no_wrap=True,
                         min_width=max(len(r[i]) for r in rows))
        elif col.startswith("P10"):    # on one line where the terminal has room; else it
            wide = max(len(r[i]) for r in rows)       # wraps between numbers, never in one
            t.add_column(col, justify="right", min_width=wide if c.width >= 100 else 13)
        else:
            t.add_column(col, overflow="fold", justify="left")
    for row in rows:
        t.add_row(*row)
    c.print(t)
    n = len(p.moves)
    c.print(f"{_ms(b.mean_step_us)} ms -> {_ms(p.final_prediction.mean_step_us)} ms "
            f"([bold]{_x(p.speedup)}[/bold]) in {n} move{'s' if n != 1 else ''}")
    mix = ", ".join(f"{k} {100 * v:.0f}%" for k, v in
                    sorted(p.category_share.items(), key=lambda kv: -kv[1]) if v >= 0.01)
    if mix:
        c.print(f"final step, device time by category as a share of the step (streams run "
                f"side by side, so the shares can add up past 100%): {mix}")
    for i, m in enumerate(p.moves, 1):
        if m.enables and i < n:
            c.print(f"move {i} gains {_x(m.speedup)} alone: it is taken for move {i + 1}, "
                    f"{m.enables}, which gains only after it "
                    f"({_x(m.before_step_us / p.moves[i].prediction.mean_step_us)} together)")
    c.print(f"stop: {p.stop}")
    noise = [(i, host_noise(m.prediction.model, m.speedup)) for i, m in enumerate(p.moves, 1)]
    within = [(i, n) for i, n in noise if n and n["within_host_noise"]]
    if within:
        c.print(noise_line(f"the predicted change of move{'s' if len(within) > 1 else ''} "
                           f"{', '.join(str(i) for i, _ in within)} (its speed-up over the step "
                           f"before it) {'are each' if len(within) > 1 else 'is'}", within[0][1],
                           (b.p10_step_us, b.p90_step_us) if b.has_interval else None))
    _run_ahead_note([("baseline", b)] + [(f"move {i}", m.prediction)
                                         for i, m in enumerate(p.moves, 1)])
