"""Coarsening: fewer, larger device tasks and host ops with the same replayed step.

``coarsen(model) -> StepModel`` is pure (the input is not changed). It merges *chains*: runs
of consecutive tasks on one stream, of one phase, where every task after the first

* has no cross-stream wait (of this step or the previous), and the task before it is not
  awaited by anything else (no sync op, no other task's ``waits`` or ``prev_waits``, no
  device-wide sync point);
* is a kernel, a memset or a device-to-device copy (host↔device copies, which use copy
  engines and may block the host, and collectives, which meet other ranks, stay alone);
* keeps the chain within ``max_chain_gap_us`` of summed idle (``DeviceTask.gap_us``, after
  the first member) and ``max_chain_launches`` host launches;
* either was *queued*: in a probe simulation of ``model`` its host launch was issued at least
  ``min_slack_us`` before the task in front of it on the stream finished, on every rank and
  every probed step, so it started because its stream became free; or was *launch-bound*
  (it waited for its own launch), is awaited by nothing, is not its stream's last task (the
  next step's work may queue behind that), and was launched at most ``max_chain_span_us``
  after the chain's first task.

A chain becomes one task: the first task's id, launch and waits; ``dur_us`` the sum;
``breakdown_us`` the sum of the members' per-category µs (``DeviceTask.category_us``), so a
what-if that scales one category still applies; ``category`` the largest part; ``gap_us`` the
sum of the members' gaps (the idle inside the chain moves to its front, so busy time is kept);
``replay_us``/``replay_gap_us`` the members' captured values summed step by step;
``launches`` the fine launches it stands for: the merged task's launch takes that many slots
of the host's launch queue (see :mod:`models.simulate`) and frees them when the chain ends,
where the fine tasks took them one by one and freed each as it ended; capping chains at
``max_chain_launches`` bounds the extra occupancy to about twice that per stream, and the cap
is lowered to fit the headroom the probe left in the queue (it holds
``DeviceParams.launch_queue_depth``, by default 1024), so the host is not throttled in steady
state where the fine model was not (in a captured transient that filled the queue it may
block a little earlier: the window replay of such a coarse model can be off on one step). The
launch ops of the other members become ``cpu`` ops of category ``launch`` (their CPU cost
stays on the host), and every run of consecutive ``cpu`` ops of the same category and phase
becomes one op.

**Why the replay does not change.** A chain of queued members ran back to back, so the merged
task ends exactly when its last member did. A launch-bound member runs earlier in the merged
task than it did (by at most ``max_chain_span_us``), so such a chain ends early; that is
harmless unless its end matters: if its last task is awaited, or the next task on the stream
was queued behind it, the chain is split at its last launch-bound member, which starts a chain
of its own (with an exact end). Nothing else can see a member's end. The tests hold replays of
real traces within a fraction of a percent.

**When to coarsen.** :func:`stepsim.fit.calibrate_gpu` returns a coarsened model (the
planner simulates it many times); pass ``coarse=False`` there for the kernel-level one.
Merging relies on the timing seen in the probe. A what-if that makes the device much faster
than the host can undo it: a merged chain then runs as soon as its first launch is issued
instead of waiting for each member's launch. What depends on the chain is protected from most
of that error: only a chain's last task can be awaited, and a sync or a dependent launch comes
after the members' launches on the host, so the error is at most the tail of the chain that
ran after its last launch. Coarsening the transformed fine model again is the exact remedy.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from stepsim.models.params import DeviceTask, HostOp, StepModel
from stepsim.models.simulate import issue_points, simulate

__all__ = ["coarsen", "MIN_SLACK_US", "MAX_CHAIN_GAP_US", "MAX_CHAIN_LAUNCHES",
           "MAX_CHAIN_SPAN_US"]

MIN_SLACK_US = 20.0
"""How long (µs) before its stream predecessor ends a task's launch must have been issued for
the task to count as queued."""
MAX_CHAIN_LAUNCHES = 32
"""Most host launches one merged chain may stand for (its ``launches``)."""
MAX_CHAIN_SPAN_US = 200.0
"""A member that waited for its own launch joins a chain only if it was launched at most this
long (µs) after the chain's first task: the merged task runs it earlier by up to that."""
MAX_CHAIN_GAP_US = 50.0
"""Most idle (µs, summed ``gap_us`` of the members after the first) a chain may hold: it
moves to the chain's front when merged, which shifts busy time against the other streams."""
_MERGEABLE_KINDS = ("kernel", "memset")


