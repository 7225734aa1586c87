"""A gloo job's per-rank steps read from its trace: the main thread's enqueues paired with the
worker threads' collectives, and each step's host ops (see :mod:`calibration.gloo`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.calibration.gloo_loader import loader_nexts
from stepsim.calibration.gpu_kinds import MAX_NUMEL_WORDS, dims_numel
from stepsim.calibration.gloo_resume import last_resume, resume_after_wait
from stepsim.calibration.profiler_events import phase_events
from stepsim.calibration.steps import find_steps
from stepsim.calibration.trace_io import rank_of
from stepsim.simcore.errors import InputError

__all__ = ["COPY", "PHASES", "GlooCollective", "GlooRank", "GlooStep", "bucket_copies",
           "fit_gloo_rank", "fit_gloo_step", "input_numel"]

PHASES = ("forward", "backward", "optimizer")
COPY = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
"""DDP's copy of a reduced bucket's slice into one gradient (``finalize_backward``)."""


@dataclass
class GlooCollective:
    """One collective of a rank: its main-thread enqueue (``c10d::…``) paired in order with
    the gloo worker thread's run of it (``gloo:…``). Instants are ns on this rank's trace
    clock (``(start, end)``); ``busy`` is a share (0–1)."""

    kind: str               # all_reduce, barrier, ...
    numel: int | None
    dtype: str
    enq: tuple[int, int]    # main-thread enqueue (start, end), ns on this rank's clock
    run: tuple[int, int]    # gloo worker (start, end), ns
    tid: int = 0            # the gloo worker thread that ran it
    busy: float = 0.0       # share of the run that overlapped this rank's backward compute
    bad_dims: bool = False  # it had Input Dims, with a size <= 0 (numel None: not a bucket's)


@dataclass
class GlooStep:
    """One step of a rank as its main thread ran it (:func:`fit_gloo_step`): durations in µs
    (``step_us``, each op's ``dur_us``, ``phase_us``, ``opt_work_us``, ``copy_us``), the
    resume an instant in ns on the rank's trace clock."""

    number: int
    step_us: float
    ops: list[tuple[str, str, float, int | None]]   # (kind, phase, dur_us, coll index)
    colls: list[GlooCollective]
    phase_us: dict[str, float]
    resume_ns: int | None = None    # the main thread's first event after the end-of-backward
    opt_work_us: float = 0.0        # wait, and the step's end after it (calibration.gloo_resume)
    events: dict[str, int] = field(default_factory=dict)   # main-thread events per phase
    copy_us: float = 0.0            # the last bucket's copy into the gradients, after the resume

    def shape(self) -> tuple:
        """The step's structure (its ops' kinds and phases, its collectives' kinds), which
        the ranks' steps must share to be calibrated together."""
        return tuple((k, p, c) for k, p, _, c in self.ops) + tuple(c.kind for c in self.colls)


@dataclass
class GlooRank:
    """One rank's trace read (:func:`fit_gloo_rank`): its rank and world size, host name,
    trace file, the trace clock's base (``base_ns``, ns), its steps and every collective."""

    rank: int
    world: int
    host: str
    path: Path
    base_ns: int
    steps: list[GlooStep] = field(default_factory=list)
    colls: list[GlooCollective] = field(default_factory=list)   # every collective of the trace
    markers: int = 0     # the trace's step markers (the last, with no next start, fits none)


def input_numel(table: EventTable, i: int) -> tuple[int | None, str, bool]:
    """(elements of the collective's first input, its dtype, whether its Input Dims were
    recorded but hold a size <= 0, a non-integer, or more than
    :data:`calibration.gpu_kinds.MAX_NUMEL` elements):
    numel None when absent or bad. The product is Python's, exact (numpy's int64 wrapped
    [2**40, 2**40] to 0 and [3037000500, 3037000500] to a negative size that refused the
    whole job)."""
    dims, types = table.arg(i, "Input Dims"), table.arg(i, "Input type")
    d = dims[0] if isinstance(dims, list) and dims else None
    while isinstance(d, list) and d and isinstance(d[0], list):
        d = d[0]
    n = dims_numel(d, least=1) if d else None   # a dim <= 0 cannot be a bucket's: unknown
    t = types[0] if isinstance(types, list) and types else ""
    return n, str(t), n is None and isinstance(d, list) and bool(d)


def fit_gloo_rank(table: EventTable, warnings: list[str]) -> GlooRank:
    """One rank's steps from its trace's event table (see :class:`GlooRank`); what it cannot
    pair or size is appended to ``warnings``.

    Raises:
        InputError: no step markers, no rank, gloo collectives without any c10d enqueue, or
            no step with a backward pass."""
    steps = find_steps(table)
    if not steps:
        raise InputError(table.path, "no training steps found (no ProfilerStep#N)")
    rank, world, _ = rank_of(table._raw, warnings) if table._raw is not None else (None, 1, "")
    if rank is None:
        raise InputError(table.path, "no rank in distributedInfo or the file name (rank<N>)")
    main = steps[0]
    names = table.names.tolist()
    X = table.ph == "X"
    on_main = X & (table.tid == main.tid) & (table.pid == main.pid)
    enq = [i for i in np.flatnonzero(on_main) if names[i].startswith("c10d::")]
    run = [i for i in np.flatnonzero(X & (table.pid == main.pid) & (table.tid != main.tid))
           if names[i].startswith("gloo:")]
    enq.sort(key=lambda i: table.ts_ns[i])
    run.sort(key=lambda i: table.ts_ns[i])
    if run and not enq:    # a model of the job without its all-reduces would be no DDP model
        raise InputError(table.path, f"{len(run)} gloo collective(s) but no c10d enqueue "
                         "(c10d::allreduce_ ...) on the training thread to pair them with (every "
                         "one dropped or removed): the all-reduces cannot be placed in the "
                         "steps; calibrate the unedited trace, or re-capture")
    if len(enq) != len(run):
        warnings.append(f"{table.path.name}: {len(enq)} c10d enqueues but {len(run)} gloo "
                        "collectives; paired in order, the rest dropped")
    colls = []
    for e, g in zip(enq, run):
        kind = names[g].split(":", 1)[1]
        n, t, bad = input_numel(table, g)
        colls.append(GlooCollective(kind, n, t, (int(table.ts_ns[e]), int(table.end_ns[e])),
                                    (int(table.ts_ns[g]), int(table.end_ns[g])),
                                    int(table.tid[g]), bad_dims=bad))
    nexts = loader_nexts(table, on_main)
    autograd = np.flatnonzero(on_main & np.fromiter(
        (n.startswith("autograd::engine::evaluate_function") for n in names), bool, len(names)))
    out = GlooRank(rank, world, str(table.metadata.get("host_name") or ""), table.path,
                int(table.base_ns), colls=colls)
    use = [s for s in steps if not s.last] or list(steps)
    out.markers = len(steps)
    leaf = np.flatnonzero(on_main & ~np.fromiter(
        (n.startswith("ProfilerStep#") for n in names), bool, len(names)))
    leaf = leaf[np.argsort(table.ts_ns[leaf], kind="stable")]
    main_ev = (table.ts_ns[leaf], table.end_ns[leaf])
    cp = np.flatnonzero(on_main & (table.names == COPY))
    sized = [input_numel(table, i) for i in cp]
    copies = (table.ts_ns[cp], table.end_ns[cp],
              np.array([n or 0 for n, _, _ in sized], dtype=np.int64))
    bad = sum(b for _, _, b in sized)
    if bad:   # (a size <= 0, a float: each bucket's copies are then matched to nothing)
        warnings.append(f"{table.path.name}: {bad} of {len(cp)} {COPY} event(s) have Input "
                        "Dims that cannot be right (a size <= 0, not an integer or past "
                        f"{MAX_NUMEL_WORDS} elements): their "
                        "steps' buckets are not matched to their copies, and the resume from "
                        "the last bucket's wait is searched up to the last copy")
    for s in use:
        rec = fit_gloo_step(s, colls, table.ts_ns[autograd], table.end_ns[autograd], nexts,
                            main_ev, copies)
        if rec is not None:
            out.steps.append(rec)
    if not out.steps:
        raise InputError(table.path, "no step with a backward pass (autograd events) to "
                                     "calibrate from")
    return out


def _resume_bound(copies: tuple[np.ndarray, np.ndarray] | None, after_ns: int, end_ns: int
                  ) -> int:
    """Where the search for the resume from the last all-reduce's wait ends (ns, exclusive):
    just past the start of the step's last ``copy_bucket_to_grad`` after ``after_ns``, else
    the step's end ``end_ns``. ``finalize_backward`` waits for each bucket and then copies it
    into the gradients, so the last bucket's copies follow the resume: a longer gap after them
    (the training thread preempted or descheduled in the optimizer) is no wait for the
    all-reduce. Read as the resume, it left the step no copy after it in 44 of 120 rank-steps
    of 20 captures of tests/test_gloo.py's job (2026-12-06, load 1.7) and 39 of 120 beside a
    CPU hog; in 2 of those 20 captures every step of the reference rank, which then had no
    measured ``comm.grad_copy_us_per_mb``."""
    if copies is not None:
        cp = copies[0][(copies[0] >= after_ns) & (copies[0] < end_ns)]
        if cp.size:
            return int(cp.max()) + 1
    return end_ns


def bucket_copies(copies: tuple[np.ndarray, ...] | None, numels: list[int | None],
                  start_ns: int, end_ns: int) -> list[tuple[int, int]] | None:
    """Each bucket's ``copy_bucket_to_grad`` span in a step (ns: its first copy's start, its
    last copy's end), matched to the step's all-reduces of ``numels`` elements (enqueue
    order): DDP launches its buckets' all-reduces in bucket order and ``finalize_backward``
    waits for each bucket in that order, then copies its gradients one by one, so the copies
    (``copies``: starts, ends and each copy's elements, in time order) between ``start_ns`` and
    ``end_ns`` fall into runs whose elements sum to each bucket's in turn. None where they do
    not (no element counts, a bucket without copies, ``gradient_as_bucket_view``'s none)."""
    if copies is None or len(copies) < 3 or not numels or any(not n for n in numels):
        return None
    pick = (copies[0] >= start_ns) & (copies[0] < end_ns)
    order = np.argsort(copies[0][pick], kind="stable")
    ts, te, n = (np.asarray(a)[pick][order] for a in copies[:3])
    out, i = [], 0
    for want in numels:
        j, got = i, 0
        while j < len(n) and got < want and n[j] > 0:
            got += int(n[j])
            j += 1
        if got != want or j == i:
            return None
        out.append((int(ts[i]), int(te[i:j].max())))
        i = j
    return out if i == len(n) else None


def _matched_resume(main_ev, groups: list[tuple[int, int]], after_ns: int) -> int | None:
    """The resume from the wait for the last bucket, with each bucket's copies matched
    (:func:`bucket_copies` ``groups``): the end of the longest gap in the main thread's events
    from the later of ``after_ns`` and the end of the bucket before's copies (that bucket's
    wait and copies come first, whatever its gloo end stamp says) to the last bucket's first
    copy, which follows the wait. None without an event there."""
    lo = max([after_ns] + [g[1] for g in groups[-2:-1]])
    return resume_after_wait(*main_ev, lo, groups[-1][0] + 1)


def fit_gloo_step(s, colls: list[GlooCollective], ag_start, ag_end, nexts=(), main_ev=None,
                  copies=None) -> GlooStep | None:
    """Step ``s`` (:func:`calibration.steps.find_steps`' record) of a rank as a
    :class:`GlooStep`, or None where no backward event (``ag_start``/``ag_end``: the
    autograd events' instants, ns) starts inside it. ``colls``: the rank's collectives (each
    one enqueued in the step gets its ``busy`` share set); ``nexts``: the main thread's
    DataLoader ``next()`` spans; ``main_ev``: its events' (start, end) instants (ns), for the
    resume after the last all-reduce's wait; ``copies``: DDP's bucket copies (start, end, ns;
    elements)."""
    inside = (ag_start >= s.start_ns) & (ag_start < s.end_ns)
    if not inside.any():
        return None
    bwd0, bwd1 = int(ag_start[inside].min()), int(ag_end[inside].max())
    mine = [c for c in colls if s.start_ns <= c.enq[0] < s.end_ns]
    for c in mine:
        c.busy = max(min(c.run[1], bwd1) - max(c.run[0], bwd0), 0) / max(c.run[1] - c.run[0], 1)
    ops: list[tuple[str, str, float, int | None]] = []
    cur = s.start_ns

    def cpu(until: int):
        """Host work from ``cur`` to ``until``, split where backward starts."""
        nonlocal cur
        if cur < bwd0 < until:
            cpu(bwd0)
        ops.append(("cpu", "forward" if until <= bwd0 else "backward",
                    max(until - cur, 0) / 1e3, None))
        cur = max(cur, until)

    for a, b in nexts:      # the DataLoader's next() before the step's first enqueue
        if s.start_ns <= a and b <= min([bwd0] + [c.enq[0] for c in mine]):
            if a > cur:
                cpu(a)
            ops.append(("next", "other", (b - a) / 1e3, None))
            cur = b
    last_ar = None
    for k, c in enumerate(mine):
        cpu(c.enq[0])
        phase = "forward" if c.enq[0] < bwd0 else "backward"
        ops.append(("launch", phase, (c.enq[1] - c.enq[0]) / 1e3, k))
        cur = c.enq[1]
        if c.kind == "barrier":
            ops.append(("sync", phase, 0.0, k))
            cur = max(cur, c.run[1])
        elif c.kind == "all_reduce":
            last_ar = k
    cpu(max(bwd1, cur))
    resume = None
    if last_ar is not None:
        ops.append(("sync", "backward", 0.0, last_ar))
        # the main thread resumes from its wait for the last all-reduce after that all-reduce
        # started: a longer gap before it (a wait for an earlier bucket, its worker still
        # busy with the ones before) is not this wait (the demo's captures: 2 of 25 had the
        # last rank's resume before the start in most steps, and so kept its late end stamp)
        # nor is the wait for the bucket before it, when that all-reduce was still running at
        # backward's end (calibration.gloo_resume.last_resume); and it resumes no later
        # than the last bucket's copy into the gradients (_resume_bound)
        # with each bucket's copies matched to its all-reduce, between the bucket before's
        # copies and the last bucket's: a late gloo end stamp on either moves nothing
        after = max(cur, mine[last_ar].run[0])
        ars = [c for c in mine[:last_ar + 1] if c.kind == "all_reduce"]
        groups = bucket_copies(copies, [c.numel for c in ars], s.start_ns, s.end_ns)
        resume = None if main_ev is None else \
            (_matched_resume(main_ev, groups, after) if groups else None) or last_resume(
                *main_ev, after, [c.run for c in ars], _resume_bound(copies, after, s.end_ns))
        cur = max(cur, mine[last_ar].run[1])
    ops.append(("cpu", "optimizer", max(s.end_ns - cur, 0) / 1e3, None))
    phase_us = {p: sum(d for k, ph, d, _ in ops if k != "sync" and ph == p) for p in PHASES}
    copy_us = 0.0
    if resume is not None and copies is not None:
        inside = (copies[0] >= resume) & (copies[0] < s.end_ns)
        copy_us = float(np.sum(copies[1][inside] - copies[0][inside])) / 1e3
    return GlooStep(s.number, (s.end_ns - s.start_ns) / 1e3, ops, mine, phase_us, resume,
                    (s.end_ns - resume) / 1e3 if resume is not None else 0.0,
                    phase_events(main_ev, s.start_ns, bwd0, bwd1, s.end_ns), copy_us)
