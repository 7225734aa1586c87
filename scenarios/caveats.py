"""What a what-if asks that the model cannot honour as the user likely expects, in words
(printed as warnings beside the prediction)."""
from __future__ import annotations

from typing import Sequence

from stepsim.models.load_bound import outside_load_slowdown
from stepsim.models.params import StepModel
from stepsim.models.rank_threads import model_rank_threads
from stepsim.models.warning_record import retexted, said
from stepsim.scenarios.batch_size import batch_size_note
from stepsim.scenarios.ddp_caveats import ddp_caveats
from stepsim.scenarios.fixes import get_fix
from stepsim.scenarios.host_threads import fitting_threads, threads_candidates
from stepsim.scenarios.noop import SWEPT, has_collectives, unread_settings
from stepsim.scenarios.stepcount import simulate_counted, whole_cycles
from stepsim.scenarios.threads_outcome import efficiency_bounds, threads_outcome
from stepsim.scenarios.transforms import (FixOp, Operation, RemoveOp, ScaleOp, SetOp,
                                          apply_with_notes)
from stepsim.simcore.errors import ModelError

_COMM_COST_PATHS = ("comm.world_size", "comm.latency_us")


def input_caveats(model: StepModel) -> list[str]:
    """What is wrong with the model's own capture, whatever is asked of it: a capture that ran
    under outside load, a profiled window unlike the steps after it where no measured step
    factor took the profiler's cost out, ranks whose intra-op threads outnumber their host's
    cores with heavy-tailed steps (:mod:`models.rank_threads`) (the command line says it
    before the verb's result)."""
    out = []
    slow = outside_load_slowdown(model)
    if slow is not None:
        team = model.meta.notes.get("outside_load_team")
        more = (f", up to {(1 + slow) ** team:.1f}x through its {team}-thread training step's "
                "stall, calibrated from the loaded shares" if isinstance(team, int) and team > 1
                else "")
        out.append(said(
            f"this model was calibrated from a capture that ran under outside load (its "
            f"threads advanced {1 + slow:.1f}x slower than alone): every prediction from "
            f"it carries that run's slowdown{more}, which no interval covers; re-capture "
            "on a quiet machine", "caveat:outside_load", uncovered=True))
    drift = model.meta.notes.get("profiled_drift")
    if isinstance(drift, (int, float)) and drift > 0:
        # calibrate's warning (calibration.run_drift), said by every verb, as the load is: a
        # user's profiled window ran x2.25 its unprofiled steps, and a what-if of it +184 %
        out.append(said(
            f"this model is of a profiled window that ran {drift:.2f}x as long as the "
            "capture's unprofiled steps right after it (the machine changed within the "
            "run, or the profiler cost that much): every prediction from it carries "
            "that, which no interval covers; re-capture on a quiet machine",
            "caveat:profiled_drift", uncovered=True))
    threads = model_rank_threads(model)[0]   # ranks × intra-op threads over the host's cores
    return out + ([threads] if threads else [])


