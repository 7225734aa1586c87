"""From rank fits (:class:`calibration.rank_fit.RankFit`) to the :class:`StepModel`: one
rank's model (:func:`single_model`), or several ranks combined (:func:`combine_ranks`), with
every parameter's source (:func:`mark_sources`).

**Ranks.** The rank comes from ``distributedInfo.rank`` (a dict, or the Python-repr string
some Kineto versions write; a rank or world size beyond ``MAX_RANK_ID`` is ignored with a
warning), else from a ``rank<N>``/``worker<N>`` in the file name; files with neither take the
lowest free ranks in file-name order (a single file is rank 0), with a warning. Two files that
claim the same rank are taken as separate captures, not ranks of one run: the first by file
name is used, the other ignored (a warning names both). Clocks are aligned on matched
collectives (the k-th collective of a name on every rank ends at the same instant, as a
collective finishes only when the last rank arrives): each rank's offset is the median
difference of those ends against the first rank. Each collective is split into arrival skew
(last arrival − this rank's arrival) and transfer (end − last arrival, i.e. the duration on
the last rank to arrive, never the mean); the model's collective ``dur_us`` is the transfer.
The model's host ops and tasks are those of the rank that arrives first (its own work is
never hidden behind waiting). Every other rank's lateness against it goes into its
``RankParams``: the lateness at the first collective as ``delay_us``, later increases as
``phase_extra_us`` of the collective's phase; all of it is scaled down
(``meta.notes["skew_scale"]``) when the reference rank's measured waiting is smaller, i.e.
when it hid part of the lateness behind its own host work: that cap simulates the reference
rank alone, so it is left to the caller (:class:`calibration.pending.SkewCap`,
:func:`models.skew_cap.cap_skew`). The measured step of a multi-rank model is, per step
number, the slowest rank's step.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from stepsim.calibration.pending import Pending, SkewCap
from stepsim.calibration.rank_fit import RankFit
from stepsim.models.params import (LAUNCH_QUEUE_DEPTH, CommParams, DeviceParams, HostParams,
                                   LoaderParams, Meta, RankParams, StepModel)

__all__ = ["single_model", "combine_ranks", "mark_sources", "queue_depth", "number_unranked"]


def single_model(fit: RankFit, paths: list[Path]) -> StepModel:
    """The StepModel of one rank's fit (``paths``: the traces it came from)."""
    meta = Meta(name=fit.path.name, sources=fit.sources, traces=[str(p) for p in paths],
                steps_used=fit.steps_used, measured_step_us=fit.measured_us,
                warnings=fit.warnings, notes=dict(fit.notes))
    meta.notes["measured_median_step_us"] = fit.median_us
    meta.notes["rank_source"] = fit.rank_from
    model = StepModel(loader=fit.loader, host=HostParams(ops=fit.ops),
                      device=DeviceParams(streams=fit.streams,
                                          launch_queue_depth=queue_depth([fit])),
                      comm=CommParams(world_size=max(1, fit.world_size)),
                      ranks=[RankParams(rank=max(0, fit.rank))], meta=meta, replay=fit.replay)
    mark_sources(model, "measured" if fit.rank_from == "distributedInfo" else "assumed",
                 ref_rank=model.ranks[0].rank)
    return model


def queue_depth(fits: list[RankFit]) -> int:
    """The launch queue's depth: ``LAUNCH_QUEUE_DEPTH``, or more when a trace shows more
    launches pending without the host blocking."""
    return max([LAUNCH_QUEUE_DEPTH] + [f.peak_pending for f in fits])


