"""Sweeps: one or more parameters over lists of values (a grid), each point a prediction, run
in parallel across processes, with the knee of the curve.

Each point is exactly ``predict(model, base + [set path=value, ...], same steps and seed,
brief=True)``, so a sweep equals the individual runs; a point's summary holds what a sweep
reports (step times, bottleneck, critical path: :func:`models.metrics.brief_summary`), not
its lanes or device categories (simulate the point for those). Points are in grid order: the
last parameter varies fastest.

**Knee.** Along each parameter (the others held at the best point's values), the knee is the
first value, in the order given, whose mean step is within ``knee_tol`` of the best along that
line: where more stops helping. The reason says why, from the bottlenecks on either side: the
bottleneck changed (the parameter no longer limits the step), it stayed (the parameter does
not relieve it; for DataLoader workers, more threads than host cores), or the curve is still
falling at the last value (extend the sweep; unless the last two points' P10-P90 intervals
overlap: that gain is within the interval).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from stepsim.models.params import StepModel
from stepsim.scenarios.parallel import Progress, run_many
from stepsim.scenarios.paths import resolve
from stepsim.scenarios.predict import Prediction, predict
from stepsim.scenarios.transforms import (Operation, PrefetchWithoutWorkers, RemoveOp, ScaleOp,
                                          SetOp, apply_ops, apply_with_notes, parse_value)
from stepsim.simcore.errors import ModelError
from stepsim.simcore.gcpause import gc_paused


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: parameter path → value, and its prediction."""

    values: dict[str, Any]
    prediction: Prediction


