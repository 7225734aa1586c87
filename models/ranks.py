"""Per-rank differences of the simulated host: a rank's extra time in a phase that runs on the
host (a CPU training step has no device task to put it on)."""
from __future__ import annotations

from dataclasses import replace

from stepsim.models.host import HostOpPlan
from stepsim.models.params import StepModel
from stepsim.simcore.dists import Empirical
from stepsim.simcore.errors import SimulationError

__all__ = ["rank_host_plan"]


def rank_host_plan(model: StepModel, rank_index: int, plans: list[HostOpPlan]
                   ) -> list[HostOpPlan]:
    """One rank's host ops: its ``phase_extra_us`` of a phase without device tasks (a CPU
    training step) spread over that phase's ``cpu`` ops in proportion to their duration (each
    measured sample shifted by the op's share), and its ``phase_wall_us`` of such a phase as
    one wall-clock op (``HostOpPlan.wall``) after the phase's last ``cpu`` op."""
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
    # its phase_wall_us: wall-clock time busy on a core after the phase's last cpu op
    at = {}
    for phase, wall in rp.phase_wall_us.items():
        idx = [j for j, op in enumerate(ops) if op.kind == "cpu" and op.phase == phase]
        if phase in dev or not idx:
            raise SimulationError(f"rank {rp.rank}: phase_wall_us names phase {phase!r}, which "
                                  + ("has device tasks (use phase_extra_us)" if phase in dev
                                     else "has no host cpu ops"))
        if wall > 0:
            at[phase] = idx[-1]
    for phase, j in sorted(at.items(), key=lambda kv: -kv[1]):
        out.insert(j + 1, HostOpPlan("cpu", "straggle", rp.phase_wall_us[phase], None,
                                     "straggle", None, (), out[j].optimizer, wall=True))
    return out