def mark_sources(model: StepModel, world_size: str, ref_rank: int) -> None:
    """Give every parameter of ``model`` a source in ``meta.sources`` (in place), each key a
    dotted path that :mod:`scenarios.paths` resolves; sources the fit already set (the
    loader's produce time) are kept.

    Measured: the host ops and the device tasks (durations, order, bytes; their inferred
    cross-stream waits are structure, counted in ``notes["inferred_waits"]``), and the
    reference rank's skew (zero by definition). Inferred: ``device.launch_queue_depth`` when a
    trace showed more than ``LAUNCH_QUEUE_DEPTH`` launches pending (else assumed),
    ``device.gap_scale`` when the tasks have gaps (idle the trace does not explain), the
    other ranks' skew. Assumed: every loader
    and comm setting a GPU trace does not record, ``host.uses_core``; ``comm.world_size`` is
    ``world_size``. Rank numbers are identifiers, not quantities: where each came from is in
    ``notes["rank_source"]`` and the warnings."""
    src: dict[str, str] = {"host.ops": "measured", "host.uses_core": "assumed",
                           "device.streams": "measured"}
    has_gap = any(t.gap_us > 0 for ts in model.device.streams.values() for t in ts)
    src["device.gap_scale"] = "inferred" if has_gap else "measured"
    src["device.launch_queue_depth"] = ("inferred" if model.device.launch_queue_depth
                                        > LAUNCH_QUEUE_DEPTH else "assumed")
    src.update({f"loader.{k}": "assumed" for k in LoaderParams.model_fields})
    # comm.line_bytes is no calibrated figure: DDP's bucket rebuild sets it (models.ddp);
    # comm.cold_resume(_opt) and comm.barrier_exit are only the gloo harness's probes
    src.update({f"comm.{k}": "assumed" for k in CommParams.model_fields
                if k not in ("line_bytes", "cold_resume", "cold_resume_opt", "barrier_exit")})
    src["comm.world_size"] = world_size
    for r in model.ranks:
        how = "measured" if r.rank == ref_rank else "inferred"
        src[f"ranks.{r.rank}.delay_us"] = how
        src[f"ranks.{r.rank}.phase_extra_us"] = how
    src.update({k: v for k, v in model.meta.sources.items() if k in src})
    model.meta.sources = src


def number_unranked(fits: list[RankFit], warnings: list[str]) -> None:
    """Files with no rank (no ``distributedInfo``, none in the name) become the lowest free
    ranks in file-name order, with a warning naming them: several files of one job, never
    one of them silently dropped."""
    taken = {f.rank for f in fits}
    unranked = sorted((f for f in fits if f.rank < 0), key=lambda f: f.path.name)
    rank = 0
    for f in unranked:
        while rank in taken:
            rank += 1
        f.rank = rank
        taken.add(rank)
    if unranked:
        warnings.append(f"{', '.join(f.path.name for f in unranked)}: no rank in "
                        "distributedInfo or file name; taken as rank(s) "
                        f"{', '.join(str(f.rank) for f in unranked)} of one job, in file-name "
                        "order")


