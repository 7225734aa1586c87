"""What a GPU fit reports beside the model: the notes (measured GPU busy, kernel-sum ÷
step-wall, exposed communication, copy rates, step-time spread, input stalls), the loader it
infers from the DataLoader's ``next()`` times, and the warnings about what a GPU trace cannot
tell (:func:`fit_notes`).

The loader is modelled as ``num_workers=0`` with a produce time resampled from the measured
``next()`` times (``inferred``: the trace cannot tell how many workers there were, so the
worker count and every other loader setting are ``assumed``, the host's cores
``ASSUMED_HOST_CORES``; a capture sidecar supplies the real settings).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.events import name_mask
from stepsim.calibration.intervals import exposed_ns, union, union_len
from stepsim.calibration.step_fit import StepFit
from stepsim.calibration.steps import DATALOADER_RE, Step
from stepsim.calibration.trace_context import TraceContext
from stepsim.models.bottleneck import INPUT_WAIT_SHARE
from stepsim.models.params import DurationSpec, LoaderParams

__all__ = ["fit_notes", "step_stats", "input_stalls", "ASSUMED_HOST_CORES", "STEP_CV_WARN",
           "INPUT_STALL_SHARE"]

STEP_CV_WARN = 0.25
"""Above this coefficient of variation of step times the fit warns that one representative
step cannot stand for all of them."""
ASSUMED_HOST_CORES = 8
"""CPU cores assumed for the DataLoader workers and the main thread when nothing recorded them
(a GPU trace does not; a capture sidecar does). Eight is the smallest share of cores per GPU on
common GPU machines (a one-GPU cloud instance has 8 vCPUs; 8-GPU servers have 10-16 per GPU),
so what-ifs that add workers are not made core-bound by a default of one core; it is marked
``assumed`` (the planner varies it ±50 %). A count derived from the worker count would not do:
a what-if that sets ``loader.num_workers`` leaves ``host_cores`` as calibrated."""
INPUT_STALL_SHARE = INPUT_WAIT_SHARE
"""A step whose DataLoader ``next()`` takes this share of the representative step or more
stalled on input (the share with which the metrics name the input pipeline the bottleneck)."""


def step_stats(ctx: TraceContext, step: Step, own: list[int] | None = None) -> dict:
    """Measured GPU busy %, kernel-sum ÷ step-wall and exposed communication (µs) of a step:
    the GPU activity in its window, clipped to [start, end) (what a profiler shows), or with
    ``own`` those rows, the work the step itself launched, wherever it ran, over the step's
    duration (what a replay of that step repeats every step)."""
    t0, t1 = step.start_ns, step.end_ns
    if own is None:
        gr = ctx.links.gpu_rows
        ts, te = ctx.ts[gr], ctx.te[gr]
        m = (te > t0) & (ts < t1)
        rows = gr[m]
        s, e = np.clip(ts[m], t0, t1), np.clip(te[m], t0, t1)
    else:
        rows = np.array(own, dtype=np.int64)
        s, e = ctx.ts[rows], ctx.te[rows]
    wall = (t1 - t0) / 1000.0
    busy = union_len(s, e) / 1000.0
    ksum = float((e - s).sum()) / 1000.0
    comm = np.array([ctx.is_coll[g] for g in rows.tolist()], dtype=bool)
    exposed = exposed_ns(union(s[comm], e[comm]), union(s[~comm], e[~comm])) / 1000.0
    return {"gpu_busy_pct": 100.0 * busy / wall if wall > 0 else 0.0,
            "kernel_sum_over_step_wall": ksum / wall if wall > 0 else 0.0,
            "exposed_comm_us": exposed}


def fit_notes(ctx: TraceContext, kept: list[Step], fit: StepFit, group: list[StepFit],
              next_us: list[float]) -> tuple[dict, dict, LoaderParams, list[str]]:
    """(notes, sources, loader, warnings) of a trace whose complete steps are ``kept``,
    representative fit ``fit`` (of the median ``group``), measured ``next()`` times ``next_us``
    (µs, every step of the captured window)."""
    notes: dict = {}
    sources: dict = {}
    warnings: list[str] = []
    stats = [step_stats(ctx, s) for s in kept]
    for k in ("gpu_busy_pct", "kernel_sum_over_step_wall", "exposed_comm_us"):
        notes[k] = float(np.median([st[k] for st in stats]))
    rep = fit.step
    own = step_stats(ctx, rep, fit.acts)
    notes["step_gpu_busy_pct"] = own["gpu_busy_pct"]
    notes["step_exposed_comm_us"] = own["exposed_comm_us"]
    notes.update(fit.counts)
    notes["representative_step"] = rep.number
    notes["representative_step_us"] = rep.dur_us
    notes["median_of_steps"] = ",".join(str(g.step.number) for g in group)
    notes["device_gap_us"] = float(sum(t.gap_us for ts in fit.streams.values() for t in ts))
    notes["kernel_sum_us"] = float(sum(fit.kernel_us.values()))
    # copies: measured rate (GB/s, Kineto's "memory bandwidth (GB/s)") by direction and memory
    table = ctx.table
    tasks = [t for ts in fit.streams.values() for t in ts]
    for kind in ("h2d", "d2h", "d2d"):
        for pinned, label in ((True, "pinned"), (False, "pageable"), (None, "")):
            sel = [t for t in tasks if t.kind == "memcpy" and t.copy_kind == kind
                   and t.pinned is pinned and t.bytes]
            if sel:
                gb = sum(t.bytes for t in sel) / 1e9
                us = sum(fit.kernel_us[t.id] for t in sel)
                key = f"copy_{kind}{'_' + label if label else ''}_gbps"
                notes[key] = gb / (us / 1e6) if us > 0 else None
    rates = table.gbps[np.isin(table.cat, ["gpu_memcpy"]) & ~np.isnan(table.gbps)]
    if len(rates):
        notes["copy_gbps_median_trace"] = float(np.median(rates))
    sizes = sorted({gs for *_, gs in fit.colls if gs})
    if sizes:
        notes["collective_group_sizes"] = ",".join(map(str, sizes))
    if fit.colls:
        with_bytes = sum(1 for t in tasks if t.kind == "collective" and t.bytes is not None)
        notes["collectives_with_bytes"] = f"{with_bytes}/{len(fit.colls)}"
    # a wide spread of step times: one representative step cannot stand for all of them
    non_last = [s.dur_us for s in kept if not s.last]
    if len(non_last) >= 3:
        cv = float(np.std(non_last) / np.mean(non_last))
        notes["step_time_cv"] = cv
        if cv > STEP_CV_WARN:
            warnings.append(f"step times vary widely (coefficient of variation {cv:.2f}, "
                            f"{min(non_last) / 1e3:.1f}-{max(non_last) / 1e3:.1f} ms): the steady "
                            "state repeats the median step (with the measured next() times "
                            "resampled); the window replay reproduces the steps one by one")
    input_stalls(ctx, kept, rep, notes, warnings)
    if next_us:
        # every next() the captured steps measured, resampled step by step: stalls included
        produce = (DurationSpec.from_samples(next_us) if len(set(next_us)) > 1
                   else DurationSpec.constant(next_us[0]))
        loader = LoaderParams(num_workers=0, produce=produce, host_cores=ASSUMED_HOST_CORES)
        sources["loader.produce"] = "inferred"
        notes["dataloader_next_us"] = produce.mean_us
        names = {str(n) for n in
                 ctx.table.names[ctx.table.is_cat("cpu_op", "user_annotation")][:200000]}
        single = any("_SingleProcessDataLoaderIter" in n for n in names)
        multi = any("_MultiProcessingDataLoaderIter" in n for n in names)
        if single and not multi:
            # the iterator's class says num_workers=0: next() is the main thread's own loading
            sources["loader.num_workers"] = "measured"
        else:
            shows = ("the trace shows a multi-process DataLoader but not its num_workers"
                     if multi else "DataLoader worker count is not in a GPU trace")
            warnings.append(f"{shows}: the loader is modelled as its measured next() time on "
                            f"the main thread (num_workers=0 in the model); {ASK_LOADER}")
    else:
        loader = LoaderParams(host_cores=ASSUMED_HOST_CORES)
    warnings.append(f"host CPU cores are not in a GPU trace: assumed {ASSUMED_HOST_CORES} for "
                    f"the DataLoader workers and the main thread; {ASK_CORES}")
    return notes, sources, loader, warnings


ASK_LOADER = "give a capture sidecar for the real settings"
ASK_CORES = "give a capture sidecar for the real count"
"""How the two warnings a sidecar answers end (:func:`calibration.calibrate.apply_sidecar`
drops them when it has the loader's settings and the host's cores)."""


def input_stalls(ctx: TraceContext, kept: list[Step], rep: Step, notes: dict, warnings: list[str]):
    """Note the steps whose DataLoader ``next()`` took ``INPUT_STALL_SHARE`` of the
    representative step or more when the representative step itself did not: the loader could
    not keep up there, and a model of one step (whose loader is its ``next()`` time) replays
    the other regime. ``notes``: ``input_stalled_steps``, ``input_stall_mean_us`` (mean
    ``next()`` of those steps), ``input_stalled_step_mean_us`` (their mean step)."""
    t = ctx.table
    rows = np.nonzero(t.is_cat("cpu_op", "user_annotation") & (t.ph == "X"))[0]
    rows = rows[name_mask(t.names[rows], DATALOADER_RE)]

    def next_us(s: Step) -> float:
        m = (t.tid[rows] == s.tid) & (t.ts_ns[rows] >= s.start_ns) & (t.ts_ns[rows] < s.end_ns)
        return float(t.dur_ns[rows[m]].sum()) / 1000.0

    limit = INPUT_STALL_SHARE * rep.dur_us
    if next_us(rep) >= limit:
        return
    stalled = [(s, w) for s in kept if not s.last for w in (next_us(s),) if w >= limit]
    if not stalled:
        return
    wait = float(np.mean([w for _, w in stalled]))
    step = float(np.mean([s.dur_us for s, _ in stalled]))
    notes.update(input_stalled_steps=len(stalled), input_stall_mean_us=wait,
                 input_stalled_step_mean_us=step)
    warnings.append(f"{len(stalled)} of {len(kept)} steps waited {wait / 1e3:.1f} ms on average "
                    f"for the DataLoader (those steps: {step / 1e3:.1f} ms on average): the "
                    "workers could not keep up there; the steady state draws such waits as "
                    "often as they were measured, and a capture sidecar (the workers' count and "
                    "produce time) would model why")
