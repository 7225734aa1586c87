"""The lanes timeline: what each lane did during one or more steps, as a profiler draws it.

One row per lane (host thread, DataLoader workers, pin-memory thread, then the device
streams: copy, compute, communication; one group per rank), busy spans coloured by category,
the scarce lane's gaps shaded and labelled with what they waited on, exposed communication
(the communication stream busy while no compute stream is) marked in red beneath the
communication lane, step boundaries as dashed lines with each step's time, and the axis in ms.

Several :class:`Timeline` panels stack on one shared time axis, each starting at its own
first drawn step: the measured run above the simulated baseline, or a baseline above a
what-if. Spans are the flat rows of :class:`simcore.record.Span` (µs), whether recorded by the
simulator or read from a trace (``calibration.lanes``); nothing here computes a result.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from stepsim.models.metrics import merge
from stepsim.report.figures import CATEGORY_LABELS, COLOURS, colour, pyplot, save
from stepsim.simcore.record import Span
from stepsim.simcore.units import us_to_ms

__all__ = ["Timeline", "sim_timeline", "plot_lanes", "GAP_LABELS", "lane_role"]

GAP_LABELS: dict[str, str] = {
    "device_idle": "host launch", "dependency": "other stream", "input": "input (DataLoader)",
    "sync": "device (sync)", "d2h": "D2H copy", "h2d": "H2D copy",
    "launch_queue": "launch queue full", "cpu_cores": "CPU cores", "arrival_skew": "other ranks",
    "startup": "worker start-up", "idle": "idle",
}
"""A wait's cause → what the lane waited on, as written in its gap."""

EXPOSED = "#4a0000"
"""Colour of the exposed-communication marks (darker than communication's red)."""
LANE_HEIGHT_IN = 0.42
"""Inches per lane row: thick enough to see a span and read its label on a laptop screen."""


@dataclass(frozen=True)
class Timeline:
    """One panel of lanes.

    Attributes:
        title: the panel's title (e.g. ``measured: trace.json.gz``, ``simulated baseline``).
        spans: the activity (µs, any origin; only what lies inside the marks is drawn).
        marks_us: step boundaries (µs): ``steps + 1`` instants.
        scarce: the lane whose gaps are shaded and labelled (``""``: none).
        steps: the drawn steps' numbers (for the step labels; default 0, 1, ...).
    """

    title: str
    spans: Sequence[Span]
    marks_us: Sequence[float]
    scarce: str = ""
    steps: Sequence[int] = ()


def lane_role(lane: str, spans: Sequence[Span]) -> str:
    """``host``, ``worker``, ``pin_memory``, or for a device stream the category that holds
    most of its busy time among ``copy`` (memcpy/memset), ``comm`` and ``compute``."""
    rest = lane.split(".", 1)[-1]
    if rest in ("host", "pin_memory") or rest.startswith("worker"):
        return "worker" if rest.startswith("worker") else rest
    t = {"copy": 0.0, "comm": 0.0, "compute": 0.0}
    for s in spans:
        if s.kind == "busy":
            t["copy" if s.category in ("memcpy", "memset") else
              "comm" if s.category == "communication" else "compute"] += s.dur_us
    return max(t, key=t.get) if any(t.values()) else "compute"


_ROLE_ORDER = {"host": 0, "worker": 1, "pin_memory": 2, "copy": 3, "compute": 4, "comm": 5}


def _key(lane: str, role: str) -> tuple:
    rank, _, rest = lane.partition(".")
    num = "".join(c for c in rest if c.isdigit())
    return (rank, _ROLE_ORDER.get(role, 9), int(num) if num and len(num) < 12 else 0, rest)


def _label(lane: str, role: str, ranks: int) -> str:
    rank, _, rest = lane.partition(".")
    if rest.startswith("stream:"):
        rest = f"stream {rest[7:]} ({role})"
    return f"{rank} {rest}" if ranks > 1 else rest


MAX_RANKS_DRAWN = 8
"""Up to this many ranks are drawn, one group of lanes each; beyond, the first rank only."""