def caveats(model: StepModel, ops: Sequence[Operation], paths: Sequence[str] = ()) -> list[str]:
    """What in ``ops`` (and the swept ``paths``) the model cannot honour as the user likely
    expects, in words: a collective cost setting without ``comm.bus_gbps`` (collectives keep
    their measured durations), and a loader change where the loader was never calibrated
    (a GPU trace does not record the DataLoader's settings), and a prefetch_factor dropped with
    the workers (:func:`apply_with_notes`), a setting nothing in the model reads
    (:func:`scenarios.noop.unread_settings`), and the oversubscribed intra-op threads caveat
    when the ops change the co-running threads or the cores (or there are no ops); not for a
    sweep (``paths``): :func:`point_threads` names its points that have it, once."""
    sets = {op.path for op in ops if isinstance(op, SetOp)} | set(paths)
    out = input_caveats(model)
    comm = sorted(p for p in sets if p in _COMM_COST_PATHS)
    if comm and model.comm.bus_gbps is None and "comm.bus_gbps" not in sets \
            and has_collectives(model):
        out.append(f"{', '.join(comm)} changes nothing here: collectives keep their measured "
                   "durations unless comm.bus_gbps is set (the collective cost model)")
    for op in ops:
        if isinstance(op, SetOp) and op.path == "loader.batch_size":
            note = batch_size_note(model, op.value)
            out += [note] if note else []
    if "loader.batch_size" in paths:
        out.append("loader.batch_size is swept: each point's step is a batch of that many "
                   "samples, so compare mean ms / batch_size (per sample), not the steps or the "
                   "knee; the DataLoader's produce and the batch's bytes scale from the "
                   "measured per-sample values (inferred), the step's forward and backward "
                   "work is assumed linear in samples (capture at a second batch size to "
                   "measure it)")
    if "loader.pin_memory" in sets and not model.on_device():
        out.append("loader.pin_memory changes nothing here: this model has no device (a CPU "
                   "run), and pinned memory only speeds host-to-device copies")
    loader = any(p.startswith("loader.") for p in sets) or any(
        isinstance(op, FixOp) and "input" in get_fix(op.name).relieves for op in ops)
    if loader and model.meta.sources.get("loader.num_workers") == "assumed":
        out.append("this model's DataLoader is not calibrated (its settings are assumed; a GPU "
                   "trace does not record them): a loader change is predicted from the "
                   "measured next() time alone; calibrate with a capture sidecar to trust it")
    try:
        after, notes = apply_with_notes(model, ops) if ops else (model, [])
    except ModelError:
        after, notes = None, []     # the op's own error is raised where it is applied
    if model.loader.num_workers > 0 and any(isinstance(op, (SetOp, FixOp)) for op in ops):
        out += notes
    if loader and model.meta.sources.get("loader.host_cores") == "assumed":
        out.append(f"the host's core count is assumed ({model.loader.host_cores}), and the "
                   "model does not slow the host thread when workers run beside it (co-running "
                   "workers slowed it 6-11 % in this project's measurements): more workers may "
                   "gain less than predicted")
    out += _assumed_efficiency(model, ops)
    out += ddp_caveats(model, ops)
    out += _same_thread_prior(model, after)
    given = [(op.path, op.value) for op in ops if isinstance(op, SetOp)]
    out += unread_settings(model, after, given + [(p, SWEPT) for p in paths])
    if after is not None and not paths and (not ops or _corunners(model) != _corunners(after)):
        out += _oversubscribed_threads(after)   # a sweep's points say it (point_threads)
    return out


def _corunners(model: StepModel) -> tuple[int, int]:
    """The runnable threads beside each other on the host (workers' threads and the training
    step's intra-op threads) and the cores they share: a what-if that changes neither leaves
    the oversubscribed intra-op threads' stall as it was captured, which the baseline's
    replay already holds."""
    threads = max((op.threads for op in model.host.ops if op.kind == "cpu"), default=1)
    lp = model.loader
    return lp.num_workers * lp.threads_per_worker + threads, lp.host_cores


def point_threads(model: StepModel, ops: Sequence[Operation], points) -> list[str]:
    """The oversubscribed intra-op threads caveat of the sweep points (``points``: dicts
    path → value) that have it: one caveat, naming every such point, worded for the first."""
    hits = []
    # each point ends in sets, and a set, scale or remove takes the captured window away
    # first: after only those, take it away once (as scenarios.sweep does), not per point
    lean = model.without_replay() if all(
        isinstance(o, (SetOp, ScaleOp, RemoveOp)) for o in ops) else model
    for values in points:
        todo = [*ops, *(SetOp(path=k, value=v) for k, v in values.items())]
        try:
            after = apply_with_notes(lean, todo)[0]
        except ModelError:
            continue
        said = _oversubscribed_threads(after)
        if said:
            hits.append((", ".join(f"{k}={v}" for k, v in values.items()), said))
    if not hits:
        return []
    where, said = hits[0]
    if len(hits) == 1:
        return [retexted(w, f"at {where}: {w}") for w in said]
    return [retexted(w, f"at {len(hits)} of the sweep's points ({'; '.join(h for h, _ in hits)}), "
                     f"e.g. at {where}: {w}") for w in said]


def move_threads(model: StepModel, base: Sequence[Operation], moves: Sequence[Operation]
                 ) -> list[str]:
    """The team-beside-workers caveat of a plan's intermediate steps (after move ``k`` of
    ``moves`` over ``base``, not the last, which :func:`caveats` gives): a move that puts
    busy workers beside the team is priced with the stall the interval does not cover, even
    when a later move ends it."""
    out = []
    for k in range(1, len(moves)):
        try:
            after = apply_with_notes(model, [*base, *moves[:k]])[0]
        except ModelError:
            continue
        said = _oversubscribed_threads(after)
        if said:
            out.append(f"after move {k}: {said[-1]}")
    return out


