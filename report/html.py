"""One self-contained HTML report: every picture embedded as base64 PNG, the style inline, no
network, so the file opens anywhere (a laptop, a mail attachment, offline). One inline script
only counts the decoded pictures (for the browser test); the page reads the same without it.

Sections, in order, each an ``<section id=...>`` named in the page's contents bar:
``baseline`` (step time, bottleneck, critical path, lanes measured above simulated, the
prefetch queue), ``whatifs`` (each against the baseline, with both lanes), ``ceilings``,
``plan``, ``validation`` (the ledger and its sweep) and ``caveats``. Times arrive in µs and
are shown in ms; nothing here computes a result.
"""
from __future__ import annotations

import base64
import html
import math
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from stepsim.models.metrics import label
from stepsim.report.document import ReportData
from stepsim.report.plan_table import PLAN_COLUMNS, PLAN_TITLE, plan_rows
from stepsim.report.validation import (LEDGER_ROWS, apart_legend, apart_mark, hidden_note,
                                       share_text)
from stepsim.scenarios.predict import Prediction
from stepsim.simcore.atomic import write_atomic
from stepsim.simcore.units import us_to_ms

__all__ = ["render_html", "write_report", "SECTIONS"]

SECTIONS = (("baseline", "Baseline"), ("whatifs", "What-ifs"), ("ceilings", "Ceilings"),
            ("plan", "Plan"), ("validation", "Validation"), ("caveats", "Caveats"))
"""(id, heading) of every section, in page order; a test checks the browser shows each."""

