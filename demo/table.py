"""The plain demo's table: each ``num_workers`` setting's prediction against its re-measured
runs, and the footnote that says what its marks and columns mean."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from stepsim.models.load_bound import LOAD_WARN
from stepsim.scenarios.caveats import input_caveats


def print_table(console: Console, rows: list[dict], cores: int, speed: str = "") -> None:
    """Print the table of ``rows`` (:func:`demo.run._validated_row`'s) and its footnote;
    ``speed``: the host speed the predictions assume, in words."""
    t = Table(title=f"num_workers: predicted vs measured step time, ms ({cores} cores)")
    for col in ("workers", "predicted", "P10–P90", "measured mean (median)", "spread",
                "error", "in P10–P90", "CPU time ×", "bottleneck pred. / obs."):
        t.add_column(col, justify="left" if col.startswith("bottleneck") else "right")
    for r in rows:
        band = (f"{r['predicted_p10_ms']:.0f}–{r['predicted_p90_ms']:.0f}"
                if r["predicted_p10_ms"] is not None else "–")
        spread = f"{r['spread_pct']:.0f} %" if r["spread_pct"] is not None else "–"
        inside = "†" if r["inside_spread"] else ""
        t.add_row(f"{r['num_workers']}{' *' if r['calibration'] else ''}",
                  f"{r['predicted_mean_ms']:.1f}", band,
                  f"{r['measured_mean_ms']:.1f} ({r['measured_median_ms']:.1f})", spread,
                  f"{r['error_pct']:+.1f} %{inside}{'‡' if r['load_set_apart'] else ''}",
                  "–" if r["inside"] is None else ("yes" if r["inside"] else "no"),
                  f"{r['host_cpu_time_x']:.2f}",
                  f"{r['bottleneck_predicted']} / {r['bottleneck_observed']}")
    console.print(t)
    dagger = ("† the prediction lies inside the range of the repeated runs' means (the error "
              "cannot be told from run-to-run noise).  " if any(r["inside_spread"] for r in rows)
              else "")
    loaded = [r for r in rows if r["load_set_apart"]]
    load = ("‡ re-measured under outside load (up to "
            f"{1 + max(r['outside_load_slowdown'] for r in loaded):.1f}x slower than the machine "
            "alone) and slower than predicted: the load could explain the error, so the row is "
            "left out of the score.  " if loaded else "")
    console.print("* calibration setting (in-sample): its row checks the calibrated baseline "
                  "and is left out of the score.  "
                  + (f"Predicted {speed}.  " if speed else "")
                  + dagger + load + "measured mean (median): of every scored step of the "
                  "setting's runs, pooled.  spread: the runs' mean steps, largest less smallest, "
                  "over their mean.  error: (predicted − measured mean) / measured mean, so + is "
                  "predicted slower than measured.  "
                  "P10–P90: an 80 % interval (8 in 10 settings' measured means should fall "
                  "inside it) of the pooled mean step of the setting's runs, as "
                  "`stepsim validate` gives it (`whatif`'s is of one run's mean step), on a "
                  "machine without outside load past "
                  f"{100 * LOAD_WARN:.0f} % (a run under it is scored apart, ‡).  "
                  "CPU time ×: the runs' CPU time per batch and step (identical "
                  "work) over the calibration capture's (the host's speed, plus co-run "
                  "interference).  Bottlenecks: input = the DataLoader, host_compute = the training "
                  "step's CPU work, cpu_cores = workers and training step share too few cores.")


def kept_note(rows: list[dict], n_kept: int) -> str:
    """The note on the ``n_kept`` settings re-measured under outside load yet faster than
    predicted (kept in the score), naming each setting of ``rows`` that is so and its runs'
    slowdown: which rows the note means is otherwise left to the reader."""
    kept = [f"num_workers={r['num_workers']}: up to {1 + r['outside_load_slowdown']:.1f}x "
            "slower than the machine alone" for r in rows
            if not r["calibration"] and not r["load_set_apart"]
            and (r["outside_load_slowdown"] or 0) > LOAD_WARN]
    return (f"{n_kept} setting(s) were re-measured under outside load yet faster than "
            "predicted" + (f" ({'; '.join(kept)})" if kept else "") + ": kept in the score "
            "below (the load only slows a run, so it cannot explain that error)")


def under_table(model, notes: list[str]) -> list[tuple[str, str]]:
    """The lines said right under the table, ``(kind, text)``: each setting's note on its
    runs' load (``notes``), then what is wrong with the calibration capture itself
    (:func:`scenarios.caveats.input_caveats`, which every other verb says before its result):
    a capture under outside load moves every row by its slowdown, which no interval covers,
    and the table alone showed every row out of its interval with no word why (a new user's
    demo, 2026-12-06: capture at 57 % of its cores, rows +42 to +77 %)."""
    return [("note", w) for w in notes] + [("warning", w) for w in input_caveats(model)]