def _protected(model: StepModel) -> set[str]:
    """Tasks something outside their stream waits for: sync targets, waits (of this step or
    the next), the per-stream issue points of device-wide syncs, and each stream's last
    task."""
    out: set[str] = set()
    for ts in model.device.streams.values():
        if ts:
            out.add(ts[-1].id)
        for t in ts:
            out.update(t.waits)
            out.update(t.prev_waits)
    issue = None
    for j, op in enumerate(model.host.ops):
        if op.kind != "sync":
            continue
        if op.task is not None:
            out.add(op.task)
            continue
        if issue is None:
            issue = issue_points(model)
        for ts in model.device.streams.values():
            before = [t.id for t in ts if issue[t.id] < j]
            if before:
                out.add(before[-1])
    return out


def _probe(model: StepModel, min_slack_us: float, warmup: int, steps: int
           ) -> tuple[set[str], set[str], dict[str, dict[tuple[int, int], float]], int]:
    """``(queued, launch_bound, launch_us, peak)`` from a probe simulation, over the probe's last
    ``steps`` steps that ran each task (a simulation stops when the host threads finish, so
    the device may not have run the last steps' tasks): the tasks launched at least
    ``min_slack_us`` before their stream predecessor ended, the tasks launched no earlier than
    it ended, per launched task its launch instants (µs) by (rank, step), and the most
    launch-queue slots the probe ever took on one rank (:func:`_peak_pending`)."""
    res = simulate(model, steps=steps, warmup=warmup, keep="runs")   # no span is read
    end: dict[tuple[int, int, str], float] = {}
    by_task: dict[str, list] = defaultdict(list)
    for r in res.runs:
        end[(r.rank, r.step, r.task)] = r.end_us
        by_task[r.task].append(r)
    prev: dict[str, str] = {}
    for ts in model.device.streams.values():
        for a, b in zip(ts, ts[1:]):
            prev[b.id] = a.id
    queued: set[str] = set()
    launch_bound: set[str] = set()
    launch_us: dict[str, dict[tuple[int, int], float]] = {}
    for task, runs in by_task.items():
        last_steps = set(sorted({r.step for r in runs})[-steps:])
        runs = [r for r in runs if r.step in last_steps]
        if all(r.launch_us is not None for r in runs):
            launch_us[task] = {(r.rank, r.step): r.launch_us for r in runs}
        p = prev.get(task)
        if p is None:
            continue
        pend = [end.get((r.rank, r.step, p)) for r in runs]
        if None in pend:
            continue
        if all(r.launch_us is None or r.launch_us <= pe - min_slack_us
               for r, pe in zip(runs, pend)):
            queued.add(task)
        elif task in launch_us and all(r.launch_us >= pe for r, pe in zip(runs, pend)):
            launch_bound.add(task)
    return queued, launch_bound, launch_us, _peak_pending(model, res.runs)


def _peak_pending(model: StepModel, runs) -> int:
    """The most launch-queue slots held at once on one rank by ``runs`` (a launched task holds
    its ``launches`` slots from its launch to its end)."""
    tasks = model.task_map()
    held = [(r.rank, r.launch_us, r.end_us, tasks[r.task].launches) for r in runs
            if r.launch_us is not None]
    if not held:
        return 0
    rank, start, end, n = (np.array(c) for c in zip(*held))
    d = np.concatenate([n, -n])
    order = np.lexsort((d, np.concatenate([start, end]), np.concatenate([rank, rank])))
    # by rank, then time (at one instant, releases first): each rank's slots come back to 0
    # at its last event, so one running sum serves every rank
    return max(0, int(np.cumsum(d[order]).max()))


