"""Rendering of a :class:`scenarios.diagnose.Diagnosis`: the tree as text, a ``--json``
document, and the roofline plot (matplotlib). Times arrive in µs and are shown in ms; nothing
here computes a result."""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

from stepsim.report.figures import pyplot as _pyplot, save as _save
from stepsim.report.tables import json_out as _json
from stepsim.scenarios.corun_priors import priors_caveat
from stepsim.scenarios.diagnose import Diagnosis, WhatIf
from stepsim.scenarios.roofline import Roofline
from stepsim.simcore.units import us_to_ms

__all__ = ["diagnosis_dict", "print_diagnosis", "plot_roofline"]

_STAGES = {"kernel_ratio": "1. kernel-sum / step-wall", "gaps": "2. gaps of the scarce lane",
           "roofline": "3. roofline of the kernel time", "memory": "4. memory headroom"}


def _ms(us: float | None) -> str:
    return "-" if us is None else f"{us_to_ms(us):.2f} ms"


def _speedup(w: WhatIf, base_us: float) -> float | None:
    """The what-if's predicted speed-up over the baseline (None: it did not apply)."""
    return None if w.step_us is None else base_us / w.step_us


def _offered(w: WhatIf, base_us: float) -> bool:
    """Whether the what-if is offered as a fix: it applied and predicts a speed-up above 1 (a
    predicted slow-down, or no change, never is)."""
    x = _speedup(w, base_us)
    return x is not None and x > 1


_CORUN_FIXES = ("more_workers", "intra_op_threads")
"""Fixes that change the threads beside each other (:mod:`scenarios.corun_priors`)."""


def _whatif_line(w: WhatIf, base_us: float, model=None) -> str:
    if w.step_us is None:
        return f"stepsim whatif MODEL --fix {w.fix}: does not apply ({w.note})"
    caveat = (priors_caveat(model) if w.fix.split(":", 1)[0] in _CORUN_FIXES else "")
    return _priced_line(w, base_us) + (f"; {caveat}" if caveat else "")


def _priced_line(w: WhatIf, base_us: float) -> str:
    interval = (f", P10-P90 {_ms(w.p10_us)} - {_ms(w.p90_us)}"
                if w.p10_us is not None and w.p90_us is not None else "")
    x = _speedup(w, base_us)
    if not _offered(w, base_us):
        return (f"no fix: --fix {w.fix} predicts {_ms(w.step_us)}, a {x:.2f}x speed-up "
                "(none)")
    return f"stepsim whatif MODEL --fix {w.fix} -> {_ms(w.step_us)}{interval} ({x:.2f}x)"


def diagnosis_dict(d: Diagnosis) -> dict:
    """A JSON-ready document of the diagnosis (µs fields as in the dataclasses). Each what-if
    carries its ``speedup`` over the baseline (None: it did not apply) and whether it is
    ``offered`` as a fix (a speed-up above 1, as the text says); ``fixes`` lists the offered
    ones' ``--fix`` texts, in the tree's order."""
    roof = None
    if d.roofline is not None:
        roof = {"machine": {"name": d.roofline.machine.name,
                            "peaks_flops_s": d.roofline.machine.peaks,
                            "bw_bytes_s": d.roofline.machine.bw_bytes_s,
                            "source": d.roofline.machine.source},
                "classes": [asdict(c) for c in d.roofline.classes]}
    mem = None
    if d.memory is not None:
        mem = {k: v for k, v in asdict(d.memory).items() if k != "fits"}
        mem["fits"] = {str(k): v for k, v in d.memory.fits.items()}
    base = d.baseline.mean_step_us
    findings = []
    for f in d.findings:
        doc = asdict(f)
        doc["whatifs"] = [{**asdict(w), "speedup": _speedup(w, base), "offered": _offered(w, base)}
                          for w in f.whatifs]
        findings.append(doc)
    fixes = list(dict.fromkeys(w.fix for f in d.findings for w in f.whatifs
                               if _offered(w, base)))
    return {"name": d.name, "baseline_step_us": base,
            "baseline_p10_us": d.baseline.p10_step_us, "baseline_p90_us": d.baseline.p90_step_us,
            "kernel_ratio": d.kernel_ratio, "kernel_ratio_source": d.kernel_ratio_source,
            "findings": findings, "fixes": fixes, "roofline": roof, "memory": mem,
            "caveats": list(d.caveats)}