@dataclass(frozen=True)
class Knee:
    """Where more of ``path`` stops helping (µs).

    Attributes:
        path / value / step_us: the knee.
        best_value / best_step_us: the best point along the same line: of the values whose
            mean step rounds to the lowest's at the 0.1 ms a sweep shows, the first in the
            order given (the smallest setting, for an ascending list).
        reason: why, in words.
        best_ties: the other values along the line whose mean step rounds the same (a tie).
    """

    path: str
    value: Any
    step_us: float
    best_value: Any
    best_step_us: float
    reason: str
    best_ties: tuple = ()


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep.

    Attributes:
        grid: path → the values swept, in the order given.
        base: the base operations, in words.
        points: every grid point, in grid order (but those left out).
        knees: path → its knee.
        notes: what the points could not honour as given, in words: points left out (a
            prefetch_factor without workers, which PyTorch's DataLoader refuses), a
            prefetch_factor dropped with the workers.
    """

    grid: dict[str, list]
    base: str
    points: tuple[SweepPoint, ...]
    knees: dict[str, Knee]
    notes: tuple[str, ...] = ()

    @property
    def best(self) -> SweepPoint:
        return min(self.points, key=lambda p: p.prediction.mean_step_us)


MAX_POINTS = 256
"""Most grid points a sweep simulates: a point is a whole simulation (about 0.2 s on 2 cores
at 200 steps), and a grid of 1,025 × 16 values ran for minutes (2026-12-05)."""
MAX_POINT_DRAWS = 4096
"""Most points × Monte Carlo draws a sweep simulates (``--draws`` per point)."""


def parse_axis(text: str) -> tuple[str, list]:
    """``loader.num_workers=0,1,2,4`` → ``("loader.num_workers", [0, 1, 2, 4])``. Each value
    is read as ``--set`` reads one (:func:`scenarios.transforms.parse_value`: ``1e-3``,
    ``true``, ``{mean_us: 900}``); flow lists and maps and quoted text may hold commas. (They
    were read as one YAML 1.1 list, which left ``1e-3`` as text, refused as "not a number",
    and read ``yes`` as true and ``1:4`` as 64, where ``--set`` reads neither.)

    Raises:
        ModelError: no ``=``, no values, an empty value, repeated values or bad brackets.
    """
    path, eq, vals = text.partition("=")
    if not eq or not path.strip() or not vals.strip():
        raise ModelError(f"bad sweep axis {text!r}: expected PATH=V1,V2,... "
                         "(e.g. loader.num_workers=0,1,2,4)")
    pieces = _split_values(vals, text)
    if len(pieces) > MAX_POINTS:
        raise ModelError(f"sweep axis {path.strip()!r} has {len(pieces)} values; a sweep "
                         f"simulates at most {MAX_POINTS} points")
    values = [parse_value(v) for v in pieces]
    if any(values.count(v) > 1 for v in values):
        raise ModelError(f"sweep axis {path.strip()!r} repeats a value")
    return path.strip(), values


def _split_values(vals: str, text: str) -> list[str]:
    """``vals`` cut at its commas outside brackets, braces and quotes; raises ModelError for
    an empty value or unbalanced brackets."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(vals):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                break
        elif ch == "," and depth == 0:
            pieces.append(vals[start:i].strip())
            start = i + 1
    if depth or quote:
        raise ModelError(f"bad sweep values in {text!r}: unbalanced brackets or quotes")
    pieces.append(vals[start:].strip())
    if not all(pieces):
        raise ModelError(f"bad sweep values in {text!r}: an empty value (a comma too many?)")
    return pieces


@gc_paused   # a point's records live until it ends: the collector's passes gain nothing
def _point(model: StepModel, item) -> Prediction:
    """A point's prediction without its model (the caller has it: ``model`` after the ops), so
    the model does not travel back from a worker."""
    ops, steps, warmup, seed, intervals = item
    return replace(predict(model, ops, steps=steps, warmup=warmup, seed=seed,
                           intervals=intervals, brief=True), model=None)


def sweep(model: StepModel, grid: dict[str, Sequence[Any]], base: Sequence[Operation] = (),
          steps: int | None = None, warmup: int = 20, seed: int = 0, intervals: bool | int = False,
          jobs: int = 1, progress: Progress | None = None, knee_tol: float = 0.05) -> SweepResult:
    """Predict every point of ``grid`` (see the module docstring).

    Args:
        grid: parameter path → values (at least one path, each with at least one value).
        base: operations applied before each point's ``set``.
        intervals: Monte Carlo draws per point (as :func:`scenarios.predict.predict`).
        jobs / progress: processes and progress hook (one call per point).
        knee_tol: relative distance from the best that counts as "stopped helping".

    Raises:
        ModelError: an empty grid, an unknown path (before anything runs), or a point that
            cannot be simulated (the message names the value).
    """
    if not grid or any(len(v) == 0 for v in grid.values()):
        raise ModelError("a sweep needs at least one parameter with at least one value")
    n = math.prod(len(v) for v in grid.values())
    sims = n * max(int(intervals), 1) if not isinstance(intervals, bool) else n
    if n > MAX_POINTS or sims > MAX_POINT_DRAWS:
        raise ModelError(f"a sweep of {n} points ({' x '.join(str(len(v)) for v in grid.values())}"
                         f" values){f' x {int(intervals)} draws' if sims > n else ''}: at most "
                         f"{MAX_POINTS} points and {MAX_POINT_DRAWS} point draws are "
                         "simulated (each is a whole simulation); sweep fewer values")
    start = apply_ops(model, base)
    for path in grid:
        resolve(start, path)
    paths = list(grid)
    # a set, scale or remove takes the captured window away first (models.params.without_replay):
    # after only those, take it away once, not in every point (nor in every point's check);
    # draws read the window, so points with draws keep it
    bare = model.without_replay() if all(
        isinstance(o, (SetOp, ScaleOp, RemoveOp)) for o in base) else model
    combos, notes = _valid_points(bare, base, paths,
                                  list(itertools.product(*(grid[p] for p in paths))))
    lean = model if intervals else bare
    items = [(list(base) + [SetOp(path=p, value=v) for p, v in zip(paths, combo)],
              steps, warmup, seed, intervals) for combo in combos]
    # the model goes to the workers once (forked), and each point's comes back as applied here
    preds = [replace(pr, model=apply_ops(lean, it[0])) for it, pr in zip(
        items, run_many(_point, items, jobs=jobs, progress=progress, shared=lean))]
    points = tuple(SweepPoint(dict(zip(paths, c)), pr) for c, pr in zip(combos, preds))
    result = SweepResult({p: list(grid[p]) for p in paths},
                         "; ".join(o.describe() for o in base) or "baseline", points, {})
    knees = {p: _knee(result, p, start, knee_tol) for p in paths}
    return SweepResult(result.grid, result.base, points, knees,
                       notes + _not_the_default_cap(start, grid.get("comm.bucket_cap_mb", ())))


def _not_the_default_cap(start: StepModel, caps: Sequence[Any]) -> tuple[str, ...]:
    """The note of a swept ``comm.bucket_cap_mb`` equal to the model's own cap while the
    model's first bucket has its own, smaller cap (DDP's default: 25 MiB, the first bucket
    1 MiB): torch's explicit ``bucket_cap_mb`` caps the first bucket too
    (:func:`models.ddp.set_bucket_caps`), so that point is not the model's setting (fresh12
    read the sweep's 25 as the baseline)."""
    c = start.comm
    if not c.grad_params or c.first_bucket_cap_mb == c.bucket_cap_mb or not any(
            isinstance(v, (int, float)) and v == c.bucket_cap_mb for v in caps):
        return ()
    return (f"comm.bucket_cap_mb={c.bucket_cap_mb:g} is not this model's setting: an explicit "
            f"bucket_cap_mb caps DDP's first bucket too (torch), which the model's setting "
            f"(DDP's default) caps at first_bucket_cap_mb={c.first_bucket_cap_mb:g} MiB; the "
            "baseline is the setting as captured",)


def _valid_points(model: StepModel, base: Sequence[Operation], paths: list[str],
                  combos: list[tuple]) -> tuple[list[tuple], tuple[str, ...]]:
    """The grid points PyTorch's DataLoader accepts, and the notes of
    :attr:`SweepResult.notes`: a point that sets a prefetch_factor without workers is left out
    (the rest of a grid over both still runs); a model's prefetch_factor at a point without
    workers goes with them (:func:`scenarios.transforms.apply_with_notes`).

    Raises:
        PrefetchWithoutWorkers: every point is one PyTorch refuses.
    """
    if not {"loader.num_workers", "loader.prefetch_factor"} & set(paths):
        return combos, ()
    kept, out, notes, error = [], [], {}, None
    for combo in combos:
        ops = [*base, *(SetOp(path=p, value=v) for p, v in zip(paths, combo))]
        try:
            said = apply_with_notes(model, ops)[1]
        except PrefetchWithoutWorkers as e:
            out.append(", ".join(f"{p}={v}" for p, v in zip(paths, combo)))
            error = e
            continue
        kept.append(combo)
        notes.update(dict.fromkeys(said))
    if not kept:
        raise error
    if out:
        notes[f"{len(out)} grid point(s) left out, which PyTorch's DataLoader refuses (a "
              f"prefetch_factor needs num_workers > 0): {'; '.join(out)}"] = None
    return kept, tuple(notes)


TIE_US = 100.0
"""Mean steps that round to the same multiple of this (µs: the 0.1 ms a sweep's table and
knee line show) tie for the best along a line."""


def _overlap(a: Prediction, b: Prediction) -> bool:
    """Whether both predictions have P10-P90 intervals and those overlap."""
    return (a.has_interval and b.has_interval and a.p10_step_us <= b.p90_step_us
            and b.p10_step_us <= a.p90_step_us)


def _knee(result: SweepResult, path: str, start: StepModel, tol: float) -> Knee:
    best = result.best.values
    line = [pt for pt in result.points
            if all(pt.values[q] == best[q] for q in result.grid if q != path)]
    steps = [pt.prediction.mean_step_us for pt in line]
    low = min(steps)
    k = next(i for i, s in enumerate(steps) if s <= low * (1 + tol))
    knee, first = line[k], line[0]
    tied = [i for i, s in enumerate(steps) if round(s / TIE_US) == round(low / TIE_US)]
    b = tied[0]
    kp, fp = knee.prediction, first.prediction
    v = knee.values[path]
    if k == 0:
        reason = _no_gain(line, path, tol)
    elif k == len(line) - 1:
        prev = line[k - 1]
        pp = prev.prediction
        if _overlap(kp, pp):
            reason = (f"the last value ({v}) is {1 - kp.mean_step_us / pp.mean_step_us:.1%} "
                      f"faster than {path}={prev.values[path]}, within their P10-P90 "
                      "intervals (they overlap): the gain is within the interval, so extending "
                      "the sweep would not show a clear one")
        else:
            reason = f"still improving at the last value ({v}); extend the sweep"
    elif kp.bottleneck != fp.bottleneck:
        reason = (f"from {path}={v}, {fp.bottleneck_label} no longer limits the step; it is "
                  f"bound by {kp.bottleneck_label}")
    else:
        reason = f"{kp.bottleneck_label} stays the bottleneck; more {path} gains under {tol:.0%}"
        if path.endswith("num_workers") and isinstance(v, int):
            cores = start.loader.host_cores
            if v + 1 >= cores:
                reason += f" (workers and the main thread already fill the {cores} host cores)"
    return Knee(path, v, steps[k], line[b].values[path], steps[b], reason,
                tuple(line[i].values[path] for i in tied[1:]))


def _no_gain(line: list[SweepPoint], path: str, tol: float) -> str:
    """Why the first value of ``path`` along ``line`` is its knee, as the table shows it: the
    other values are slower beyond ``tol`` (their speed-ups against it and what bounds them),
    or within ``tol`` of it (what bounds the step, at the first value and, where it differs,
    at the others)."""
    first, rest = line[0].prediction, [pt.prediction for pt in line[1:]]
    v = line[0].values[path]
    ups = [first.mean_step_us / p.mean_step_us for p in rest]
    labels = list(dict.fromkeys(p.bottleneck_label for p in rest))
    if rest and all(u < 1 / (1 + tol) for u in ups):
        lo, hi = min(ups), max(ups)
        x = f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}x-{hi:.2f}x"
        return (f"no value is faster than {path}={v}; the others make the step slower ({x} "
                f"vs it), bound by {' / '.join(labels)}")
    said = (f"changing {path} does not help by more than {tol:.0%}: the step is bound by "
            f"{first.bottleneck_label}")
    other = [b for b in labels if b != first.bottleneck_label]
    return said + (f" at {v}, by {' / '.join(other)} at other values" if other else "")