def _span_us(launch_us: dict[str, dict[tuple[int, int], float]], first: str, t: str) -> float:
    """Most time (µs) by which ``t``'s launch followed ``first``'s in the probe (inf when
    either was not launched by the host in every probed step)."""
    a, b = launch_us.get(first), launch_us.get(t)
    if not a or not b or a.keys() != b.keys():
        return math.inf
    return max(b[k] - a[k] for k in a)


def _mergeable(t: DeviceTask) -> bool:
    return t.kind in _MERGEABLE_KINDS or (t.kind == "memcpy" and t.copy_kind == "d2d")


def _sum_per_step(values: list[list[float] | None]) -> list[float] | None:
    """Step by step sums of captured window values (None when any is missing)."""
    if any(v is None for v in values):
        return None
    return [float(sum(col)) for col in zip(*values)]


def _merge(chain: list[DeviceTask], launched: set[str]) -> DeviceTask:
    if len(chain) == 1:
        return chain[0]
    parts: dict[str, float] = defaultdict(float)
    for t in chain:
        for k, v in t.category_us().items():
            parts[k] += v
    dur = sum(t.dur_us for t in chain)
    cats = {k: v for k, v in parts.items() if k != "idle"}
    main = max(cats, key=lambda k: (cats[k], k)) if cats else chain[0].category
    kind = "memset" if all(t.kind == "memset" for t in chain) else "kernel"
    first = chain[0]
    return DeviceTask(
        id=first.id, stream=first.stream, name=f"{len(chain)} tasks: {first.name}"[:200],
        kind=kind, category=main, phase=first.phase, dur_us=dur,
        breakdown_us={k: v for k, v in parts.items()}, waits=list(first.waits),
        prev_waits=list(first.prev_waits),
        gap_us=sum(t.gap_us for t in chain),
        launches=max(1, sum(t.launches for t in chain if t.id in launched)),
        replay_us=_sum_per_step([t.replay_us for t in chain]),
        replay_gap_us=_sum_per_step([t.replay_gap_us for t in chain]))