def sim_timeline(result, summary=None, steps: int = 1, rank: int | None = None,
                 title: str = "simulated") -> Timeline:
    """The first ``steps`` measured steps of a :class:`models.simulate.SimResult`: every
    rank (one group of lanes each, up to :data:`MAX_RANKS_DRAWN`; beyond, the first) or the
    given ``rank``, on the first drawn rank's step boundaries; ``summary``
    (:class:`models.metrics.Summary`) names the scarce lane (its busiest compute stream when
    the device sets the pace)."""
    drawn = ([rank] if rank is not None else result.ranks if len(result.ranks) <= MAX_RANKS_DRAWN
             else result.ranks[:1])
    rank = drawn[0]
    if summary is not None and summary.rank in drawn:
        rank = summary.rank
    marks = result.step_marks_us[result.ranks.index(rank)]
    n = min(steps, result.step_us.shape[1])
    chosen = list(marks[result.warmup:result.warmup + n + 1])
    scarce = ""
    if summary is not None and summary.scarce_lane:
        scarce = summary.scarce_lane
        if scarce == "compute":
            busy: dict[str, float] = {}
            for s in result.spans:
                if s.kind == "busy" and s.rank == rank and s.lane.split(".", 1)[-1].startswith(
                        "stream") and s.category not in ("communication", "memcpy", "memset"):
                    busy[s.lane] = busy.get(s.lane, 0.0) + s.dur_us
            scarce = max(busy, key=busy.get) if busy else ""
    spans = [s for s in result.spans if s.rank in drawn]
    return Timeline(title, spans, chosen, scarce, tuple(range(n)))


def _clip(spans: Sequence[Span], t0: float, t1: float) -> list[tuple[Span, float, float]]:
    out = []
    for s in spans:
        a, b = max(s.start_us, t0), min(s.end_us, t1)
        if b > a:
            out.append((s, a - t0, b - a))
    return out


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intervals of ``a`` not covered by ``b`` (both unions)."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def _category(s: Span, role: str) -> str:
    """The colour key of a busy span: on the host thread anything but a launch, a sync, the
    DataLoader or the training step is host CPU work."""
    if role == "host" and s.category not in ("launch", "sync", "data", "train", "optimizer"):
        return "cpu"
    return s.category if s.category in COLOURS else "other"


def _gaps(rows: list[tuple[Span, float, float]], width: float) -> list[tuple[float, float, str]]:
    """The lane's gaps: its wait spans merged by cause, and where it neither waited nor
    worked, ``idle``."""
    waits = sorted((a, a + d, s.cause or "idle") for s, a, d in rows if s.kind == "wait")
    merged: list[list] = []
    for a, b, c in waits:
        if merged and merged[-1][2] == c and a <= merged[-1][1] + 1e-6:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b, c])
    busy = merge([(a, a + d) for s, a, d in rows])
    idle = _minus([(0.0, width)], busy)
    return [(a, b, c) for a, b, c in merged] + [(a, b, "idle") for a, b in idle]


