"""Which of a model's co-run parameters a verdict across co-runner settings rests on without a
measurement of this run (issue 10, fresh13 2026-12-07: ``sweep`` named num_workers=0 the knee
and ``diagnose`` dismissed 2 workers at 0.88x, where the runs measured 0 workers the slowest
and 2 the fastest; the ranking rested on the interference fitted at its search's bound and on
the team stall's prior).

A what-if that changes the threads beside each other (``loader.num_workers``, torch's intra-op
threads) moves the step by these parameters: the co-run interference, the team stall ``γ``,
the slowdown past the cores and the main thread's own cost of making its batches. One whose
source is ``assumed`` is a stated prior (a fit refused at its bound is one too,
:func:`calibration.corun.fit_interference`): its range can reorder the settings."""
from __future__ import annotations

__all__ = ["CORUN_PARAMS", "corun_path", "priors_caveat"]

CORUN_PARAMS = {"host.interference": "interference_range", "host.team_stall": "team_stall_range",
                "host.oversub": "oversub_range", "host.same_thread": "same_thread_range"}
"""The co-run parameters (their source key) and the ``HostParams`` field of their range."""


def corun_path(path: str) -> bool:
    """Whether a swept or set path changes the threads beside each other."""
    return path in ("loader.num_workers", "intra_op_threads") or path.endswith(".threads") \
        or "num_threads" in path


def priors_caveat(model) -> str:
    """'' when every co-run parameter of ``model`` (a ``StepModel``) was measured or inferred;
    else one clause naming those that are stated priors, with their ranges."""
    if model is None:
        return ""
    src = model.meta.sources
    out = []
    for key, field in CORUN_PARAMS.items():
        if src.get(key) != "assumed":
            continue
        rng = getattr(model.host, field, None)
        out.append(f"{key.split('.', 1)[1]}" + (f" {rng[0]:g}–{rng[1]:g}" if rng else ""))
    if not out:
        return ""
    return ("this verdict rests on co-run parameters not measured on this run (stated priors: "
            + ", ".join(out) + "), whose ranges can reorder the settings: validate it on a "
              "re-measured run before acting on it")