def threads_caveat(model: StepModel, ops: Sequence[Operation] = ()) -> list[str]:
    """The oversubscribed intra-op threads caveat of ``model`` after ``ops`` (``[]`` when it
    has none, when the ops do not apply, or when they leave the co-running threads and the
    cores as they were: the stall is then the captured one)."""
    try:
        after = apply_with_notes(model, list(ops))[0] if ops else model
    except ModelError:
        return []
    if ops and _corunners(after) == _corunners(model):
        return []
    return _oversubscribed_threads(after)


def _oversubscribed_threads(after: StepModel) -> list[str]:
    """One sentence for a model (after the what-if's ops) whose training step's intra-op
    threads (``threads`` > 1) run beside more runnable worker threads than the cores hold, and
    what to do.

    torch's OpenMP threads wait for each other at every parallel region, spinning while a
    thread has no core. The model simulates that stall as each core time-slicing its own run
    queue (:mod:`models.cpu`: the team advances at ``(cores / runnable)^threads``), not the
    scheduler's placement of the threads, so the prediction is less certain than its interval
    says. Measured on this project's 2-core machine (quiet runs, the demo's CNN at torch's
    default 2 threads, calibrated at num_workers=0): the step rose from 128 ms alone to
    124–149 ms beside 2 workers, its process CPU from 67 to 129–148 ms (the threads spinning
    at the barriers), where one thread took 66–93 ms; validated at 1, 2 and 4 workers the
    model was −0.7, −19.7 and −11.5 % off (−8.6, −37.3, −29.1 % without the stalls). Fewer
    intra-op threads end the stall but run the parallel part on fewer threads:
    :mod:`scenarios.threads_outcome` prices them at both ends of the parallel efficiency the
    model allows, and the sentence says "avoids it" only when even the worst end is a gain
    (``--fix intra_op_threads``); ``OMP_NUM_THREADS`` sets them too, or capture at the
    target setting."""
    threads = max((op.threads for op in after.host.ops if op.kind == "cpu"), default=1)
    lp = after.loader
    if threads <= 1 or lp.num_workers * lp.threads_per_worker + threads <= lp.host_cores:
        return []
    if after.team_threads() <= 1:
        return [_no_team(threads, lp.num_workers, lp.host_cores, len(after.ranks))]
    n = fitting_threads(after)
    head = (f"oversubscribed intra-op threads: the training step's {threads} beside "
            f"{lp.num_workers} worker(s) on {lp.host_cores} cores spin, a stall the model "
            f"prices roughly; torch.set_num_threads({n})")
    got = threads_outcome(after, n) if threads_candidates(after) else None
    if got is None:
        verb = "ends it, at a cost this model cannot price"
        tail = f"{head} {verb}"
    elif got.low >= 1.0:
        verb = "avoids it"
        tail = f"{head} avoids it ({got.phrase()} as fast, --fix intra_op_threads)"
    elif got.measured:
        verb = f"ends it but runs {got.phrase()} as fast"
        tail = (f"{head} {verb} (its parallel efficiency measured, --fix intra_op_threads)")
    else:
        verb = f"ends it but runs {got.phrase()} as fast"
        tail = (f"{head} {verb} by the unmeasured parallel efficiency "
                "(--fix intra_op_threads:efficiency=E)")
    return [said(tail, "oversubscribed_threads",
                 summary=f"{threads} intra-op threads beside {lp.num_workers} worker(s) on "
                         f"{lp.host_cores} cores spin; torch.set_num_threads({n}) {verb}"),
            _team_beside_workers(threads, lp.num_workers, lp.host_cores, after)]