def print_diagnosis(d: Diagnosis, as_json: bool = False) -> None:
    """The tree on stdout, one verdict per step, its evidence indented, each leaf's what-if."""
    if as_json:
        _json(diagnosis_dict(d))
        return
    b = d.baseline
    interval = (f" (P10-P90 of {b.scope}: {_ms(b.p10_step_us)} - {_ms(b.p90_step_us)})"
                if b.p10_step_us is not None else "")
    print(f"diagnosis of {d.name}: simulated baseline step {_ms(b.mean_step_us)}{interval}"
          + (f", {b.host_speed}" if b.host_speed else ""))
    for c in d.caveats:
        print(f"  caveat: {c}")
    stage = None
    for f in d.findings:
        if f.stage != stage:
            stage = f.stage
            print(f"\n{_STAGES[stage]}")
        lead = "  -> " if f.key else "  "
        print(f"{lead}{f.verdict}")
        pad = "       " if f.key else "     "
        for e in f.evidence:
            print(f"{pad}{e}")
        said = None     # a fix and its look-ahead pair share one leaf's arithmetic: said once
        for w in f.whatifs:
            if w.arithmetic and w.arithmetic != said:
                print(f"{pad}arithmetic: {w.arithmetic}")
            said = w.arithmetic or said
            print(f"{pad}{_whatif_line(w, b.mean_step_us, b.model)}")
            for c in w.caveats:
                print(f"{pad}  caveat: {c}")


def plot_roofline(roof: Roofline, path: str | Path, title: str = "") -> None:
    """The roofline of ``roof``'s machine (the FP32 roof, and the best 16-bit tensor-core roof
    where there is one) with one point per class × phase at (arithmetic intensity, attained
    FLOP/s), sized by its kernel time; written atomically."""
    plt = _pyplot()
    m = roof.machine
    pts = [c for c in roof.classes if c.covered_us > 0 and c.flops > 0 and c.bytes > 0]
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    lo = min([c.intensity for c in pts] + [0.05]) / 3
    hi = max([c.intensity for c in pts] + [m.peaks.get("fp32", 1) / m.bw_bytes_s * 30]) * 3
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roofs = [("fp32", "-")] + [(k, "--") for k in ("bf16", "fp16") if k in m.peaks][:1]
    for key, style in roofs:
        p = m.peaks[key]
        ax.plot(xs, [min(p, x * m.bw_bytes_s) for x in xs], style, color="black", lw=1.2,
                label=f"{key.upper()} roof {p / 1e12:g} TFLOP/s, {m.bw_bytes_s / 1e9:g} GB/s")
    total = sum(c.covered_us for c in pts) or 1.0
    cmap = plt.get_cmap("tab10")
    classes = sorted({c.klass for c in pts})
    for c in pts:
        color = cmap(classes.index(c.klass) % 10)
        marker = {"forward": "o", "backward": "s", "optimizer": "^"}.get(c.phase, "D")
        ax.scatter([c.intensity], [c.achieved_flops_s], s=30 + 600 * c.covered_us / total,
                   color=color, marker=marker, alpha=0.75, edgecolors="black", linewidths=0.5)
    for k in classes:
        ax.scatter([], [], color=cmap(classes.index(k) % 10), label=k, s=40)
    for ph, mk in (("forward", "o"), ("backward", "s"), ("optimizer", "^")):
        if any(c.phase == ph for c in pts):
            ax.scatter([], [], color="grey", marker=mk, label=ph, s=40)
    short = {"forward": "fwd", "backward": "bwd", "optimizer": "opt", "data": "data"}
    by_class: dict[str, list] = {}
    for c in sorted(pts, key=lambda c: -c.time_us):
        by_class.setdefault(c.klass, []).append(c)
    top = sorted(by_class.values(), key=lambda cs: -sum(c.time_us for c in cs))[:5]
    mid = math.sqrt(lo * hi)
    for cs in top:   # one label per class of 3 % of the time or more, at its largest point
        if sum(c.covered_us for c in cs) < 0.03 * total:
            continue
        text = f"{cs[0].klass}: " + ", ".join(f"{short.get(c.phase, c.phase)} "
                                              f"{us_to_ms(c.time_us):.1f}" for c in cs[:3])
        right = cs[0].intensity > mid
        ax.annotate(text + " ms", (cs[0].intensity, cs[0].achieved_flops_s),
                    textcoords="offset points",
                    xytext=(-10 if right else 10, 10 if cs[0].attained > 1 else -16),
                    ha="right" if right else "left", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v / 1e12:g}")
    ax.set_xlim(lo, hi)
    ymax = max([m.peaks[k] for k, _ in roofs] + [c.achieved_flops_s for c in pts]) * 2
    ymin = min([c.achieved_flops_s for c in pts] + [lo * m.bw_bytes_s]) / 3
    ax.set_ylim(max(ymin, 1e6), ymax)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, compulsory bytes)")
    ax.set_ylabel("attained TFLOP/s")
    ax.set_title(title or f"roofline on {m.name} ({m.source})\none point per kernel class and "
                 "phase; area = kernel time per step; labels: ms per step", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.9)
    _save(fig, path)