def combine_ranks(fits: list[RankFit], paths: list[Path]) -> Pending:
    """One StepModel for several ranks: the structure of the rank that arrives first at the
    collectives (its work is never hidden behind waiting), collective durations from the last
    rank to arrive, and every other rank's lateness as its ``RankParams`` skew, with the cap
    that lateness still needs (:class:`calibration.pending.SkewCap`; none for one rank)."""
    warnings: list[str] = []
    for f in fits:
        warnings += f.warnings
    by_rank: dict[int, RankFit] = {}
    number_unranked(fits, warnings)
    for f in sorted(fits, key=lambda f: f.path.name):
        if f.rank in by_rank:
            used = by_rank[f.rank].path.name
            warnings.append(f"{f.path.name} and {used} both claim rank {f.rank}: taken as two "
                            f"separate captures, not two ranks of one run; using {used} (first "
                            f"by file name) and ignoring {f.path.name}")
            continue
        by_rank[f.rank] = f
    ranks = sorted(by_rank)
    if len(ranks) == 1:
        f = by_rank[ranks[0]]
        f.warnings = warnings
        return Pending(single_model(f, paths))
    # --- match collectives by (name, occurrence) and align clocks on their ends
    def keyed(f: RankFit):
        seen: dict[str, int] = {}
        out = {}
        for tid_, name, s0, e0, _gs in f.collectives:
            k = seen.get(name, 0)
            seen[name] = k + 1
            out[(name, k)] = (tid_, f.base_ns + s0, f.base_ns + e0)
        return out

    colls = {r: keyed(by_rank[r]) for r in ranks}
    common = set.intersection(*(set(c) for c in colls.values())) if colls else set()
    if not common:
        warnings.append("no collective matches across ranks: clocks not aligned, no skew fitted")
    first = ranks[0]
    offset = {r: 0 for r in ranks}
    for r in ranks[1:]:
        d = [colls[r][k][2] - colls[first][k][2] for k in common]
        offset[r] = int(np.median(d)) if d else 0
    order = sorted(common, key=lambda k: colls[first][k][1])
    arrive = {r: [colls[r][k][1] - offset[r] for k in order] for r in ranks}
    # the reference: the rank that arrives first (median lateness against the earliest)
    if order:
        earliest = np.min(np.array([arrive[r] for r in ranks]), axis=0)
        late_med = {r: float(np.median(np.array(arrive[r]) - earliest)) for r in ranks}
        ref_rank = min(ranks, key=lambda r: (late_med[r], r))
    else:
        ref_rank = first
    ref = by_rank[ref_rank]
    # transfer time of each collective: its duration on the last rank to arrive
    transfer: dict[str, float] = {}
    skew_us: dict[int, list[float]] = {r: [] for r in ranks}
    for i, k in enumerate(order):
        arr = {r: arrive[r][i] for r in ranks}
        last_r = max(ranks, key=lambda r: (arr[r], r))
        _, s_l, e_l = colls[last_r][k]
        transfer[colls[ref_rank][k][0]] = (e_l - s_l) / 1000.0
        for r in ranks:
            skew_us[r].append((arr[last_r] - arr[r]) / 1000.0)
    streams = {}
    for sname, ts in ref.streams.items():
        out = []
        for t in ts:
            if t.id in transfer:
                out.append(t.model_copy(update={"dur_us": transfer[t.id], "breakdown_us": {}}))
            else:
                out.append(t)
        streams[sname] = out
    phase_of = {t.id: t.phase for ts in ref.streams.values() for t in ts}
    # each rank's lateness against the reference, by collective: the first goes to delay_us,
    # later increases to the phase of the collective where they show
    rank_params = []
    for r in ranks:
        if r == ref_rank or not order:
            rank_params.append(RankParams(rank=r))
            continue
        late = [(arrive[r][i] - arrive[ref_rank][i]) / 1000.0 for i in range(len(order))]
        delay = max(0.0, late[0])
        extra: dict[str, float] = {}
        prev = late[0]
        for i in range(1, len(order)):
            inc = late[i] - max(prev, 0.0)
            if inc > 0:
                ph = phase_of.get(colls[ref_rank][order[i]][0], "forward")
                if ph == "data":
                    ph = "forward"
                extra[ph] = extra.get(ph, 0.0) + inc
            prev = late[i]
        has_phase = {t.phase for ts in streams.values() for t in ts if t.kind != "collective"}
        extra = {k: v for k, v in extra.items() if k in has_phase and v > 0}
        rank_params.append(RankParams(rank=r, delay_us=delay, phase_extra_us=extra))
    # measured: the job pays the slowest rank in each step
    numbers = set.intersection(*(set(by_rank[r].step_us_by_number) for r in ranks))
    if numbers:
        nums = sorted(numbers)
        job = [max(by_rank[r].step_us_by_number[n] for r in ranks) for n in nums]
    else:
        nums = ref.steps_used
        job = ref.measured_us
        warnings.append("ranks share no step number; measured step times are the reference rank's")
    notes = dict(ref.notes)
    notes.update({
        "reference_rank": ref_rank,
        "ranks": ",".join(map(str, ranks)),
        "clock_offsets_us": ",".join(f"{r}:{offset[r] / 1000.0:.1f}" for r in ranks),
        "collectives_matched": len(order),
        "arrival_skew_us_median": ",".join(
            f"{r}:{float(np.median(skew_us[r])) if skew_us[r] else 0.0:.1f}" for r in ranks),
        "measured_median_step_us": float(np.median(job)),
        "per_rank_median_step_us": ",".join(f"{r}:{by_rank[r].median_us:.1f}" for r in ranks),
    })
    notes["rank_source"] = ",".join(f"{r}:{by_rank[r].rank_from}" for r in ranks)
    world = max([f.world_size for f in by_rank.values()] + [len(ranks)])
    meta = Meta(name=f"{len(ranks)} ranks", sources=dict(ref.sources),
                traces=[str(p) for p in paths], steps_used=nums, measured_step_us=job,
                warnings=warnings, notes=notes)
    # a window replay is of one rank: the reference rank's captured values are dropped
    ops = [op.model_copy(update={"replay_us": None}) for op in ref.ops]
    streams = {s: [t.model_copy(update={"replay_us": None, "replay_gap_us": None}) for t in ts]
               for s, ts in streams.items()}
    model = StepModel(loader=ref.loader, host=HostParams(ops=ops),
                      device=DeviceParams(streams=streams, launch_queue_depth=queue_depth(fits)),
                      comm=CommParams(world_size=world),
                      ranks=rank_params, meta=meta)
    from_info = any(f.rank_from == "distributedInfo" for f in by_rank.values())
    mark_sources(model, "measured" if from_info else "inferred", ref_rank)
    alone = model.model_copy(update={"ranks": [RankParams(rank=ref_rank)]})
    return Pending(model, skew=SkewCap(alone=alone, ref_step_us=ref.median_us))