def _no_team(threads: int, workers: int, cores: int, ranks: int) -> str:
    """The one line for ``threads`` intra-op threads beside ``workers`` busy workers on
    ``cores`` cores where the model holds no parallel part of the step
    (:meth:`models.params.StepModel.team_threads` is 1): it runs the step on one thread, so
    nothing of the team's stall is priced or drawn (``host.team_stall`` is left out of the
    interval: :func:`scenarios.noop.unread_params`). fresh11's HF run (2026-12-07), captured at
    load 5–6, calibrated no parallel part (its wall far above its CPU), yet every worker what-if
    warned of the team's stall and listed ``γ`` 1–10 among the interval's draws."""
    why = ("a rank's host ops are calibrated on one thread" if ranks >= 2 else
           "its CPU did not exceed its wall: outside load?")
    return said(f"oversubscribed intra-op threads: {threads} beside {workers} worker(s) on "
                f"{cores} cores may spin, but the model holds no parallel part of the step "
                f"({why}), so neither it nor this interval prices their stall; re-capture on a "
                "quiet machine or with torch.set_num_threads(1)",
                "oversubscribed_threads",
                summary=f"{threads} intra-op threads beside {workers} worker(s) on {cores} "
                        "cores: no parallel part in the model, their stall unpriced")


TEAM_BESIDE_WORKERS = (0.89, 1.88)
"""Measured step wall beside 1–4 DataLoader workers over the same step at 0 workers, a
training step on torch's default 2 intra-op threads, 2 cores (this project's machine, means of
one or more runs each; details in docs/measurements.md#team-stall): the demo's CNN ×0.97–1.16
at 2 workers (128 ms alone; 124–149 ms); the TEAM_STALL_PRIOR CNN (calibration/team_stall.py,
2026-12-04, load 1.2–1.6) ×1.31–1.53 at 1 and ×1.14–1.36 at 2 (49.5–55.5 ms alone); a user's
script (2026-12-05) ×0.95 and ×1.04 at 1 and 2; a second user's CNN (2026-12-05, load
1.7–2.0, 29.6 ms alone) ×1.34, ×1.88 and ×1.53 at 1, 2 and 4 workers, where the model gave
×1.00–1.04 with P10–P90 ±5–9 % (that round ran outside the timing lock; quiet re-runs,
outside CPU 0–0.2 cores: ×1.49 and ×1.70 at 1 and 2, medians; another at 0.06 cores, load
1.3–1.5: ×1.14, ×1.09, ×1.33 at 1, 2, 4, means; with the team's spin modelled,
``host.team_spin_us``, ×1.02); a third CNN (2026-12-05 09:24–09:29, load 1.7–2.2) ×1.28
and ×1.29 at 1 worker in two rounds; fresh13's CNN (2026-12-07, locked, 3 runs each) ×1.00,
×0.89 and ×0.92 at 1, 2 and 4 workers (349.0 / 310.3 / 322.0 ms against 349.7 alone: its
0-worker step makes its 7.9 ms items on the main thread). The extremes of these, not a fit. Measured per thread, the
team's stall is the workers' CPU serialized, which the model has; a worker's CPU per batch
beside the team is its produce ×1.01–1.07 (as beside any co-runner: interference) plus its
hand-over, 1.3–1.7 ms (``loader.worker_handover_us``, :mod:`calibration.handover`), now
modelled; the main thread's wait for a core in ``next()`` (3.1–3.3 ms a step beside one
worker, about 1 simulated) is not."""


def _team_beside_workers(threads: int, workers: int, cores: int, after: StepModel) -> str:
    """The measured range of such steps (:data:`TEAM_BESIDE_WORKERS`) and why the interval
    does not cover it: the team's stall (the workers' CPU, serialized), its spin and the
    workers' hand-over are modelled, but the main thread's wait for a core in ``next()`` is
    not (docs/measurements.md#team-stall); ``γ`` (``host.team_stall``) acts only while every
    team thread's core has a runnable worker (one batch is asked per step). Not sized (no
    ``[step …]``, fresh6 asked): its ×0.95–1.88 is other jobs' steps, not a change this model
    makes to its own; sized on this job it would print their extremes as this job's number."""
    lo, hi = TEAM_BESIDE_WORKERS
    rng = after.host.team_stall_range
    prior = (f"host.team_stall γ {rng[0]:g}–{rng[1]:g}" if rng is not None
             else f"host.team_stall γ {after.host.team_stall:g}, not varied")
    return said(f"a team of {threads} threads beside {workers} busy worker(s) on {cores} cores "
                f"was measured ×{lo:g}–{hi:g} its 0-worker step (2 cores, 4 CNNs, "
                f"2026-12-04/05), outside this interval ({prior}): the main thread's wait for a "
                "core in next() beside them (3 ms a step measured) is unmodelled; re-measure",
                "team_beside_workers",
                summary=f"a team of {threads} threads beside {workers} busy worker(s) on {cores} "
                        f"cores: measured ×{lo:g}–{hi:g} its 0-worker step, outside this interval")