def _draw_panel(ax, tl: Timeline, legend: dict) -> None:
    t0, t1 = tl.marks_us[0], tl.marks_us[-1]
    width = t1 - t0
    by_lane: dict[str, list[Span]] = {}
    for s in tl.spans:
        by_lane.setdefault(s.lane, []).append(s)
    roles = {lane: lane_role(lane, sp) for lane, sp in by_lane.items()}
    lanes = sorted(by_lane, key=lambda ln: _key(ln, roles[ln]))
    ranks = len({ln.partition(".")[0] for ln in lanes})
    compute_busy = merge([(a, a + d) for ln in lanes if roles[ln] == "compute"
                           for s, a, d in _clip(by_lane[ln], t0, t1) if s.kind == "busy"])
    ms = us_to_ms
    gap_total: dict[str, float] = {}
    for y, lane in enumerate(lanes):
        if y and lane.partition(".")[0] != lanes[y - 1].partition(".")[0]:
            ax.axhline(y - 0.5, color="#555555", lw=0.8)   # one group of lanes per rank
        rows = _clip(by_lane[lane], t0, t1)
        cats: dict[str, list] = {}
        for s, a, d in rows:
            if s.kind == "busy":
                cats.setdefault(_category(s, roles[lane]), []).append((ms(a), ms(d)))
        for cat, bars in cats.items():
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=colour(cat), linewidth=0)
            legend.setdefault(cat, colour(cat))
        waits = [(ms(a), ms(d)) for s, a, d in rows if s.kind == "wait"]
        if waits and lane != tl.scarce and roles[lane] in ("host", "worker", "pin_memory"):
            ax.broken_barh(waits, (y - 0.15, 0.3), facecolors="none", edgecolors="#999999",
                           hatch="////", linewidth=0.3)
            _write_causes(ax, y, [(a, a + d, s.cause) for s, a, d in rows if s.kind == "wait"],
                          width, "#555555")
        if lane == tl.scarce:
            gaps = _gaps(rows, width)
            _shade_gaps(ax, y, gaps, width)
            for a, b, cause in gaps:
                gap_total[cause] = gap_total.get(cause, 0.0) + b - a
        if roles[lane] == "comm":
            comm = merge([(a, a + d) for s, a, d in rows if s.kind == "busy"])
            exposed = _minus(comm, compute_busy)
            if exposed:
                ax.broken_barh([(ms(a), ms(b - a)) for a, b in exposed], (y + 0.42, 0.2),
                               facecolors=EXPOSED, linewidth=0)
                legend.setdefault("exposed communication (no compute beside it)", EXPOSED)
    ax.set_yticks(range(len(lanes)),
                  [_label(ln, roles[ln], ranks) + (" ★" if ln == tl.scarce else "")
                   for ln in lanes], fontsize=8)
    ax.set_ylim(len(lanes) - 0.35, -0.8)
    for i, m in enumerate(tl.marks_us):
        ax.axvline(ms(m - t0), color="black", ls="--", lw=0.8)
        if i + 1 < len(tl.marks_us):
            num = tl.steps[i] if i < len(tl.steps) else i
            ax.text(ms((m + tl.marks_us[i + 1]) / 2 - t0), -0.62,
                    f"step {num}: {ms(tl.marks_us[i + 1] - m):.1f} ms", ha="center",
                    va="center", fontsize=8, fontweight="bold",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    top = sorted(gap_total.items(), key=lambda kv: -kv[1])[:4]
    gaps = ", ".join(f"{GAP_LABELS.get(c, c)} {ms(v):.1f} ms" for c, v in top)
    ax.set_title(tl.title + (f"   ★ scarce lane {tl.scarce.split('.', 1)[-1]}; its gaps "
                             f"(shaded) waited on: {gaps or 'nothing'}" if tl.scarce else ""),
                 fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.25)


def _shade_gaps(ax, y: int, gaps: list[tuple[float, float, str]], width: float) -> None:
    """Shade the scarce lane's gaps and write what each waited on where it fits (7-point text
    takes about 1/220 of the 12-inch axis per character; narrower gaps are shaded only)."""
    ms = us_to_ms
    for a, b, cause in sorted(gaps):
        # a wait inside a traced operator (a sync call) is drawn over it; idle lies beneath
        ax.broken_barh([(ms(a), ms(b - a))], (y - 0.4, 0.8), facecolors="#fde0dd",
                       edgecolors="#c51b8a", linewidth=0.4, zorder=0.5 if cause == "idle" else 2)
    _write_causes(ax, y, gaps, width, "#7a0177")


def _write_causes(ax, y: int, gaps, width: float, fg: str) -> None:
    """Write each gap's cause inside it where the text fits and overlaps no earlier one."""
    last_end = -1.0
    for a, b, cause in sorted(gaps):
        text = GAP_LABELS.get(cause, cause)
        if (b - a) >= width * (len(text) + 2) / 220 and a >= last_end:
            ax.text(us_to_ms((a + b) / 2), y, text, ha="center", va="center", fontsize=7,
                    color=fg, clip_on=True,
                    bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.7))
            last_end = b


def plot_lanes(timelines: Sequence[Timeline], path: str | Path) -> None:
    """Draw the panels stacked on one shared ms axis (each from its own first step) and
    write them to ``path`` (.png/.svg/.pdf)."""
    if not timelines:
        raise ValueError("plot_lanes needs at least one timeline")
    plt = pyplot()
    n_lanes = [max(1, len({s.lane for s in t.spans})) for t in timelines]
    height = sum(LANE_HEIGHT_IN * n + 0.9 for n in n_lanes) + 1.1
    fig, axes = plt.subplots(len(timelines), 1, sharex=True, figsize=(12, height),
                             gridspec_kw={"height_ratios": [n + 1.2 for n in n_lanes]},
                             squeeze=False)
    legend: dict[str, str] = {}
    for ax, tl in zip(axes[:, 0], timelines):
        _draw_panel(ax, tl, legend)
    longest = max(us_to_ms(t.marks_us[-1] - t.marks_us[0]) for t in timelines)
    axes[-1, 0].set_xlim(0, longest * 1.01)
    axes[-1, 0].set_xlabel("time from the drawn step's start (ms)")
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=CATEGORY_LABELS.get(k, k)) for k, c in legend.items()]
    handles.append(Patch(facecolor="#fde0dd", edgecolor="#c51b8a", label="gap of the scarce lane"))
    handles.append(Patch(facecolor="none", edgecolor="#999999", hatch="////",
                         label="wait (other lanes)"))
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", ncol=min(6, len(handles)), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, 0.0))   # below the axis; saved in full
    save(fig, path)
