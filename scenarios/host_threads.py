"""The training step's intra-op threads as a named fix (``--fix intra_op_threads``): what
``torch.set_num_threads(k)`` in the training script does to the model, and whether the step's
threads are oversubscribed by the threads beside it.

torch's default is one intra-op thread per core; beside DataLoader workers the step's OpenMP
team then has more runnable threads than cores and stalls at every parallel region
(:mod:`models.cpu`). Fewer threads end the stall but run the parallel part on fewer threads:
the model keeps that part's work, the captured parallel wall × ``capture_threads`` ×
``parallel_efficiency`` (:func:`models.plans.threads_ratio`), where the parallel share of the
wall is inferred from the capture's CPU and wall time and the efficiency (the share of that CPU
that was work, not spinning) is assumed by calibration and varied by the prediction intervals,
unless the fix is given a measured one (``efficiency=``, e.g. from a capture at one thread).
"""
from __future__ import annotations

from pydantic import Field

from stepsim.models.param_base import MAX_THREADS
from stepsim.models.params import StepModel
from stepsim.simcore.errors import ModelError
from stepsim.models.rank_threads import fitting_rank_threads, ranks_on_host
from stepsim.scenarios.fix_types import FixArgs, nothing
from stepsim.scenarios.paths import validated
from stepsim.scenarios.rank_one_thread import (CAPTURE_LINE, one_thread_ranks, rank_threads,
                                              readings)

__all__ = ["ThreadsArgs", "beside_threads", "fitting_threads", "intra_op_threads",
           "oversubscribed", "rank_keys", "threads_candidates"]


class ThreadsArgs(FixArgs):
    threads: int | None = Field(default=None, ge=1, le=MAX_THREADS)
    """``torch.set_num_threads(threads)`` in the training script (default: the cores the
    DataLoader's threads leave, at least 1)."""
    efficiency: float | None = Field(default=None, gt=0, le=1)
    """Share of the parallel part's CPU time that was work, not threads spinning (default: the
    model's ``parallel_efficiency``, assumed by calibration and varied by the intervals; give a
    measured one, e.g. from a capture at the other thread count)."""


def beside_threads(m: StepModel) -> int:
    """The DataLoader's runnable threads beside the training step: its workers' threads and
    the pin-memory thread (which runs only with workers, and only with a device:
    :meth:`StepModel.pins_memory`)."""
    lp = m.loader
    return lp.num_workers * lp.threads_per_worker + (1 if m.pins_memory() and lp.num_workers
                                                     else 0)


def fitting_threads(m: StepModel) -> int:
    """The intra-op threads that fit beside the DataLoader's threads on the host's cores
    (at least 1)."""
    return max(m.loader.host_cores - beside_threads(m), 1)


def _team_ops(m: StepModel) -> list[int]:
    """Indices of the host ops the simulator runs as an intra-op team: ``cpu`` ops with a
    parallel part (:meth:`models.params.StepModel.team_threads`)."""
    return [i for i, op in enumerate(m.host.ops) if op.kind == "cpu" and op.parallel_fraction > 0]


def oversubscribed(m: StepModel) -> bool:
    """Whether the training step's intra-op team (more than one thread, with a parallel part)
    and the DataLoader's threads beside it are more runnable threads than the cores."""
    team = m.team_threads()
    return m.host.uses_core and team > 1 and team + beside_threads(m) > m.loader.host_cores


def no_team_why(m: StepModel) -> str:
    """Why the training step has no parallel part in ``m``, the one that held, with its
    numbers: the capture ran one intra-op thread; or several, each DDP rank's host ops
    calibrated on one thread (:mod:`models.rank_threads`), with the fix where the ranks × their
    threads are more than the host's cores (threads per rank = cores ÷ ranks); or several,
    with the step's CPU time within its wall time (no parallel part inferred,
    :func:`calibration.host_step.split_host_step`). A user's 2-rank gloo job at 2 threads a
    rank on 2 cores was told "one intra-op thread, or a capture whose CPU time did not exceed
    its wall time" (fresh8, 2026-12-07)."""
    noted = m.meta.notes.get("intra_op_threads")
    threads = noted if isinstance(noted, int) else max(
        [op.capture_threads or op.threads for op in m.host.ops if op.kind == "cpu"] or [1])
    head = "the training step has no parallel part in the model: "
    end = ": its thread count changes nothing the model holds"
    if threads <= 1:
        return head + "the capture ran one intra-op thread" + end
    host, ranks = ranks_on_host([r.host for r in m.ranks])
    cores = m.loader.host_cores
    if len(m.ranks) < 2:
        return (head + f"the capture ran {threads} intra-op threads, but the step's CPU time did "
                "not exceed its wall time (no parallel part inferred)" + end)
    said = (head + f"its {len(m.ranks)} ranks ran {threads} intra-op threads each, and a rank's "
            "host ops are calibrated on one thread" + end)
    if ranks >= 2 and ranks * threads > cores:
        n = fitting_rank_threads(cores, ranks)
        said += (f"; {ranks} ranks × {threads} threads = {ranks * threads} on host {host}'s "
                 f"{cores} cores are oversubscribed: the fix is threads per rank = cores ÷ ranks "
                 f"= {cores} ÷ {ranks} = {n}, torch.set_num_threads({n}) in each rank, "
                 "re-captured")
    return said


