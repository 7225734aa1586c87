"""What a prediction interval is made of: its width with one source of uncertainty at a time.

The interval of :func:`scenarios.predict.predict` draws every source together. Here the same
draws (same factors, seeds and bootstrap samples) are simulated again with only one source
on and the others at the point's values, and the P90 − P10 of each is given in % of the
point estimate:

* ``host.cpu_scale`` (*host noise*): the host's run-to-run speed, once per run;
* ``host.interference`` (*interference*): the co-run interference coefficient, fitted from a
  probe or a stated prior;
* ``host.oversub`` (*past the cores*): the slowdown with more runnable threads than cores,
  fitted from a probe above the cores or a stated prior;
* ``host.same_thread`` (*same-thread batch*): the main thread's own cost of making its
  batches, in a what-if across ``num_workers=0`` (:mod:`models.same_thread`), fitted from a
  probe across it or a stated prior;
* ``window`` (*window sampling*): the bootstrap of the calibration window's measured samples
  (how well a short capture pins their means);
* ``steps`` (*step variation*): the step-to-step variation, through the standard error of a
  mean over the draws' steps and, for a validation, over the re-measured steps;
* every other inferred or assumed parameter, by its path.

Independent sources add roughly in quadrature (the root of the sum of their squares is
printed beside the whole); a source whose width is 0 does not change this prediction (a
setting it does not reach, or a value that a factor leaves alone). A parameter nothing in the
model after the what-if reads (``loader.pin_gbps`` without pinned memory:
:func:`scenarios.noop.unread_params`) is not a source: it is not drawn at all.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from stepsim.models.params import StepModel
from stepsim.scenarios.draws import (STEPS, WINDOW, draw_means, perturb, quantiles,
                                     uncertain_params)
from stepsim.scenarios.paths import get_value
from stepsim.scenarios.transforms import Operation

LABELS = {"host.cpu_scale": "host noise", "host.interference": "interference",
          "host.oversub": "past the cores",
          "host.team_stall": "team stall", "host.refault_share": "page faults",
          "host.same_thread": "same-thread batch",
          "host.refault_growth": "fault growth",
          "window": "window sampling", "steps": "step variation"}
"""Words for the sources a user reads first; other sources are named by their path."""


def sources_of(model: StepModel, ops: Sequence[Operation] = ()) -> list[str]:
    """The sources a prediction of ``model`` after ``ops`` draws: the varied parameter paths
    that the model after them reads (host noise and interference first), then ``window`` and
    ``steps``."""
    varied, _ = uncertain_params(model, ops)
    first = [p for p in LABELS if p in varied]
    return first + sorted(p for p in varied if p not in first) + [WINDOW, STEPS]


def width_sources(model: StepModel, ops: Sequence[Operation], plan, steps: int, warmup: int,
                  seed: int, point_us: float, jobs: int = 1,
                  measured_steps: int | None = None) -> dict[str, float]:
    """Source → P90 − P10 (in % of ``point_us``) of the draws of ``plan`` with that source
    alone (see the module docstring); arguments as for
    :func:`scenarios.draws.draw_means`."""
    out = {}
    for src in sources_of(model, ops):
        if src in plan[0][0] and all(
                get_value(perturb(model, {src: f[src]}), src) == get_value(model, src)
                for f, _ in plan):
            out[src] = 0.0     # no draw changes the value (an integer a factor rounds back)
            continue
        means, _ = draw_means(model, ops, plan, steps, warmup, seed, jobs,
                                 sources={src}, measured_steps=measured_steps)
        p10, _, p90 = quantiles(means)
        out[src] = 100 * (p90 - p10) / point_us
    return out


def width_line(total_pct: float | None, widths: dict[str, float]) -> str:
    """``width 37.6 % of the prediction (P10–P90): host noise ±17.2 %, interference ±2.5 %,
    ...; sources in quadrature ±17.9 %`` (each source's half-width; largest first)."""
    if total_pct is None:
        return "no interval"
    if not widths:
        return f"width {total_pct:.1f} % of the prediction (P10–P90)"
    parts = [f"{LABELS.get(k, k)} ±{v / 2:.1f} %"
             for k, v in sorted(widths.items(), key=lambda kv: -kv[1])]
    rss = math.sqrt(float(np.sum(np.square(list(widths.values()))))) / 2
    return (f"width {total_pct:.1f} % of the prediction (P10–P90, ±{total_pct / 2:.1f} %): "
            + ", ".join(parts) + f"; sources in quadrature ±{rss:.1f} %")
