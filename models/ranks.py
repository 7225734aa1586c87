"""Per-rank differences of the simulated host: a rank's extra time in a phase that runs on the
host (a CPU training step has no device task to put it on)."""
from __future__ import annotations

from dataclasses import replace

from stepsim.models.host import HostOpPlan
from stepsim.models.params import StepModel
from stepsim.simcore.dists import Empirical

__all__ = ["rank_host_plan"]


def rank_host_plan(model: StepModel, rank_index: int, plans: list[HostOpPlan]
                   ) -> list[HostOpPlan]:
    """One rank's host ops: its ``phase_extra_us`` of a phase without device tasks (a CPU
    training step) spread over that phase's ``cpu`` ops in proportion to their duration (each
    measured sample shifted by the op's share)."""
    rp = model.ranks[rank_index]
    dev = {t.phase for t in model.task_map().values() if t.kind != "collective"}
    ops = model.host.ops
    out = list(plans)
    for phase, extra in rp.phase_extra_us.items():
        idx = [j for j, op in enumerate(ops) if op.kind == "cpu" and op.phase == phase]
        if phase in dev or not idx or extra <= 0:
            continue
        total = sum(ops[j].dur_us for j in idx)
        for j in idx:
            add = extra * (ops[j].dur_us / total if total > 0 else 1 / len(idx))
            p = out[j]
            out[j] = replace(p, dur_us=p.dur_us + add, samples=None if p.samples is None else
                             Empirical(tuple(v + add for v in p.samples.samples_us)))
    return out