def _same_thread_prior(model: StepModel, after: StepModel | None) -> list[str]:
    """A what-if that moves the batches onto (or off) the main thread, crossing
    ``num_workers=0``, where the main thread's own cost of making them is the stated prior
    (:mod:`models.same_thread`): said, since that prior widens its interval."""
    rng = model.host.same_thread_range
    if after is None or rng is None or model.meta.sources.get("host.same_thread") != "assumed" \
            or (model.loader.num_workers == 0) == (after.loader.num_workers == 0):
        return []
    onto = after.loader.num_workers == 0
    return [said(f"the main thread's own cost of making its batches (none measured in isolation: "
                 f"no more page faults, cache or thread cost at num_workers=0) is a stated "
                 f"prior, {rng[0]:g}–{rng[1]:g} more CPU for its batch and step, which widens "
                 f"this interval: capture with probe_workers={0 if onto else 'N > 0'} to "
                 "calibrate it", "same_thread_prior", noted=True,
                 summary=f"the main thread's own cost of making its batches: a stated prior, "
                         f"{rng[0]:g}–{rng[1]:g} more CPU, widens this interval")]


def _assumed_efficiency(model: StepModel, ops: Sequence[Operation]) -> list[str]:
    """A ``fix intra_op_threads`` without a measured efficiency rests on the assumed one: its
    step at both ends of the range the model allows (the point is the middle), in words."""
    fix = next((op for op in ops if isinstance(op, FixOp) and op.name == "intra_op_threads"
                and "efficiency" not in op.args), None)
    if fix is None:
        return []
    worst, best, measured = efficiency_bounds(model)
    if measured:
        return []
    try:
        ends = [apply_with_notes(model, [op.model_copy(update={"args": {**op.args,
                                                                         "efficiency": e}})
                                         if op is fix else op for op in ops])[0]
                for e in (worst, best)]
        ms = [simulate_counted(m, whole_cycles(m, 40), 10, 0, keep="brief")[0].mean_step_us
              / 1e3 for m in ends]
    except ModelError:
        return []
    n = ends[0].team_threads()
    return [f"fix intra_op_threads rests on an assumed parallel efficiency (unmeasured; the "
            f"point takes the middle): at {worst:.2f} (the other threads were working) the "
            f"step is {ms[0]:.1f} ms, at {best:.2f} (they only spun) {ms[1]:.1f} ms; time the "
            f"step at {n} thread(s) and give :efficiency=E, "
            f"{efficiency_recipe((worst, ms[0]), (best, ms[1]))}"]


def efficiency_recipe(at_worst: tuple[float, float], at_best: tuple[float, float]) -> str:
    """How to turn the step timed on the fix's threads into ``:efficiency=E``, with the
    model's numbers: the fix's step (ms) at the two ends ``(E, ms)`` of the range, simulated.
    E is the team's parallel efficiency as the fix uses it (:func:`models.plans.threads_ratio`):
    the parallel part's speed-up ÷ threads, the share of its CPU that was work. The step is
    ``A + B·E`` on fewer threads (the parallel part's work ``e·T₀·p`` grows with E, the rest
    keeps its time), so ``E = (t − A) / B``, and the fix given that E reproduces ``t``. The
    earlier recipe, ``E = (t1/t2 − (1 − pf)) / (pf·T₀)``, needed t2 as the op's wall with a
    core per thread, without the stall, the faults or the rest of the step: fresh10 gave the
    step's 190.2 ms (its stall beside a worker in it), E = 0.385, and the fix priced 109.6 ms
    against 135.7 measured; this one asks only for the step a user times."""
    (e0, t0), (e1, t1) = at_worst, at_best
    b = (t0 - t1) / (e0 - e1) if e0 != e1 else 0.0
    if not b > 0:
        return "E the parallel part's speed-up ÷ threads"
    a = t1 - b * e1
    return (f"E = (t − {a:.1f}) / {b:.1f}, t that run's mean step in ms, timed as validate "
            f"times it (E: the parallel part's speed-up ÷ threads; the step is "
            f"{a:.1f} + {b:.1f}·E ms at this model's host speed, so the fix given E reproduces t)")
