"""Charts of the input pipeline and of the planner's chain.

* :func:`plot_queue`: the prefetch queue's depth over time (batches ready for the training
  step, in order, and batches outstanding), its cap ``num_workers × prefetch_factor`` drawn,
  with each DataLoader worker's busy/idle beneath on the same ms axis.
* :func:`plot_plan`: the step time after each fix of the chain, the bottleneck and the
  largest ceiling after it named on its bar, and the P10–P90 interval as an error bar when
  the plan drew one.

Inputs are a :class:`models.simulate.SimResult` and a :class:`scenarios.plan.Plan`; times
arrive in µs and are drawn in ms; nothing here computes a result.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.report.figures import colour, pyplot, save
from stepsim.report.lanes import GAP_LABELS
from stepsim.scenarios.plan import Plan
from stepsim.simcore.units import us_to_ms

__all__ = ["plot_queue", "plot_plan", "has_queue"]


def has_queue(result, rank: int | None = None) -> bool:
    """Whether ``result`` has a prefetch queue to draw (a DataLoader with workers)."""
    rank = result.ranks[0] if rank is None else rank
    return bool(result.samples.get(f"rank{rank}.loader.ready"))


def _steps_plot(ax, pts, t0: float, t1: float, **kw) -> None:
    xs, ys = [], []
    last = None
    for t, v in pts:
        if t > t1:
            break
        if t < t0:
            last = v
            continue
        if not xs and last is not None:
            xs.append(0.0)
            ys.append(last)
        xs.append(us_to_ms(t - t0))
        ys.append(v)
    if xs:
        xs.append(us_to_ms(t1 - t0))
        ys.append(ys[-1])
        ax.step(xs, ys, where="post", **kw)


def plot_queue(result, path: str | Path, steps: int = 6, rank: int | None = None) -> None:
    """Queue depth over ``steps`` measured steps of ``rank`` (default the first), the cap, the
    step boundaries, and each worker's busy/idle lane beneath.

    Raises:
        ValueError: the simulation has no prefetch queue (``num_workers=0``).
    """
    rank = result.ranks[0] if rank is None else rank
    if not has_queue(result, rank):
        raise ValueError("no prefetch queue to draw: the DataLoader has no workers "
                         "(num_workers=0 loads on the main thread)")
    plt = pyplot()
    loader = result.model.loader
    cap = loader.num_workers * loader.prefetch_factor
    marks = result.step_marks_us[result.ranks.index(rank)]
    n = min(steps, result.step_us.shape[1])
    t0, t1 = marks[result.warmup], marks[result.warmup + n]
    lanes = sorted({s.lane for s in result.spans if s.rank == rank and ".worker" in s.lane},
                   key=lambda ln: int(ln.rsplit("worker", 1)[-1]))
    fig, (ax, lx) = plt.subplots(2, 1, sharex=True, figsize=(12, 3.2 + 0.4 * len(lanes)),
                                 gridspec_kw={"height_ratios": [3, max(1, 0.45 * len(lanes))]})
    _steps_plot(ax, result.samples[f"rank{rank}.loader.ready"], t0, t1, color="tab:green",
                lw=1.6, label="ready for the step (in order)")
    _steps_plot(ax, result.samples[f"rank{rank}.loader.outstanding"], t0, t1, color="tab:blue",
                lw=5, alpha=0.3, label="outstanding (sent to workers, not yet returned)")
    ax.axhline(cap, color="tab:red", lw=1.2, ls="--")
    ax.text(0.002, cap, f" cap = num_workers × prefetch_factor = {loader.num_workers} × "
            f"{loader.prefetch_factor} = {cap}", color="tab:red", va="bottom", fontsize=8,
            transform=ax.get_yaxis_transform(),
            bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.8))
    ax.set_ylim(-0.3, cap * 1.35 + 0.8)
    ax.set_ylabel("batches")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(f"prefetch queue of rank {rank} over {n} simulated steps "
                 f"({result.model.meta.name or 'model'})", fontsize=9, loc="left")
    for y, lane in enumerate(lanes):
        busy, waits = [], []
        for s in result.spans:
            if s.lane != lane or s.end_us <= t0 or s.start_us >= t1:
                continue
            a, b = max(s.start_us, t0), min(s.end_us, t1)
            (busy if s.kind == "busy" else waits).append((us_to_ms(a - t0), us_to_ms(b - a)))
        lx.broken_barh([(0, us_to_ms(t1 - t0))], (y - 0.4, 0.8), facecolors="#f0f0f0")
        lx.broken_barh(busy, (y - 0.4, 0.8), facecolors=colour("produce"), linewidth=0)
        lx.broken_barh(waits, (y - 0.4, 0.8), facecolors="none", edgecolors="#999999",
                       hatch="////", linewidth=0.3)
    lx.set_yticks(range(len(lanes)), [ln.split(".", 1)[-1] for ln in lanes], fontsize=8)
    lx.set_ylim(len(lanes) - 0.5, -0.5)
    lx.set_title("workers: green = producing a batch, grey = idle (waiting for an index), "
                 f"hatched = waiting for {GAP_LABELS['cpu_cores']}", fontsize=8, loc="left")
    for a in (ax, lx):
        for m in marks[result.warmup:result.warmup + n + 1]:
            a.axvline(us_to_ms(m - t0), color="black", ls="--", lw=0.6, alpha=0.6)
        a.grid(axis="x", alpha=0.25)
    lx.set_xlim(0, us_to_ms(t1 - t0))
    lx.set_xlabel("time from the first drawn step's start (ms); dashed lines: step boundaries")
    fig.tight_layout()
    save(fig, path)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 2] + "…"


def plot_plan(p: Plan, path: str | Path) -> None:
    """Bars of the step time (ms) after each move of the chain, baseline first; each bar
    names the fix, the bottleneck after it (as ``whatif`` names it) and the component with
    the largest simulated ceiling (the next move's first target); P10–P90 as error bars
    where drawn."""
    plt = pyplot()
    preds = [p.baseline] + [m.prediction for m in p.moves]
    names = ["baseline"] + [f"{i}. {m.op.describe().removeprefix('fix ')}"
                            for i, m in enumerate(p.moves, 1)]
    tops = [p.largest_ceiling] + [m.largest_ceiling for m in p.moves]
    necks = [f"bottleneck and largest ceiling: {_short(t.label, 40)} {t.ceiling:.2f}x"
             if t and t.key == x.bottleneck else f"bottleneck: {_short(x.bottleneck_label, 34)}"
             + (f"; largest ceiling: {_short(t.label, 30)} {t.ceiling:.2f}x" if t else "")
             for x, t in zip(preds, tops)]
    fig, ax = plt.subplots(figsize=(9, 0.62 * len(preds) + 1.4))
    ys = list(range(len(preds)))[::-1]
    vals = [us_to_ms(x.mean_step_us) for x in preds]
    ax.barh(ys, vals, color=["#7f7f7f"] + ["tab:blue"] * len(p.moves), height=0.6)
    for y, x in zip(ys, preds):
        if x.has_interval:
            ax.errorbar(us_to_ms(x.p50_step_us), y, xerr=[[us_to_ms(x.p50_step_us - x.p10_step_us)],
                        [us_to_ms(x.p90_step_us - x.p50_step_us)]], color="black", capsize=3,
                        lw=1)
    top = max(vals)
    for y, v, neck, x in zip(ys, vals, necks, preds):
        ax.text(top * 0.01, y, f"{v:.1f} ms", va="center", color="white", fontsize=8,
                fontweight="bold")
        right = max(v, us_to_ms(x.p90_step_us)) if x.has_interval else v   # past the error bar
        ax.text(right + top * 0.02, y, neck, va="center", fontsize=7)
    ax.set_yticks(ys, [n if len(n) <= 48 else n[:46] + "…" for n in names], fontsize=8)
    ax.set_xlim(0, top * 2.6)
    ax.set_xlabel("mean step time (ms)" + ("; error bars: P10–P90" if any(
        x.has_interval for x in preds) else ""))
    ax.set_title(f"plan: {us_to_ms(p.baseline.mean_step_us):.1f} ms -> "
                 f"{us_to_ms(p.final_prediction.mean_step_us):.1f} ms ({p.speedup:.2f}x) in "
                 f"{len(p.moves)} move{'s' if len(p.moves) != 1 else ''}", fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.25)
    fig.tight_layout()
    save(fig, path)
