"""A gloo job's collective transfers measured over its capture and its replicates.

The transfer of each all-reduce (its span on the last rank to arrive, :mod:`calibration.gloo`)
varies from run to run far more than within one run, and the capture, the first profiled run
of its processes, mostly ran it slower: in the DDP demo's captures of 2026-12-05 (12 demos,
00:28-07:44 UTC, load 1.1-3.4) the 7 MiB all-reduce after backward took, as the median over a
run's steps, more in the capture than the median of its three replicates in 11 of 12 (6.3-11.5
ms against 5.2-10.6 ms; 7.78 against 4.57, 5.21 and 5.66 ms at 07:43, where the demo's timed
runs of the same setting measured about 4.8 ms, median, from the last rank's last gradient to
the first rank's resume less its CPU). The replicates are that setting measured again, as the
host's speed (:mod:`calibration.host_noise`) and the collectives' CPU
(:func:`calibration.gloo_cpu.pool_bucket_cpu`) already take them: each collective's transfer is
the median over every step of every run (``measured``), and the transfer line
(:func:`calibration.gloo_transfer.transfer_fit`) is refitted to those medians. A replicate
whose collectives differ from the capture's (kinds, sizes, count) leaves the model unchanged.
Each step's late resume after the last all-reduce (``HostOp.resume_lag_us``) is pooled over
the same runs (:func:`pool_lags`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from stepsim.calibration.events import build_table
from stepsim.calibration.gloo import job_transfers
from stepsim.calibration.gloo_cpu import FLOOR_NOTE
from stepsim.calibration.gloo_transfer import transfer_fit
from stepsim.calibration.trace_io import load_rank_traces, load_trace
from stepsim.models.params import StepModel

__all__ = ["pool_transfers", "pooled_transfers", "pool_runs", "pool_lags"]


def _tables(folder: Path) -> list:
    """A job folder's rank traces (``rank<N>.json`` beside each other, or the harness's
    ``rank<N>/trace.json.gz``) as event tables."""
    subs = sorted(d for d in folder.glob("rank*") if (d / "trace.json.gz").is_file())
    raws = [load_trace(d / "trace.json.gz") for d in subs] if subs else load_rank_traces(folder)
    return [build_table(raw) for raw in raws]


def pooled_transfers(runs: list[tuple]) -> list[float] | None:
    """Per collective, the median transfer (µs) over every step of every run (``runs``: each
    run's :func:`calibration.gloo.job_transfers`), or None when the runs' collectives differ."""
    colls = runs[0][0]
    if any(r[0] != colls for r in runs[1:]) or not colls:
        return None
    allsteps = np.concatenate([r[1] for r in runs], axis=0)
    return [float(v) for v in np.median(allsteps, axis=0)]


def pool_runs(model: StepModel, capture: Path, replicates: list[Path], sidecars: list[list],
              speeds: list[float]) -> StepModel:
    """:func:`pool_transfers`, then each rank's extra per phase pooled over the same runs
    (:func:`calibration.gloo_ranks.pool_rank_extras`; ``sidecars``: each run's rank sidecars,
    the capture first; ``speeds``: each run's host speed against the capture), every run's
    traces read once."""
    from stepsim.calibration.gloo_ranks import pool_rank_extras, run_phases_us, unprofiled_cpu_us

    if not replicates or model.meta.notes.get("kind") != "cpu_ddp":
        return model
    tables = [_tables(Path(f)) for f in [capture, *replicates]]
    model = _pool_transfers(model, tables)
    if len(sidecars) != len(tables):
        return model
    phases = [run_phases_us(t, _by_rank(sides)) for t, sides in zip(tables, sidecars)]
    cpus = [{r: unprofiled_cpu_us(s) for r, s in _by_rank(sides).items()} for sides in sidecars]
    return pool_rank_extras(model, phases, speeds, cpus)


def _by_rank(sides: list) -> dict:
    """A run's sidecars by rank: their DDP record's rank, else their order."""
    ranks = [getattr(getattr(s, "ddp", None), "rank", None) for s in sides]
    if None in ranks or len(set(ranks)) != len(ranks):
        ranks = list(range(len(sides)))
    return dict(zip(ranks, sides))


def pool_transfers(model: StepModel, capture: Path, replicates: list[Path]) -> StepModel:
    """``model`` (a gloo job's, calibrated from ``capture``) with its collectives' durations
    the medians over the capture's and the ``replicates``' steps, and ``comm.latency_us`` /
    ``comm.bus_gbps`` refitted to them (see the module docstring). Unchanged without
    replicates or where a run's collectives differ from the capture's."""
    if not replicates or model.meta.notes.get("kind") != "cpu_ddp":
        return model
    return _pool_transfers(model, [_tables(Path(f)) for f in [capture, *replicates]])


def _pool_transfers(model: StepModel, tables: list[list]) -> StepModel:
    """:func:`pool_transfers` from every run's rank tables (the capture's first)."""
    c = model.comm
    stream = model.device.streams.get(c.comm_stream, [])
    runs = [job_transfers(t) for t in tables]
    model = pool_lags(model, [r[3] for r in runs])
    pooled = pooled_transfers(runs)
    if pooled is None or len(pooled) != len(stream):
        return model
    tasks = [t.model_copy(update={"dur_us": v}) for t, v in zip(stream, pooled)]
    upd: dict = {}
    sized = [t for t in tasks if t.bytes]
    if sized and model.meta.sources.get("comm.bus_gbps") == "inferred":
        busy = [b for t, b in zip(tasks, runs[0][2]) if t.bytes]   # the capture's overlap
        upd["latency_us"], upd["bus_gbps"] = transfer_fit(
            [t.bytes for t in sized], [t.dur_us for t in sized], busy, c.world_size, [],
            floor_us=model.meta.notes.get(FLOOR_NOTE, c.host_cpu_us) or 0.0)
    streams = {**model.device.streams, c.comm_stream: tasks}
    notes = {**model.meta.notes, "transfer_runs": len(runs), "transfer_capture_us": ",".join(
        f"{t.dur_us:.0f}" for t in stream)}
    sources = {**model.meta.sources, f"device.streams.{c.comm_stream}": "measured"}
    return model.model_copy(update={
        "device": model.device.model_copy(update={"streams": streams}),
        "comm": c.model_copy(update=upd),
        "meta": model.meta.model_copy(update={"notes": notes, "sources": sources})})


def pool_lags(model: StepModel, runs: list[list[float] | None]) -> StepModel:
    """``model`` with its optimizer op's per-step resume lags (``HostOp.resume_lag_us``,
    :mod:`calibration.gloo_resume`) those of every run's steps (``runs``: each run's late
    lags, :func:`calibration.gloo.job_transfers`, the capture's first), as the transfers
    are pooled. A late resume is a wait for a core when the last all-reduce wakes every
    rank's training thread while the gloo threads still run, so it is the run's as much as
    the transfer is: in the DDP demo of 11:58:43 (2026-12-06) the capture, under outside
    load, read a mean lag of 2.30 ms, its three replicates 0.48, 0.74 and 0.68 ms, and the
    timed runs' backward returned 0.85 ms apart at the defaults, 0.42 ms at
    ``bucket_cap_mb=25`` (the harness's timers); from the capture alone every simulated step
    drew the loaded run's lags. Unchanged where the model has no lag or a run has none
    (``measured``: the steps of the runs themselves, none dropped or reweighted)."""
    j = next((j for j, op in enumerate(model.host.ops) if op.resume_lag_us), None)
    if j is None or len(runs) < 2 or any(not r for r in runs):
        return model
    ops = list(model.host.ops)
    ops[j] = ops[j].model_copy(update={"resume_lag_us": [float(v) for r in runs for v in r]})
    notes = {**model.meta.notes, "resume_lag_runs": len(runs),
             "resume_lag_capture_mean_us": round(float(np.mean(runs[0])), 1)}
    return model.model_copy(update={"host": model.host.model_copy(update={"ops": ops}),
                                    "meta": model.meta.model_copy(update={"notes": notes})})