def coarsen(model: StepModel, min_slack_us: float = MIN_SLACK_US, probe_warmup: int = 3,
            probe_steps: int = 2, max_chain_gap_us: float = MAX_CHAIN_GAP_US,
            max_chain_launches: int = MAX_CHAIN_LAUNCHES,
            max_chain_span_us: float = MAX_CHAIN_SPAN_US) -> StepModel:
    """Merge queued chains of device tasks and the host ops around them (see the module
    docstring).

    Args:
        model: the (fine) StepModel; not modified.
        min_slack_us: a task's launch must precede its predecessor's end by this much (µs).
        max_chain_gap_us: most summed idle (µs) of the members after a chain's first.
        max_chain_launches: most host launches one chain stands for.
        max_chain_span_us: how long (µs) after a chain's first launch a member that waited
            for its own launch may have been launched.
        probe_warmup, probe_steps: the probe simulation's warm-up and measured steps.

    Returns:
        a new StepModel; ``meta.notes`` gains ``coarsened_tasks`` (before → after).

    Raises:
        ModelError: the probe simulation cannot run (see :func:`models.simulate.simulate`).
    """
    n_before = sum(len(ts) for ts in model.device.streams.values())
    if n_before == 0 or not model.host.ops:
        return model.model_copy(deep=True)
    queued, launch_bound, launch_us, peak = _probe(model, min_slack_us, probe_warmup,
                                                   probe_steps)
    # a chain takes its launches' slots at once and frees them at its end, adding up to
    # about twice its launches per stream to the queue: keep that within the headroom the
    # probe left, so the host is not throttled in steady state where the fine model was not
    n_streams = sum(1 for ts in model.device.streams.values() if ts)
    headroom = model.device.launch_queue_depth - peak
    max_chain_launches = max(1, min(max_chain_launches, headroom // (2 * max(1, n_streams))))
    protected = _protected(model)
    launched = {op.task for op in model.host.ops if op.kind == "launch"}
    new_id: dict[str, str] = {}
    streams: dict[str, list[DeviceTask]] = {}
    for s, ts in model.device.streams.items():
        out: list[DeviceTask] = []
        chain: list[DeviceTask] = []
        loose: list[int] = []   # positions in the chain of members that waited for their launch

        def close(nxt: DeviceTask | None):
            # a chain with launch-bound members ends early: if its end matters (it is awaited,
            # or the next task did not wait for its own launch), its last launch-bound member
            # starts a chain of its own, whose end is exact
            if loose and (chain[-1].id in protected or nxt is None
                          or nxt.id not in launch_bound):
                j = loose[-1]
                out.append(_merge(chain[:j], launched))
                out.append(_merge(chain[j:], launched))
                for t in chain[j:]:
                    new_id[t.id] = chain[j].id
            else:
                out.append(_merge(chain, launched))

        inner_gap, n_launch = 0.0, 0
        for t in ts:
            t_launch = t.launches if t.id in launched else 0
            join = (chain and _mergeable(t) and _mergeable(chain[-1]) and not t.waits
                    and not t.prev_waits
                    and chain[-1].id not in protected and t.phase == chain[0].phase
                    and inner_gap + t.gap_us <= max_chain_gap_us
                    and n_launch + t_launch <= max_chain_launches)
            is_loose = False
            if join and t.id not in queued:
                is_loose = (t.id in launch_bound and t.id not in protected
                            and _span_us(launch_us, chain[0].id, t.id) <= max_chain_span_us)
                join = is_loose
            if not join and chain:
                close(t)
                chain, loose, inner_gap, n_launch = [], [], 0.0, 0
            elif chain:
                inner_gap += t.gap_us
                if is_loose:
                    loose.append(len(chain))
            n_launch += t_launch
            chain.append(t)
            new_id[t.id] = chain[0].id
        if chain:
            close(None)
        streams[s] = out
    # remap waits (only chain ends can be waited for, and they map to their chain's id)
    for s, ts in streams.items():
        streams[s] = [t if not (t.waits or t.prev_waits) else t.model_copy(update={
            "waits": [new_id[w] for w in t.waits],
            "prev_waits": [new_id[w] for w in t.prev_waits]}) for t in ts]
    kept_ids = {t.id for ts in streams.values() for t in ts}
    ops: list[HostOp] = []
    for op in model.host.ops:
        if op.kind == "launch" and op.task not in kept_ids:
            op = HostOp(kind="cpu", name=op.name, dur_us=op.dur_us, category="launch",
                        phase=op.phase, replay_us=op.replay_us)
        elif op.kind == "sync" and op.task is not None:
            op = op.model_copy(update={"task": new_id[op.task]})
        if op.kind == "cpu" and op.samples_us is None:
            # fold into the run of cpu ops just before it, by (category, phase): nothing in
            # a run of cpu ops interacts with the device, so their order does not matter
            j, merged = len(ops) - 1, False
            while j >= 0 and ops[j].kind == "cpu":
                o = ops[j]
                if o.category == op.category and o.phase == op.phase and o.samples_us is None:
                    ops[j] = o.model_copy(update={
                        "dur_us": o.dur_us + op.dur_us,
                        "replay_us": _sum_per_step([o.replay_us, op.replay_us])})
                    merged = True
                    break
                j -= 1
            if not merged:
                ops.append(op)
            continue
        ops.append(op)
    n_after = sum(len(ts) for ts in streams.values())
    meta = model.meta.model_copy(deep=True)
    meta.notes["coarsened_tasks"] = f"{n_before} -> {n_after}"
    meta.notes["coarsened_host_ops"] = f"{len(model.host.ops)} -> {len(ops)}"
    out = model.model_copy(update={
        "device": model.device.model_copy(update={"streams": streams}),
        "host": model.host.model_copy(update={"ops": ops}),
        "meta": meta,
    })
    # the new tasks and ops were built validated (or are the input's, which was); what the
    # merge can break is the model's cross-references, checked here as validation would
    # (a dump and a full validation of every field took about a fifth of a second on the
    # largest trace). Unchanged tasks and ops are shared with the input: models are values,
    # copied before any change (``model_copy(deep=True)``)
    return out._check_refs()
