"""Tables printed by the CLI (rich). Times arrive in µs and are shown in ms."""
from __future__ import annotations

import math
import shutil
import sys
from dataclasses import asdict
from typing import Sequence

import orjson
from rich.console import Console
from rich.table import Table

from stepsim.models.metrics import CollectiveStat, Summary, label
from stepsim.models.params import StepModel
from stepsim.models.phases import PHASES
from stepsim.models.simulate import WindowReplay
from stepsim.scenarios.fixes import FIXES
from stepsim.scenarios.stepcount import StepCount
from stepsim.report.names import readable_kernel
from stepsim.simcore.units import us_to_ms


TOP_ROWS = 8
"""Collective groups listed one per row; the rest are counted in one row."""
MIN_BOUND_SHARE = 0.01
"""Components under this share of the step get no Amdahl bound printed (it says nothing)."""


def json_out(doc) -> None:
    """``doc`` as indented JSON on stdout (anything orjson cannot write, as its str)."""
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
                                  default=str).decode() + "\n")


class _Uncropped(Console):
    """A console that never cuts a line at its width: a table wider than the width (its
    columns' longest words) runs past it rather than losing text."""

    def print(self, *objects, crop: bool = False, **kw) -> None:
        super().print(*objects, crop=crop, **kw)

    def on_broken_pipe(self) -> None:
        """The reader left (``stepsim ledger L | head -1``): :func:`stepsim.cli.main` ends
        quietly (rich's own way exits 1)."""
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    """stdout's console: the terminal's width, else ``COLUMNS``, else 110 columns
    (:func:`shutil.get_terminal_size`); no line is cut."""
    return _Uncropped(file=sys.stdout, highlight=False, soft_wrap=False,
                      width=shutil.get_terminal_size((110, 24)).columns)