def intra_op_threads(m: StepModel, a: ThreadsArgs) -> StepModel:
    """Every intra-op team's ``threads`` := ``a.threads`` (default :func:`fitting_threads`,
    refused when the team is not oversubscribed), and its ``parallel_efficiency`` := the given
    one (then measured, and not varied by the intervals). On a multi-rank model whose ranks ×
    their threads oversubscribe their host's cores (no op with a parallel part): one thread a
    rank, :func:`scenarios.rank_one_thread.one_thread_ranks`.

    Raises:
        NotApplicable: no op has a parallel part (and no ranks that one thread each prices),
            an op does not record the threads it was
            captured on, or nothing would change.
    """
    team = _team_ops(m)
    if not team and rank_threads(m) is not None and a.efficiency is None and readings(m):
        return one_thread_ranks(m, a.threads)   # DDP ranks on too few cores: one thread each
    if not team and rank_threads(m) is not None and a.efficiency is not None and readings(m):
        raise nothing("intra_op_threads", f"efficiency={a.efficiency:g} is a modelled intra-op "
                      "team's; this model's DDP ranks run their host ops on one thread each, "
                      "and one thread a rank (the fix without efficiency) has no team to give "
                      "it to: leave efficiency out")
    if not team:
        raise nothing("intra_op_threads", no_team_why(m) + (
            "; to price one thread a rank from the capture: " + CAPTURE_LINE
            if rank_threads(m) is not None else ""))
    bare = [i for i in team if m.host.ops[i].capture_threads is None]
    if bare:
        raise nothing("intra_op_threads", f"host.ops.{bare[0]} does not record the threads its "
                      "durations were measured on (capture_threads; calibrate it again)")
    now = m.team_threads()
    if a.threads is None and not oversubscribed(m):
        raise nothing("intra_op_threads", f"its {now} intra-op threads and "
                      f"{beside_threads(m)} DataLoader thread(s) fit the "
                      f"{m.loader.host_cores} cores: no thread spins for a core")
    n = a.threads if a.threads is not None else fitting_threads(m)
    if n == now and a.efficiency is None:
        raise nothing("intra_op_threads", f"the training step already runs on {n} threads")
    data = m.model_dump()
    meta = data["meta"]
    for i in team:
        data["host"]["ops"][i]["threads"] = n
        if a.efficiency is not None:
            data["host"]["ops"][i]["parallel_efficiency"] = a.efficiency
            meta["sources"][f"host.ops[{i}].parallel_efficiency"] = "measured"
            meta["ranges"].pop(f"host.ops[{i}].parallel_efficiency", None)
    return validated(data, "fix intra_op_threads")


def threads_candidates(m: StepModel) -> list[dict]:
    """The thread counts the planner tries, least aggressive first: none unless the team is
    oversubscribed (and records its capture threads), else one fewer, the fitting count, the
    halvings down to 1; on DDP ranks that oversubscribe their host's cores, one thread a rank
    (:mod:`scenarios.rank_one_thread`) where the model holds what prices it."""
    team = _team_ops(m)
    if not team and rank_threads(m) is not None:
        try:
            one_thread_ranks(m, 1)
        except ModelError:
            return []
        return [{"threads": 1}]
    if not oversubscribed(m) or any(m.host.ops[i].capture_threads is None for i in team):
        return []
    now = m.team_threads()
    halves, t = set(), now // 2
    while t >= 1:
        halves.add(t)
        t //= 2
    counts = {now - 1, fitting_threads(m), 1} | halves
    return [{"threads": t} for t in sorted((c for c in counts if 1 <= c < now), reverse=True)]


def rank_keys(m: StepModel) -> tuple[str, ...]:
    """What the fix also relieves on ``m`` (the planner's): the host's compute where DDP
    ranks × their threads spun on too few cores (their host ops run one thread each in the
    model, so the spin is in the host compute, not in a stall of a modelled team)."""
    return ("host_compute",) if rank_threads(m) is not None else ()