_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
header{background:#263238;color:#fff;padding:14px 24px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#cfd8dc}
nav{position:sticky;top:0;background:#eceff1;padding:8px 24px;border-bottom:1px solid #cfd8dc;
z-index:1}
nav a{margin-right:18px;color:#1565c0;text-decoration:none;font-weight:600}
main{max-width:1180px;margin:0 auto;padding:8px 24px 40px}
section{background:#fff;border:1px solid #e0e0e0;border-radius:6px;padding:6px 20px 16px;
margin:18px 0}
h2{border-bottom:2px solid #90a4ae;padding-bottom:4px} h3{margin-bottom:6px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:14px}
th,td{border-bottom:1px solid #e0e0e0;padding:4px 10px;text-align:right;vertical-align:top}
th{background:#f5f5f5} td:first-child,th:first-child{text-align:left}
td.text,th.text{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eee;margin:6px 0}
.key{font-size:22px;font-weight:700} .muted{color:#666;font-size:13px}
li{margin:3px 0}
"""


_CHECK = ("<script>addEventListener('load',function(){var i=document.images,n=0;"
          "for(var k=0;k<i.length;k++){if(i[k].complete&&i[k].naturalWidth>0)n++;}"
          "document.body.setAttribute('data-images',n+'/'+i.length);});</script>")
"""The page's only script, offline: once loaded it writes ``decoded/total`` images into
``body[data-images]``, which the browser test reads back."""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _ms(us: float | None, nd: int = 1) -> str:
    return "–" if us is None else f"{us_to_ms(us):.{nd}f}"


def _x(v: float | None) -> str:
    return "–" if v is None else "∞" if math.isinf(v) else f"{v:.2f}×"


def _table(head: Sequence[str], rows: Iterable[Sequence], text_cols: Sequence[int] = (0,)) -> str:
    out = ["<table><thead><tr>", *(f"<th class='text'>{_e(h)}</th>" if i in text_cols else
                                   f"<th>{_e(h)}</th>" for i, h in enumerate(head)),
           "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(
            f"<td class='text'>{_e(v)}</td>" if i in text_cols else f"<td>{_e(v)}</td>"
            for i, v in enumerate(r)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _img(png: bytes, alt: str) -> str:
    if not png:
        return ""
    return (f"<figure><img alt='{_e(alt)}' src='data:image/png;base64,"
            f"{base64.b64encode(png).decode()}'><figcaption class='muted'>{_e(alt)}"
            "</figcaption></figure>")


def _interval(p: Prediction) -> str:
    if not p.has_interval:
        return "–"
    return f"{_ms(p.p10_step_us)} / {_ms(p.p50_step_us)} / {_ms(p.p90_step_us)}"


def _baseline(d: ReportData) -> str:
    b, s = d.baseline, d.baseline.summary
    measured = d.model.meta.measured_step_us
    meas = (f"; measured {us_to_ms(sum(measured) / len(measured)):.1f} ms mean over "
            f"{len(measured)} captured steps" if measured else "")
    parts = [f"<p><span class='key'>{_ms(b.mean_step_us)} ms</span> mean simulated step"
             f" (median {_ms(b.median_step_us)} ms; P10 / P50 / P90 of the mean "
             f"{_interval(b)} ms){_e(meas)}.</p>",
             f"<p>Bottleneck: <b>{_e(b.bottleneck_label)}</b>.</p>"]
    step = sum(s.critical_path_us.values()) or s.mean_step_us
    rows = [(label(k), _ms(v, 2), f"{100 * v / step:.1f}" if step else "–",
             _ms(s.gap_us[k], 2) if k in s.gap_us else "", _x(s.ceilings.get(k)))
            for k, v in sorted(s.critical_path_us.items(), key=lambda kv: -kv[1])
            if step and v >= 0.001 * step]
    parts.append("<h3>Critical path</h3>" + _table(
        ("component", "ms / step", "% of step", "idle (gap) ms", "Amdahl bound"), rows))
    title = (f"Lanes: {d.measured_title} (above) against the simulated baseline, on one time "
             "axis" if d.measured_title else "Lanes of the simulated baseline")
    parts.append(f"<h3>{_e(title)}</h3>" + _img(d.lanes_png, title))
    lanes = _table(("lane", "busy %"), ((ln, f"{100 * f:.1f}") for ln, f in s.lane_busy.items()))
    comm = ""
    if s.comm_busy_us:
        comm = (f"<p>Communication: busy {_ms(s.comm_busy_us, 2)} ms/step, exposed "
                f"{_ms(s.exposed_comm_us, 2)} ms, hidden {_ms(s.hidden_comm_us, 2)} ms; arrival "
                f"skew {_ms(s.arrival_skew_us, 2)} ms/step.</p>")
    parts.append("<h3>Lanes busy</h3>" + lanes + comm)
    if d.queue_png:
        parts.append("<h3>Input pipeline: prefetch queue</h3>" + _img(
            d.queue_png, f"prefetch queue depth (mean {s.queue_mean:.1f}, cap {s.queue_cap}, "
                         f"empty {100 * s.queue_empty_frac:.0f}% of the time) with the "
                         "workers' busy and idle time beneath"))
    return "".join(parts)


def _whatifs(d: ReportData) -> str:
    if not d.whatifs:
        return ("<p>No what-if was asked for (<code>stepsim report MODEL --scenario FILE</code>, "
                "<code>--set</code>, <code>--fix</code> ... add them); the plan below chains "
                "the named fixes.</p>")
    b = d.baseline
    rows = [("baseline", _ms(b.mean_step_us), _interval(b), "1.00×", b.bottleneck_label)]
    rows += [(w.name, _ms(w.prediction.mean_step_us), _interval(w.prediction),
              _x(b.mean_step_us / w.prediction.mean_step_us), w.prediction.bottleneck_label)
             for w in d.whatifs]
    parts = [_table(("what-if", "mean step ms", "P10 / P50 / P90 ms", "speed-up", "bottleneck"),
                    rows, text_cols=(0, 4))]
    for w in d.whatifs:
        parts.append(f"<h3>{_e(w.name)}</h3><p class='muted'>operations: "
                     f"{_e(w.prediction.what)}</p>"
                     + _img(w.lanes_png, f"baseline (above) against the what-if {w.name}"))
    return "".join(parts)


def _ceilings(d: ReportData) -> str:
    r = d.ceilings
    if r is None or not r.rows:
        return "<p>No component to free.</p>"
    rows = [(x.label, _ms(x.free_step_us), _x(x.ceiling), f"{100 * x.share:.1f}%",
             _x(x.subtracted)) for x in r.rows]
    out = (_table(("component", "step if free ms", "ceiling", "share of step",
                   "subtracted 1/(1−share)"), rows)
           + _img(d.ceilings_png, "step-time ceiling if each component were free (simulated), "
                                  "with the Amdahl bound from its share"))
    if r.kernel_ceiling is not None:
        out += (f"<p>kernel-sum ÷ step-wall = {r.kernel_ratio:.2f}: any kernel work can give at "
                f"most {_x(r.kernel_subtracted)} (simulated with every kernel free: "
                f"{_x(r.kernel_ceiling)}).</p>")
    return out


def _plan(d: ReportData) -> str:
    p = d.plan
    if p is None:
        return "<p>No plan was asked for.</p>"
    b = p.baseline
    rows = plan_rows(p, "→", _x)
    return (f"<p class='muted'>{_e(PLAN_TITLE)}; bottleneck: as the what-ifs name it; next: "
            "the component whose removal would shorten the step most (its largest ceiling), "
            "which the next move relieves first.</p>"
            + _table(list(PLAN_COLUMNS), rows, text_cols=(1, 5, 6))
            + f"<p>{_ms(b.mean_step_us)} ms → {_ms(p.final_prediction.mean_step_us)} ms "
              f"(<b>{_x(p.speedup)}</b>); stop: {_e(p.stop)}</p>"
            + _img(d.plan_png, "step time after each fix of the chain, the bottleneck and the "
                               "largest ceiling after it named on its bar"))


def _validation(d: ReportData) -> str:
    if not d.ledger:
        return ("<p>No validation ledger was given (<code>--ledger L</code>); a prediction "
                "not checked against a re-measured run is a hypothesis.</p>")
    shown = d.ledger[-LEDGER_ROWS:]
    # rows the score leaves out carry the mark `stepsim ledger` gives them
    rows = [(r.label + (f" {apart_mark(r)}" if apart_mark(r) else ""), r.model,
             _ms(r.predicted_mean_us), "–" if r.p10_us is None else
             f"{_ms(r.p10_us)}–{_ms(r.p90_us)}", _ms(r.measured_mean_us),
             f"{r.error_pct:+.1f}%", {True: "yes", False: "no", None: "–"}[r.inside],
             f"{r.predicted_bottleneck} / {r.measured_bottleneck or '–'}")
            for r in shown]
    note = hidden_note(len(d.ledger))
    out = f"<p>{note}.</p>" if note else ""
    # a ledger may hold other models' validations: each row names the model it scores
    out += _table(("check", "model", "predicted ms", "P10–P90 ms", "measured ms", "error",
                  "inside", "bottleneck predicted / measured"), rows, text_cols=(0, 1, 7))
    legend = apart_legend(shown)
    if legend:
        out += f"<p>{_e(legend)}.</p>"
    s = d.ledger_summary
    if s is not None and s.n_in_sample:
        out += (f"<p>{s.n_in_sample} in-sample record(s) (the calibration setting itself) are "
                "left out of the score.</p>")
    if s is not None and s.n_baseline_checks:
        out += (f"<p>{s.n_baseline_checks} baseline check(s) (the calibration setting against "
                "fresh runs) are left out of the score: median error "
                f"{s.baseline_check_median_error_pct:+.1f}%.</p>")
    if s is not None and s.n_outside_load:
        out += (f"<p>{s.n_outside_load} record(s) re-measured under outside load (up to "
                f"{1 + s.max_outside_load_slowdown:.1f}× slower than the machine alone) are left "
                f"out of the score (measured slower than predicted, which the load could "
                f"explain): median |error| {s.outside_load_median_abs_error_pct:.1f}%.</p>")
    if s is not None and s.n_outside_load_kept:
        out += (f"<p>{s.n_outside_load_kept} record(s) re-measured under outside load yet "
                "faster than predicted stay in the score: the load only slows a run.</p>")
    if s is not None and s.n:
        out += (f"<p>{s.n} predictions: median |error| {s.median_abs_error_pct:.1f}%, max "
                f"{s.max_abs_error_pct:.1f}%"
                + (f"; interval coverage {share_text(s.coverage, s.n_intervals)} (P10–P90 "
                   "aims at 80%)" if s.coverage is not None else "")
                + (f"; bottleneck agreement {share_text(s.bottleneck_agreement, s.n_bottlenecks)}"
                   if s.bottleneck_agreement is not None else "") + ".</p>")
    if d.sweep_png:
        path = next(iter(d.sweep.grid))
        out += _img(d.sweep_png, f"sweep of {path} (predicted, P10–P90 band) with the ledger's "
                                 "measured step times")
    return out


def _caveats(d: ReportData) -> str:
    src = Counter(d.model.meta.sources.values())

    def named(kind: str) -> str:
        keys = [k for k, v in d.model.meta.sources.items() if v == kind]
        return (f"{kind}: {', '.join(keys[:12])}{' …' if len(keys) > 12 else ''}"
                if keys else "")

    which = "; ".join(x for x in (named("inferred"), named("assumed")) if x)
    items = [f"Parameters: {src.get('measured', 0)} measured, {src.get('inferred', 0)} "
             f"inferred, {src.get('assumed', 0)} assumed" + (f" ({which})" if which else "")
             + "."]
    if len(d.base_result.ranks) == 1 and d.baseline.summary.comm_busy_us:
        items.append("One rank simulated: its collectives replay their measured durations, "
                     "which include any wait for the other ranks.")
    if d.baseline.runs_ahead:
        items.append("The host runs ahead of the device in the baseline: the simulated window "
                     "saw its transient pace.")
    items += d.caveats
    st = d.settings
    count = d.baseline.count
    steps = (f"Baseline: {count.describe()}" if count is not None
             else f"Simulated {st.get('steps')} steps")
    items.append(f"{steps}; after {st.get('warmup')} warm-up steps, seed {st.get('seed')}; "
                 f"intervals from {st.get('draws')} Monte Carlo draws.")
    return "<ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def render_html(d: ReportData) -> str:
    """The report as one HTML document (str)."""
    body = {"baseline": _baseline, "whatifs": _whatifs, "ceilings": _ceilings, "plan": _plan,
            "validation": _validation, "caveats": _caveats}
    traces = ", ".join(Path(t).name for t in d.model.meta.traces) or "a hand-written model"
    nav = "".join(f"<a href='#{sid}'>{_e(h)}</a>" for sid, h in SECTIONS)
    secs = "".join(f"<section id='{sid}'><h2>{_e(h)}</h2>{body[sid](d)}</section>"
                   for sid, h in SECTIONS)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>stepsim report: {_e(d.name)}</title><style>{_CSS}</style></head><body>"
            f"<header><h1>stepsim report: {_e(d.name)}</h1><p>calibrated from {_e(traces)}"
            "</p></header>"
            f"<nav>{nav}</nav><main>{secs}</main>{_CHECK}</body></html>")


def write_report(d: ReportData, path: str | Path) -> None:
    """Write :func:`render_html` of ``d`` to ``path`` atomically (UTF-8)."""
    write_atomic(Path(path), render_html(d).encode("utf-8"))
