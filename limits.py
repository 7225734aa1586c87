"""The defaults and bounds of the verbs' counts, fractions and step ranges: one definition that the command
line (:mod:`stepsim.cli_args`, as argparse types) and the Python API (:mod:`stepsim.api`, whose
verbs are :func:`bounded`: they raise :class:`ArgumentError`) both use, so
``stepsim.whatif(..., steps=10**9)`` is refused as ``stepsim whatif --steps 1000000000`` is.

Loads nothing heavy: ``stepsim --help`` imports it.
"""
from __future__ import annotations

import functools
import inspect
import math
from numbers import Integral, Real

from stepsim.simcore.errors import StepsimError

DEFAULT_STEPS, DEFAULT_WARMUP = None, 20
"""Measured and warm-up steps of every simulation unless told otherwise (the warm-up lets
prefetch queues fill); measured steps None: as many as it takes for the mean step's standard
error to be at most 1 % of it (:mod:`stepsim.scenarios.stepcount`). Calibrate's steady state
uses them too, so it says what ``simulate`` says."""

DEFAULT_DRAWS = 16
"""Monte Carlo draws behind a P10–P90 interval unless told otherwise: one number for every verb
that gives one (``whatif``, ``diagnose``, ``validate``, ``plan``, ``report``), so one model's
baseline gets one interval whichever verb prints it (small, so the CLI stays quick on 2 cores)."""

MAX_STEPS, MAX_DRAWS, MAX_JOBS, MAX_MOVES = 100_000, 1000, 1024, 1000
"""Most simulated (or warm-up, or drawn) steps, Monte Carlo draws, processes and plan moves a
verb takes: far beyond any useful run, and small enough that a typo is an error, not a run that
never ends."""

MAX_DRAWN_STEPS = 200_000
"""Most steps the draws of one interval simulate together (``draws × steps``, a chosen step
count counted as :data:`DRAW_STEPS`, the most a draw then takes): 1,000 draws of 30 steps took
33 s on 2 cores (2026-12-05), and ``--draws 10000 --steps 100000`` was accepted."""

DRAW_STEPS = 640
"""Most steps a draw simulates when the step count is chosen: ``scenarios.stepcount.DRAW_STEPS``
(which may not import this module; a test holds the two equal)."""

MAX_SEED = 2**32 - 1
"""The largest seed: 32 bits, the range numpy's legacy seeding and most tools take (torch's
``manual_seed`` raises past 2**64, a traceback from the demo before this bound)."""

MAX_REPEATS = 10
"""The most re-measured runs per setting ``stepsim demo --repeats`` takes: each run is about
13 s of capture per setting on two quiet cores, so 10 over the demo's five settings is about
11 minutes of capture; past that the pooled mean's interval narrows by little (the host term's
``sqrt(1/k + 1/n)`` is held by the ``n`` calibration runs)."""

MAX_PROBE_WORKERS = 64
"""The most workers ``stepsim demo --probe N`` records a probe at (:data:`demo.run.MAX_PROBE_WORKERS`,
which says why: each is a process of the demo's workload, and ``--probe 100000`` had no end)."""

COUNTS: dict[str, tuple[int, int | None]] = {
    "steps": (1, MAX_STEPS),
    "warmup": (0, MAX_STEPS),
    "plot_steps": (1, MAX_STEPS),
    "draws": (0, MAX_DRAWS),
    "jobs": (0, MAX_JOBS),          # 0: the CPUs available
    "max_moves": (1, MAX_MOVES),
    "seed": (0, MAX_SEED),
    "probe": (0, MAX_PROBE_WORKERS),
    "repeats": (1, MAX_REPEATS),
}
"""Each integer argument's least and most value (None: no most)."""

FRACTIONS = ("knee_tol", "min_gain")
"""Arguments that are a finite number ≥ 0."""


class ArgumentError(StepsimError, ValueError):
    """An argument of a verb that is out of its bounds or of the wrong type (the API's form of
    the CLI's argument error)."""


def count_problem(name: str, value: int) -> str | None:
    """What is wrong with the integer ``value`` of the count ``name`` (None: nothing)."""
    lo, hi = COUNTS[name]
    if value < lo:
        return f"{value} is below {lo}"
    if name == "draws" and value == 1:   # its P10 = P90 = the draw, even off the mean
        return "1 draw gives no P10-P90 interval (one value); give 0 for none, or 2 or more"
    if hi is not None and value > hi:
        return f"{value} is above {hi}, the most this takes"
    return None


def fraction_problem(value: float, text: str | None = None) -> str | None:
    """What is wrong with ``value`` (given as ``text``) as a fraction argument (None:
    nothing)."""
    if not math.isfinite(value) or value < 0:
        return f"{value if text is None else text} must be a finite number >= 0"
    return None


def checked(**values):
    """The values of the named counts and fractions (``checked(steps=30, draws=16)``), as
    ``int``/``float``; ``None`` passes (an optional argument left out).

    Raises:
        ArgumentError: a value out of its bounds or not a number (a ``bool`` or ``"30"``
            included), naming the argument.
    """
    out = []
    for name, v in values.items():
        if v is None:
            out.append(v)
            continue
        if name in FRACTIONS:
            if isinstance(v, bool) or not isinstance(v, Real):
                raise ArgumentError(f"{name}: {v!r} is not a number")
            problem, v = fraction_problem(float(v)), float(v)
        else:
            if isinstance(v, bool) or not isinstance(v, Integral):
                raise ArgumentError(f"{name}: {v!r} is not an integer")
            problem, v = count_problem(name, int(v)), int(v)
        if problem:
            raise ArgumentError(f"{name}: {problem}")
        out.append(v)
    named = dict(zip(values, out))
    if named.get("draws") and "steps" in named:
        steps = named["steps"] or DRAW_STEPS
        if named["draws"] * steps > MAX_DRAWN_STEPS:
            raise ArgumentError(
                f"draws: {named['draws']} draws of {steps} steps"
                f"{'' if named['steps'] else ' (the most a chosen count takes)'} are "
                f"{named['draws'] * steps:,} simulated steps; at most {MAX_DRAWN_STEPS:,} (give "
                "fewer draws or --steps)")
    return out[0] if len(out) == 1 else tuple(out)


def bounded(func):
    """A verb whose arguments named in :data:`COUNTS` or :data:`FRACTIONS` are
    :func:`checked` before it runs (its signature unchanged)."""
    sig = inspect.signature(func)
    names = [n for n in sig.parameters if n in COUNTS or n in FRACTIONS]

    @functools.wraps(func)
    def verb(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        checked(**{n: bound.arguments[n] for n in names})
        return func(*args, **kwargs)
    return verb


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """``A:B`` (either side may be left out) as (A, B): the steps numbered ``A ≤ N < B``, as a
    Python slice. Raises ValueError with the reason."""
    a, sep, b = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r} is not A:B (the ProfilerStep numbers A to B-1, e.g. 10:20)")
    try:
        lo = int(a) if a.strip() else None
        hi = int(b) if b.strip() else None
    except ValueError:
        raise ValueError(f"{text!r} is not A:B with whole numbers (e.g. 10:20)") from None
    if (lo is not None and lo < 0) or (hi is not None and hi < 0):
        raise ValueError(f"{text!r}: step numbers are not negative")
    if lo is not None and hi is not None and hi <= lo:
        raise ValueError(f"{text!r} holds no step (B must be above A; A:B is A to B-1)")
    return lo, hi
