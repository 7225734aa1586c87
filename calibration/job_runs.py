"""A multi-rank CPU job's runs of one setting, the capture and its replicates, against each
other (:mod:`calibration.calibrate` pools them and re-exports these): the host's speed per run
from the ranks' CPU time of identical work (:func:`job_speeds`), the job's wall time per run
(:func:`job_wall_factors`, :func:`with_walls`) and the outside load the capture ran under
against its replicates (:func:`held_against`). Times in µs.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.models.params import StepModel
from stepsim.simcore.errors import InputError

__all__ = ["job_wall_factors", "unprofiled_wall_us", "wall_factors"]


def job_wall_factors(runs: list[list]) -> list[float]:
    """A multi-rank CPU job's wall time per run of the calibration setting against the first
    (``runs``: per run, its ranks' sidecars in one order, the capture first): per rank the
    mean wall µs of its unprofiled steps (``profiler_on`` false; all its steps where a run
    has none) over the capture's, then per run the geometric mean over the ranks. Empty
    where a run's rank has no steps or a capture's mean is not above 0."""
    return wall_factors([[unprofiled_wall_us(side) for side in run] for run in runs])


def unprofiled_wall_us(side) -> float | None:
    """A rank's mean wall µs a step over its unprofiled steps (``profiler_on`` false; all
    its steps where it has none) from its sidecar; None without steps."""
    import numpy as np

    steps = [st for st in side.steps if st.profiler_on is False] or list(side.steps)
    return float(np.mean([st.wall_us for st in steps])) if steps else None


def wall_factors(walls: list[list[float | None]]) -> list[float]:
    """Per run, the geometric mean over its ranks of each rank's mean wall µs a step
    (``walls``: per run, per rank in one order, the first run the reference) over the first
    run's; empty where a rank has no mean, a mean is not above 0 (a timed re-run's step
    starts out of order gave a negative one, its factor NaN, the interval's host noise NaN) or
    a run has another number of ranks."""
    import numpy as np

    if not walls or any(w is None or not 0 < w < np.inf for run in walls for w in run) or \
            any(len(run) != len(walls[0]) for run in walls):
        return []
    return [float(np.exp(np.mean(np.log([w / w0 for w, w0 in zip(run, walls[0])]))))
            for run in walls]


def with_walls(model: StepModel, runs: list[list]) -> StepModel:
    """``model`` with ``host.wall_runs`` (:func:`job_wall_factors`) where it has two runs or
    more, and a warning that says which spread the interval draws from
    (:func:`models.host_speed.noise_runs`)."""
    from stepsim.models.host_speed import HOST_NOISE_PRIOR, from_walls, noise_runs

    walls = job_wall_factors(runs)
    if len(walls) < 2 or len(walls) != len(model.host.speed_runs):
        return model
    host = model.host.model_copy(update={"wall_runs": walls})
    prior = tuple(model.meta.ranges.get("host.cpu_scale", HOST_NOISE_PRIOR))
    wider = from_walls(host, noise_runs(host, prior))
    note = (f"the job's wall time per run of this setting (unprofiled steps) was "
            f"{', '.join(f'{w:.3f}' for w in walls)}x the capture's: "
            + ("wider than its CPU time of identical work, so the interval draws the host's "
               "run-to-run noise from it (the centre stays the CPU speed)" if wider else
               "no wider than its CPU time of identical work, which the interval draws from"))
    meta = model.meta
    meta = meta.model_copy(update={"sources": {**meta.sources, "host.wall_runs": "measured"},
                                   "warnings": [*meta.warnings, note]})
    return model.model_copy(update={"host": host, "meta": meta})


def held_against(model: StepModel, runs: list[list]) -> StepModel:
    """``model`` with the outside load its capture ran under against its replicates
    (:func:`calibration.outside_load.share_against_replicates`): the warning, and
    ``meta.notes.outside_load_held`` the lower of that and what calibration found alone."""
    from stepsim.calibration.outside_load import share_against_replicates

    warnings: list[str] = []
    held = share_against_replicates(runs, warnings)
    if held is None:
        return model
    notes = dict(model.meta.notes)
    notes["outside_load_held"] = min(held, notes.get("outside_load_held", 1.0))
    meta = model.meta.model_copy(update={"notes": notes,
                                         "warnings": [*model.meta.warnings, *warnings]})
    return model.model_copy(update={"meta": meta})


def job_speeds(ranks: dict[str, Path], replicates: list[tuple[Path, dict[str, Path]]]
                ) -> list[float]:
    """The host speed factors of a multi-rank capture and its replicates (folders of the same
    ranks' sidecars): per rank :func:`calibration.host_noise.replicate_speeds` against that
    rank's sidecar in each replicate, on their unprofiled steps where every run has them
    (:func:`calibration.profiler_overhead.unprofiled_views`), then per run the geometric mean
    over the ranks (the ranks share the host, so its speed is one per run)."""
    import numpy as np

    from stepsim.calibration.host_noise import replicate_speeds
    from stepsim.calibration.profiler_overhead import unprofiled_views
    from stepsim.calibration.sidecar import load_sidecar

    for path, sides in replicates:
        if list(sides) != list(ranks):
            raise InputError(path, f"not a replicate of the capture: its rank sidecars are "
                                   f"{', '.join(sides) or 'none'}, the capture's "
                                   f"{', '.join(ranks)}")
    per_rank = []
    for k, side in ranks.items():
        # compared on the unprofiled steps (calibration.profiler_overhead.unprofiled_views)
        cap, *reps = unprofiled_views([load_sidecar(side)] + [load_sidecar(sides[k])
                                                              for _, sides in replicates])
        per_rank.append(replicate_speeds(side, cap, [(sides[k], rep) for (_, sides), rep
                                                     in zip(replicates, reps)]))
    return [float(np.exp(np.mean(np.log(run)))) for run in zip(*per_rank)]