def _to_ms(value):
    """Recursively rename ``*_us`` keys to ``*_ms`` and convert their values (numbers, dicts
    of numbers, or dicts of those: ``rank_phases_us``) to milliseconds."""
    if isinstance(value, list):
        return [_to_ms(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if isinstance(k, str) and k.endswith("_us"):
            key = k[:-3] + "_ms"
            if isinstance(v, dict):   # of numbers, or of dicts of numbers (per rank)
                out[key] = {kk: {k3: us_to_ms(v3) for k3, v3 in vv.items()}
                            if isinstance(vv, dict) else us_to_ms(vv) for kk, vv in v.items()}
            elif isinstance(v, (int, float)):
                out[key] = us_to_ms(v)
            else:
                out[key] = _to_ms(v)
        elif isinstance(v, float) and math.isinf(v):
            out[k] = None
        else:
            out[k] = _to_ms(v) if isinstance(v, (dict, list)) else v
    return out


def summary_dict(summary: Summary, count: StepCount | None = None) -> dict:
    """The summary with times in ms (keys renamed ``*_ms``), for JSON output, with the step
    count and its standard error when given; an infinite Amdahl ceiling becomes null."""
    d = _to_ms(asdict(summary))
    d["ceilings"] = {k: (None if math.isinf(v) else v) for k, v in summary.ceilings.items()}
    if count is not None:
        d.update(count.to_dict())
    return d


def ms_text(us: float | None, nd: int = 1) -> str:
    """``us`` (µs) in ms with ``nd`` decimals; ``-`` for None."""
    return "-" if us is None else f"{us_to_ms(us):.{nd}f}"


def _ms(us: float) -> str:
    return f"{us_to_ms(us):.2f}"


def _straggler_text(model: StepModel, s: Summary) -> str:
    """The straggler as ``--fix remove_straggler`` sees it: a rank the model makes slower
    (``delay_us``, ``phase_extra_us``, ``phase_wall_us``), or, when no rank is, the rank that entered last most
    named as step-to-step variation (nothing that fix removes)."""
    if s.straggler_rank is None:
        return ""
    slow = [r.rank for r in model.ranks if r.slower()]
    if slow:
        return f"; straggler rank {s.straggler_rank}"
    return (f"; rank {s.straggler_rank} entered last most, from step-to-step variation (no "
            "rank is slower in the model: remove_straggler has nothing to remove)")


def print_summary(model: StepModel, s: Summary, as_json: bool = False,
                  count: StepCount | None = None) -> None:
    """Print one simulation's summary: step time (with how many steps pin it), bottleneck,
    critical path with Amdahl ceilings, lanes, communication (exposed, skew vs transfer),
    input queue."""
    if as_json:
        sys.stdout.write(orjson.dumps(summary_dict(s, count), option=orjson.OPT_INDENT_2
                                      | orjson.OPT_NON_STR_KEYS).decode() + "\n")
        return
    c = console()
    name = model.meta.name or "model"
    c.print(f"[bold]{name}[/bold]: step time mean {_ms(s.mean_step_us)} ms, "
            f"median {_ms(s.median_step_us)} ms "
            f"(step to step: P10 {_ms(s.p10_step_us)}, P90 {_ms(s.p90_step_us)})")
    if count is not None:
        c.print(count.describe())
    if len(s.rank_step_us) > 1:
        c.print("per rank: " + ", ".join(f"rank {r} {_ms(v)} ms" for r, v in s.rank_step_us.items()))
    c.print(f"bottleneck: [bold]{s.bottleneck_label}[/bold]")
    step = sum(s.critical_path_us.values()) or s.mean_step_us
    lane = {"compute": "device compute, all streams"}.get(s.scarce_lane, s.scarce_lane or "-")
    t = Table(title=f"critical path of rank {s.rank} (followed from {lane}: the device when it "
                    "sets the pace, else the busier of host thread and device compute)",
              show_edge=False)
    for col in ("component", "ms/step", "% of step", "idle (gap) ms", "Amdahl bound"):
        t.add_column(col, justify="left" if col == "component" else "right")
    for k, v in sorted(s.critical_path_us.items(), key=lambda kv: -kv[1]):
        ceil = s.ceilings.get(k, 1.0)
        share = v / step if step else 0.0
        t.add_row(label(k), f"{us_to_ms(v):.2f}", f"{100 * share:.1f}",
                  _ms(s.gap_us[k]) if k in s.gap_us else "",
                  "-" if math.isinf(ceil) or share < MIN_BOUND_SHARE else f"{ceil:.2f}x")
    c.print(t)
    c.print("Amdahl bound = 1 / (1 - share): the most removing that component could buy if "
            "nothing else moved; 'stepsim ceiling' simulates each removal.")
    c.print(f"compute busy {_ms(s.compute_busy_us)} ms/step; kernel-sum / step-wall "
            f"{s.kernel_ratio:.2f}")
    big = [h for h in s.holes if h.dur_us >= 0.01 * step]
    if big:
        c.print("holes in the last step (at ms: length ms = causes):")
        for h in big:
            causes = ", ".join(f"{label(k)} {_ms(v)}" for k, v in sorted(h.causes.items(),
                                                                          key=lambda kv: -kv[1]))
            c.print(f"  at {_ms(h.start_us)}: {_ms(h.dur_us)} = {causes}")
    c.print(lane_table(s.lane_busy))
    if s.comm_busy_us or s.arrival_skew_us:
        c.print(f"communication: busy {_ms(s.comm_busy_us)} ms/step, exposed "
                f"{_ms(s.exposed_comm_us)}, hidden {_ms(s.hidden_comm_us)}; arrival skew "
                f"{_ms(s.arrival_skew_us)} ms/step"
                + _straggler_text(model, s))
        if len(s.rank_step_us) == 1:
            c.print("(one rank simulated: its collectives replay their measured durations, "
                    "which include any wait for the other ranks; arrival skew needs every "
                    "rank's trace, e.g. a directory of them)")
        c.print(collective_table(s.collectives))
    if s.rank_comm:
        c.print(rank_comm_table([("", s)]))
    if s.queue_cap:
        c.print(f"input: {s.batches_per_s:.2f} batches/s; ready queue mean {s.queue_mean:.1f}, "
                f"max {s.queue_max:.0f} of cap {s.queue_cap}, empty {100 * s.queue_empty_frac:.0f}% "
                f"of the time; loader keeps {s.loader_cores_busy:.1f} cores busy")
    elif s.batches_per_s:
        c.print(f"input: {s.batches_per_s:.2f} batches/s, each loaded on the main thread "
                "(num_workers=0: no prefetch queue)")


def window_dict(w: WindowReplay) -> dict:
    """A window replay as JSON-ready data (ms)."""
    return {"steps": [{"step": n, "measured_ms": us_to_ms(float(m)),
                       "replayed_ms": us_to_ms(float(r)), "compared": bool(c),
                       "error_pct": 100.0 * (float(r) / float(m) - 1.0) if m > 0 else None}
                      for n, m, r, c in zip(w.steps, w.measured_us, w.replayed_us, w.compared)],
            "measured_median_ms": us_to_ms(w.measured_median_us),
            "replayed_median_ms": us_to_ms(w.replayed_median_us),
            "median_error_pct": 100.0 * w.median_error,
            "max_step_error_pct": 100.0 * w.max_step_error}


def print_window(w: WindowReplay) -> None:
    """Per captured step: measured and replayed step time, error; then the medians."""
    t = Table(title="window replay: the captured steps re-run from the captured state",
              show_edge=False)
    for col in ("step", "measured ms", "replayed ms", "error", "compared"):
        t.add_column(col, justify="right")
    for n, m, r, cmp in zip(w.steps, w.measured_us, w.replayed_us, w.compared):
        t.add_row(str(n), _ms(m), _ms(r), f"{100 * (r / m - 1):+.1f}%" if m > 0 else "-",
                  "yes" if cmp else "no (representative durations)")
    c = console()
    c.print(t)
    c.print(f"median over the compared steps: measured {_ms(w.measured_median_us)} ms, replayed "
            f"{_ms(w.replayed_median_us)} ms ({100 * w.median_error:+.1f}%); largest one-step "
            f"error {100 * w.max_step_error:.1f}%")


def lane_table(lane_busy: dict[str, float]) -> Table:
    """Lanes and their busy %; with several ranks, one row per lane name across the ranks
    (mean, and the least and most busy rank) instead of one per rank and lane."""
    ranks: dict[str, dict[str, float]] = {}
    for lane, f in lane_busy.items():
        rank, _, rest = lane.partition(".")
        ranks.setdefault(rest or rank, {})[rank] = f
    if all(len(v) <= 1 for v in ranks.values()):
        t = Table(title="lanes", show_edge=False)
        t.add_column("lane")
        t.add_column("busy %", justify="right")
        for lane, f in lane_busy.items():
            t.add_row(lane, f"{100 * f:.1f}")
        return t
    t = Table(title="lanes (busy % of the window, over the ranks)", show_edge=False)
    for col in ("lane", "ranks", "mean", "least busy", "most busy"):
        t.add_column(col, justify="left" if col == "lane" else "right")
    for rest, per in ranks.items():
        lo, hi = min(per, key=per.get), max(per, key=per.get)
        t.add_row(rest, str(len(per)), f"{100 * sum(per.values()) / len(per):.1f}",
                  f"{100 * per[lo]:.1f} ({lo})", f"{100 * per[hi]:.1f} ({hi})")
    return t


def _busbw(values: list[float]) -> str:
    """A bus bandwidth range (GB/s) from the collectives whose bytes were measured; "–" when
    none was (a bandwidth without bytes would be made up)."""
    v = [x for x in values if x > 0]
    if not v:
        return "–"
    lo, hi = f"{min(v):.3g}", f"{max(v):.3g}"
    return lo if lo == hi else f"{lo}–{hi}"


def collective_table(stats: list[CollectiveStat], top: int = TOP_ROWS) -> Table:
    """Collectives grouped by readable kernel name (count per step, summed times, the bus
    bandwidth range from those with bytes), the ``top`` groups by observed time and one row
    counting the rest."""
    groups: dict[str, list[CollectiveStat]] = {}
    for cs in stats:
        groups.setdefault(readable_kernel(cs.name), []).append(cs)
    order = sorted(groups.items(), key=lambda kv: -sum(c.observed_us for c in kv[1]))
    t = Table(title=f"collectives (per step; {len(stats)} in {len(groups)} kinds)", show_edge=False)
    for col in ("collective", "count", "observed ms", "skew ms", "transfer ms",
                "busbw GB/s (transfer)"):
        t.add_column(col, justify="left" if col == "collective" else "right",
                     no_wrap=col == "collective")
    for name, cs in order[:top]:
        t.add_row(name, str(len(cs)), _ms(sum(c.observed_us for c in cs)),
                  _ms(sum(c.skew_us for c in cs)), _ms(sum(c.transfer_us for c in cs)),
                  _busbw([c.busbw_gbps for c in cs if c.bytes]))
    rest = [c for _, cs in order[top:] for c in cs]
    if rest:
        t.add_row(f"... {len(order) - top} more kinds", str(len(rest)),
                  _ms(sum(c.observed_us for c in rest)), _ms(sum(c.skew_us for c in rest)),
                  _ms(sum(c.transfer_us for c in rest)), "")
    return t


def rank_comm_table(named: Sequence[tuple[str, Summary]]) -> Table:
    """Per rank, its barriers' and its other collectives' time split into arrival skew
    (waiting for the last rank) and transfer, ms per step; one block of rows per named
    summary (a name column when there are several)."""
    t = Table(title="arrival skew vs transfer per rank (ms per step; skew = waiting for the "
                    "last rank to enter)", show_edge=False)
    cols = (("",) if len(named) > 1 else ()) + ("rank", "kind", "count", "time in it",
                                                  "arrival skew", "transfer")
    for col in cols:
        t.add_column(col, justify="left" if col in ("", "kind") else "right")
    for name, s in named:
        for rc in s.rank_comm:
            t.add_row(*((name,) if len(named) > 1 else ()), str(rc.rank), f"{rc.group}s",
                      f"{rc.count:g}", _ms(rc.in_us), _ms(rc.skew_us), _ms(rc.transfer_us))
    return t


def phase_table(base: Summary, what: Summary) -> Table:
    """Per rank, each phase's mean ms per step (:data:`models.phases.PHASES`) in the baseline,
    the scenario (the what-if) and their difference: which phase grows, which rank waits. The
    ranks both summaries have."""
    t = Table(title="per rank and phase, ms per step (wait: the last bucket's enqueue and "
                    "the wait for the all-reduces; post = wait + opt + tail)", show_edge=False)
    t.add_column("", justify="left")
    for c in PHASES:
        t.add_column(c, justify="right")
    for r in sorted(set(base.rank_phases_us) & set(what.rank_phases_us)):
        a, b = base.rank_phases_us[r], what.rank_phases_us[r]
        t.add_row(f"rank {r} baseline", *(_ms(a[c]) for c in PHASES))
        t.add_row(f"rank {r} scenario", *(_ms(b[c]) for c in PHASES))
        t.add_row(f"rank {r} change", *(_signed_ms(b[c] - a[c]) for c in PHASES),
                  end_section=True)
    return t


def _signed_ms(us: float) -> str:
    """A change in ms with its sign, 2 decimals; one that rounds to zero is ``+0.00`` (not
    ``-0.00`` from a few ns of float noise)."""
    return f"{round(us_to_ms(us), 2) + 0.0:+.2f}"


def job_step_line(base: Summary, what: Summary) -> str:
    """The job's step under :func:`phase_table`: each step the slowest rank's (the step
    ``whatif`` reports), baseline -> scenario ms, and what that per-step maximum adds over
    the ranks' mean step."""
    line = (f"job step (each step the slowest rank's): {_ms(base.mean_step_us)} -> "
            f"{_ms(what.mean_step_us)} ms ({_signed_ms(what.mean_step_us - base.mean_step_us)})")
    if base.over_ranks_us is not None and what.over_ranks_us is not None:
        line += (f"; of it over the ranks' mean step {_ms(base.over_ranks_us)} -> "
                 f"{_ms(what.over_ranks_us)} ms")
    return line


# ---------------------------------------------------------------- fixes ------------------
def _argument(field) -> dict:
    """A fix argument for ``fixes --json``: its type and default as JSON values (a number is a
    number, None is null), ``required`` when it has no default."""
    ann = field.annotation
    kind = getattr(ann, "__name__", None) or str(ann).replace("typing.", "")
    out = {"type": kind, "required": field.is_required()}
    if not field.is_required():
        out["default"] = field.default
    if field.description:
        out["description"] = field.description
    return out


def print_fixes(as_json: bool = False) -> None:
    """Every named fix: kind, what it relieves, its arguments and exactly what it changes."""
    if as_json:
        return json_out({f.name: {"kind": f.kind, "relieves": list(f.relieves),
                               "arguments": {k: _argument(v) for k, v in
                                             f.args.model_fields.items()},
                               "changes": _changes(f),
                               "needs_device": bool(f.needs_device)} for f in FIXES.values()})
    t = Table(title="named fixes", show_edge=False, show_lines=True)
    t.add_column("fix", no_wrap=True)
    t.add_column("kind", no_wrap=True)
    t.add_column("relieves", overflow="fold", max_width=14)
    t.add_column("arguments (default)", overflow="fold", max_width=22)
    t.add_column("what it changes", overflow="fold", ratio=1)
    for f in FIXES.values():
        args = ", ".join(f"{k}={'required' if v.is_required() else v.default}"
                         for k, v in f.args.model_fields.items()) or "-"
        t.add_row(f.name, f.kind, ", ".join(f.relieves), args, _changes(f))
    console().print(t)


def _changes(f) -> str:
    """What a fix changes, and, for one that needs a device, that a CPU run refuses it."""
    return f.changes + (f" Refused on a model without a device ({f.needs_device})."
                        if f.needs_device else "")
