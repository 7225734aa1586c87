"""``stepsim demo --ddp``: DDP what-ifs predicted from one capture and re-measured.

1. One group of 2 gloo ranks on this host (:mod:`demo.ddp_job`) runs, in order: a profiled
   capture at DDP's defaults (``bucket_cap_mb`` unset: 25 MiB, first bucket 1 MiB), then
   ``repeats`` rounds of the measured settings, interleaved so slow drift of the machine's
   load hits every setting alike: the defaults again, ``bucket_cap_mb=1``,
   ``bucket_cap_mb=25``, a 40 ms straggler in rank 1's forward, and that straggler with a
   barrier before backward (``bucket_cap_mb=25`` is not the defaults: an explicit cap caps the
   first bucket too, so the MLP's 8 MiB go in one bucket where the defaults make 1 + 7 MiB,
   DDP's own ``rebuilt_bucket_sizes`` in ``runs.json``; it is scored out of sample); each
   round ends with a replicate capture of the defaults (the
   calibration setting), from which the host's run-to-run speed is measured
   (:mod:`calibration.host_noise`, ``host.speed_runs``), as ``stepsim demo`` does.
2. Calibrate the capture (:mod:`calibration.gloo`) with its replicates: one model with both
   ranks. A profiled run of the defaults that ran under outside load (its cores or its CPU
   speed past 10 % off the runs' median, or other processes busy on over 10 % of the
   machine's cores: :mod:`calibration.ddp_runs`) is left out, and the demo says which and
   why; when it is the capture, the first quiet replicate is the capture (at 11:02 one
   replicate at 1.535× the capture's CPU time had made every what-if about 10 % slow). A
   re-measured repeat under such load is marked, and its row set apart from the score where
   the load could explain its error (:mod:`demo.ddp_load`). The capture times unprofiled
   steps right before and after its profiled window, in the same processes: the profiler's
   own cost per rank, measured against them, is taken out of the host's durations
   (:mod:`calibration.profiler_overhead`). After them it runs the cold-resume probe
   (:func:`demo.ddp_job.cold_probe`): what a backward costs after 10, 20 and 40 ms off its
   data, which the straggler and barrier what-ifs add (:mod:`calibration.gloo_cold`).
3. Predict each setting with its what-if (``--set comm.bucket_cap_mb=…``,
   ``--fix straggler:rank=1,phase=forward,ms=40``, ``--fix barrier``), with its P10–P90
   (:func:`scenarios.predict.predict`: the host's run-to-run speed drawn from the replicates'
   Student-t predictive, pooled with the stated prior range, from the runs' CPU time of
   identical work or, where it spreads wider, their unprofiled steps' wall time,
   ``host.wall_runs``: ranks sharing the cores interleave differently from run to run, with
   the replay's timed re-runs after the profiled runs, as ``stepsim demo`` draws from every
   run of its calibration setting, :mod:`demo.ddp_noise`; the captured steps bootstrapped;
   the interval of what the row scores, the pooled mean of its ``repeats`` re-measured runs,
   as ``stepsim demo``'s rows; the point's level that of the timed phase, from the
   replay's timed repeats: the CPU level from their training threads' CPU, the transfer level
   from what is left of their step, so the replay row is in sample in its point,
   :mod:`demo.ddp_level`), and compare with the re-measured runs: the job's step
   (per step, the slower rank's start-to-start time; the mean over a run's steps; mean and
   range over the repeats), and, for the barrier, each rank's time in it (arrival skew) against the
   simulated split.
4. Write everything under one folder: ``capture/`` and ``replicates/r<k>/`` (traces +
   sidecars), ``model.json``,
   ``runs.json`` (every rank's measured instants), ``table.json`` (with ``phases``: per
   setting and rank, each phase predicted against measured, :mod:`demo.ddp_phases`, also
   printed under the table: it says where a row's error lies).

The straggler is 40 ms of *wall-clock* busy work (a thread spinning on ``perf_counter``): it
keeps its core busy for 40 ms and ends on time whatever else the machine runs, which is what
the what-if adds (``RankParams.phase_wall_us``, not scaled by the host's speed).

What the barrier costs on top of the straggler (measured with ``/tmp/quiet``, the job's own
runs, straggler and straggler + barrier alternated over 5 rounds of 8 steps, twice: +1.7 and
+0.8 ms; three more runs with per-phase timers: +0.5, +1.0, +2.9 ms; simulated +1.5 ms): on
the shared cores, without a barrier the fast rank's backward runs while the straggler spins,
and the straggler's backward then has the other core to itself; the barrier holds the fast
rank until the spin ends, so the two backwards and their all-reduces' gloo threads share the
cores. The waiting rank does not spin in the barrier (its main thread used 1.9 ms of CPU over
a 41 ms wait). Runs with other load on the machine measured +3.6 to +9.3 ms, from a few steps
up to 40 ms longer (the straggler's forward 18 ms late while the other rank sat idle in the
barrier): the row's mean is only as quiet as the machine.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np
import orjson
from rich.console import Console
from rich.table import Table

from stepsim.calibration.ddp_runs import pick_runs
from stepsim.demo.ddp_level import on_timed_level, thread_cpu_step_us
from stepsim.demo.ddp_load import level_loaded, mark_row, outside_share
from stepsim.demo.ddp_noise import with_remeasured_walls
from stepsim.demo.ddp_phases import breakdown, format_breakdown
from stepsim.demo.ddp_speed import row_readings
from stepsim.fit import calibrate
from stepsim.models.host_drift import drift_cap
from stepsim.models.host_speed import factor_range, from_walls, noise_runs
from stepsim.models.load_bound import outside_load_slowdown
from stepsim.models.params import save_model
from stepsim.models.simulate import simulate
from stepsim.models.phases import rank_phases_us
from stepsim.scenarios.predict import predict
from stepsim.scenarios.op_text import parse_fix, parse_set
from stepsim.demo.out_folder import DDP_ENTRIES, claim_out_folder
from stepsim.simcore.atomic import make_folder, write_atomic

STRAGGLER_MS = 40.0
REPLAY = "defaults (replay)"
SETTINGS = {   # label: (what-if ops, Run keyword arguments)
    REPLAY: ([], {}),
    "bucket_cap_mb=1": (["set comm.bucket_cap_mb=1"], {"bucket_cap_mb": 1}),
    "bucket_cap_mb=25": (["set comm.bucket_cap_mb=25"], {"bucket_cap_mb": 25}),
    "straggler 40 ms": ([f"fix straggler:rank=1,phase=forward,ms={STRAGGLER_MS:g}"],
                        {"straggler_ms": STRAGGLER_MS}),
    "straggler + barrier": ([f"fix straggler:rank=1,phase=forward,ms={STRAGGLER_MS:g}",
                             "fix barrier"], {"straggler_ms": STRAGGLER_MS, "barrier": True}),
}


def _op(text: str):
    kind, arg = text.split(" ", 1)
    return parse_set(arg) if kind == "set" else parse_fix(arg)


def _job_steps_us(ranks: list[dict]) -> np.ndarray:
    """Per step, the slower rank's start-to-start time (µs)."""
    d = [np.diff(np.array(r["step_starts_us"])) for r in ranks]
    n = min(len(x) for x in d)
    return np.max([x[:n] for x in d], axis=0)


def run_ddp_demo(out: Path, repeats: int = 3, steps: int = 20, seed: int = 0) -> int:
    """Run the DDP demo into ``out`` (see the module docstring); returns the exit code."""
    from stepsim.demo.ddp_job import Run, run_plan

    console = Console(stderr=True)
    claim_out_folder(out, DDP_ENTRIES)
    make_folder(out)
    t0 = time.monotonic()
    load_before = os.getloadavg()
    plan = [Run("capture", steps=steps, profile_dir=str(out / "capture"))]
    for k in range(repeats):
        plan += [Run(f"{label}#{k}", steps=steps, **kw) for label, (_, kw) in SETTINGS.items()]
        plan.append(Run(f"replicate#{k}", steps=steps,
                        profile_dir=str(out / "replicates" / f"r{k}")))
    console.print(f"running 2 gloo ranks: 1 capture + {repeats} x ({len(SETTINGS)} measured runs "
                  f"+ 1 replicate capture of the defaults) of {steps} steps (load average "
                  f"{load_before[0]:.1f})")
    runs = run_plan(plan, timeout_s=900)
    load_after = os.getloadavg()
    write_atomic(out / "runs.json", orjson.dumps(runs, option=orjson.OPT_SERIALIZE_NUMPY))
    model, pick, rows = score(out, runs, repeats, seed)
    save_model(model, out / "model.json")
    phases = breakdown(model, runs, SETTINGS, seed=seed)     # where each row's error lies
    summary = summarize(rows, model, pick)
    summary.update({"load_average_before": list(load_before),
                    "load_average_after": list(load_after),
                    "wall_s": time.monotonic() - t0, "repeats": repeats, "steps": steps,
                    "host_drift": _drift(model, repeats),
                    "cpu_count": os.cpu_count()})
    write_atomic(out / "table.json", orjson.dumps({"rows": rows, "summary": summary,
                                                   "phases": phases},
                                                  option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    print_table(rows, model, pick, summary, out)
    Console().print("\n".join(format_breakdown(phases)), highlight=False)
    return 0


def row_prediction(model, ops: list, steps_us: list, seed: int = 0, draws: bool | int = True):
    """One row's prediction of ``model`` after ``ops``: the point from 40 simulated steps, the
    P10–P90 of what the row scores, the pooled mean of its re-measured runs (``steps_us``:
    each run's job steps, µs), as ``stepsim demo``'s rows (``runs=``, ``measured_steps=``);
    the point does not move with the runs."""
    return predict(model, ops, steps=40, warmup=3, seed=seed, intervals=draws,
                   runs=max(len(steps_us), 1),
                   measured_steps=sum(len(v) for v in steps_us) or None)


def score(out: Path, runs: dict, repeats: int, seed: int = 0):
    """Calibrate from the quiet profiled runs of the defaults in ``out`` (the capture and its
    ``repeats`` replicates, :func:`calibration.ddp_runs.pick_runs`) and predict every setting
    against the re-measured ``runs``: ``(model, pick, rows)``. Writes nothing, so a kept
    demo folder can be scored again."""
    outside = [outside_share(runs[label]) if label in runs else None
               for label in ["capture"] + [f"replicate#{k}" for k in range(repeats)]]
    pick = pick_runs([out / "capture"] + [out / "replicates" / f"r{k}" for k in range(repeats)],
                     outside)
    model = calibrate(pick.capture, replicates=pick.replicates)
    # the host's run-to-run noise from every run of the calibration setting, the timed
    # re-runs too (demo.ddp_noise), and the point's host factor on their mean where the
    # spread is theirs
    # every repeat, loaded ones too (demo.ddp_load): each row's measured mean holds all its
    # repeats, so the level it is scored at is theirs (offset19: over the quiet ones alone,
    # 30 kept demos' median |error| 4.58 %, over all 3 3.40 % offline)
    replays = [runs[f"{REPLAY}#{k}"] for k in range(repeats) if f"{REPLAY}#{k}" in runs]
    model, got = with_remeasured_walls(model, pick.capture, replays)
    if got:   # the point on the timed phase's level, from the replay's own runs (demo.ddp_level)
        model, _ = on_timed_level(model, [_job_steps_us(r) for r in replays], seed,
                                  thread_cpu_step_us(replays))
    rows = []
    for label, (ops, _) in SETTINGS.items():
        ops = [_op(text) for text in ops]
        steps_us = [_job_steps_us(runs[f"{label}#{k}"]) for k in range(repeats)]
        p = row_prediction(model, ops, steps_us, seed)
        means = [float(v.mean()) for v in steps_us]
        pred, meas = p.mean_step_us, float(np.mean(means))
        row = {"setting": label, "predicted_ms": pred / 1e3, "measured_ms": meas / 1e3,
               "p10_ms": p.p10_step_us / 1e3 if p.p10_step_us is not None else None,
               "p90_ms": p.p90_step_us / 1e3 if p.p90_step_us is not None else None,
               "in_interval": p.covers(meas), "spread_ms": [min(means) / 1e3, max(means) / 1e3],
               "error": pred / meas - 1.0, "in_sample": label == REPLAY}
        # repeats under outside load (demo.ddp_load): marked, the row set apart where the
        # load could explain its error
        # the host's speed in the row's runs from identical work, and the backend's CPU
        # measured against the model's price of it (demo.ddp_speed)
        row.update(row_readings(runs, label, REPLAY, repeats, p.model, "straggler" in label))
        # the replay comes first: a load that raised its level could explain a row measured
        # faster than predicted (demo.ddp_load.level_loaded)
        lifted = label != REPLAY and level_loaded(rows[0])
        rows.append(mark_row(row, means, [runs[f"{label}#{k}"] for k in range(repeats)],
                             lifted))
        if "barrier" in label:
            # time in the barrier (skew + transfer), as ``dist.barrier()`` is timed: from the
            # rank's entry to its backward's start, the last rank's late release included
            # (models.phases; the collective's own split, models.skew, ends at its transfer)
            sim = simulate(p.model, steps=40, warmup=3, seed=seed)
            split = {r: v["barrier"] for r, v in rank_phases_us(sim).items()}
            for r in (0, 1):
                waits = [np.mean(runs[f"{label}#{k}"][r]["barrier_us"]) for k in range(repeats)]
                rows.append({"setting": f"  rank {r} time in barrier (skew + transfer)",
                             "predicted_ms": split.get(r, 0.0) / 1e3, "p10_ms": None,
                             "p90_ms": None, "in_interval": None,
                             "measured_ms": float(np.mean(waits)) / 1e3,
                             "spread_ms": [min(waits) / 1e3, max(waits) / 1e3], "error": None})
    return model, pick, rows


def summarize(rows: list[dict], model, pick) -> dict:
    """The table's summary: |error| over every step row and over the what-ifs scored (out of
    sample: the replay of the calibration setting is in sample; a row set apart for outside
    load, :mod:`demo.ddp_load`, is not scored), and the runs calibration left out."""
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    oos = [abs(r["error"]) for r in rows if r["error"] is not None and not r.get("in_sample")
           and not r.get("load_set_apart")]
    return {"median_abs_error": float(np.median(errs)), "max_abs_error": float(max(errs)),
            "out_of_sample_median_abs_error": float(np.median(oos)) if oos else None,
            "out_of_sample_max_abs_error": float(max(oos)) if oos else None,
            "out_of_sample_scored": len(oos),
            "set_apart": [r["setting"] for r in rows if r.get("load_set_apart")],
            "host_speed_runs": list(model.host.speed_runs),
            "host_wall_runs": list(getattr(model.host, "wall_runs", [])),
            "capture_outside_load_held": model.meta.notes.get("outside_load_held"),
            "calibrated_from": [pick.capture.name] + [p.name for p in pick.replicates],
            "left_out": [{"run": p.name, "why": why} for p, why in pick.left_out],
            "run_core_shares": pick.shares, "run_speeds": pick.speeds,
            "run_outside_shares": pick.outside}


def speed_line(rows: list[dict]) -> str:
    """The note on the rows' host and backend readings (:mod:`demo.ddp_speed`)."""
    fwd = [f"{r['setting']} x{r['host_fwd_ratio']:.3f}" for r in rows
           if r.get("host_fwd_ratio") is not None and not r.get("in_sample")]
    back = [f"{r['setting']} {r['backend_cpu_ms']:.2f}/{r['backend_priced_ms']:.2f}"
            for r in rows if r.get("backend_cpu_ms") is not None]
    return ("forward CPU (the same work in every setting without a straggler) against the "
            "defaults' runs of the same rounds, measured: " + (", ".join(fwd) or "none")
            + " (below 1: that setting ran on a faster host, and that much of a slow "
            "prediction is the host's); backend threads' CPU a rank-step, measured / priced ms: "
            + ", ".join(back))


def _drift(model, repeats: int) -> dict | None:
    """What the host's drift allows the rows' intervals (each of the pooled mean step of
    ``repeats`` runs), as numbers (:func:`models.host_drift.drift_cap`: from the runs' wall
    time where it spreads wider than their CPU time); None without two measured runs."""
    cap = drift_cap(model, repeats)
    return None if cap is None else {**cap[1], "text": cap[0]}


def print_table(rows: list[dict], model, pick, summary: dict, out: Path) -> None:
    """The demo's table and its notes, on stdout."""
    load_before, load_after = summary["load_average_before"], summary["load_average_after"]
    table = Table(title="DDP on the CPU (2 gloo ranks): predicted from one capture vs re-measured")
    for col in ("setting", "predicted ms", "P10–P90", "measured ms (mean)", "range of repeats",
                "error", "in P10–P90"):
        table.add_column(col, justify="left" if col == "setting" else "right")
    for r in rows:
        band = "" if r["p10_ms"] is None else f"{r['p10_ms']:.1f}–{r['p90_ms']:.1f}"
        table.add_row(r["setting"], f"{r['predicted_ms']:.1f}", band, f"{r['measured_ms']:.1f}",
                      f"{r['spread_ms'][0]:.1f}–{r['spread_ms'][1]:.1f}",
                      "" if r["error"] is None else f"{r['error']:+.1%}"
                      + (" ‡" if r.get("load_set_apart") else ""),
                      {True: "yes", False: "no", None: ""}[r["in_interval"]])
    Console().print(table)
    prior = model.meta.ranges["host.cpu_scale"]
    noise = noise_runs(model.host, prior)
    lo, hi = factor_range(noise, prior, summary["repeats"])
    err = model.host.cpu_scale_error_log
    Console().print(f"host speed (CPU time of identical work, per run of the defaults against the "
                    f"capture, measured): {', '.join(f'{v:.3f}' for v in model.host.speed_runs)};"
                    f" the pooled mean of the next {summary['repeats']} runs' P10–P90 "
                    f"{lo:.3f}–{hi:.3f}× the centre "
                    f"{model.host.cpu_scale:.3f}"
                    + (f" (the spread of the runs' wall time, the profiled runs' then the "
                       f"timed re-runs', {', '.join(f'{v:.3f}' for v in model.host.wall_runs)}"
                       ": wider than their CPU time's"
                       + ("; the spread within the profiled and the timed runs apart" if
                          model.host.centre_runs else "; the centre is their mean") + ")"
                       if from_walls(model.host, noise) else "")
                    + (f"; the centre is the timed phase's level: the replay's "
                       f"{model.host.centre_runs} timed runs' mean step (demo.ddp_level)"
                       if model.host.centre_runs else "")
                    + (f", times the profiler factor's own error ×{math.exp(-err):.3f}–"
                       f"{math.exp(err):.3f} (uniform)" if err > 0 else ""))
    if summary.get("host_drift"):
        Console().print(summary["host_drift"]["text"])
    Console().print(speed_line(rows))
    for r in rows:
        for lo in r.get("loaded", []):
            # rounds counted from 1 (table.json's ``repeat`` from 0): "repeat 1" read as the
            # first round where it was the second (2026-12-06 18:39-18:41)
            Console().print(f"{'‡ ' if r['load_set_apart'] else ''}{r['setting']}, round "
                            f"{lo['repeat'] + 1} of {summary['repeats']}: ran under outside "
                            f"load ({lo['why']})"
                            + (f"; over the quiet repeats measured {r['quiet_measured_ms']:.1f}"
                               f" ms, error {r['quiet_error']:+.1%}" if "quiet_error" in r
                               else ""))
    mirrored = [r["setting"] for r in rows if r.get("level_set_apart")]
    if set(summary["set_apart"]) - set(mirrored):
        Console().print("‡ measured slower than predicted with a repeat under outside load: "
                        "the load could explain the error, so the row is left out of the score")
    if mirrored:
        Console().print(f"‡ {', '.join(mirrored)}: measured faster than predicted where outside "
                        "load on the replay's repeats raised the level every row's point "
                        "stands on (demo.ddp_load.level_loaded): the load could explain the "
                        "error, so the row is left out of the score")
    med, top = (summary["out_of_sample_median_abs_error"],
                 summary["out_of_sample_max_abs_error"])
    Console().print(f"step errors: out of sample ({summary['out_of_sample_scored']} of the "
                    f"{len(SETTINGS) - 1} what-ifs scored) "
                    + (f"median |error| {med:.1%}, max {top:.1%}" if med is not None else "none")
                    + f"; every row with the replay median {summary['median_abs_error']:.1%}, "
                    f"max {summary['max_abs_error']:.1%}; "
                    f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on "
                    f"{os.cpu_count()} cores; {summary['wall_s']:.0f} s; artefacts in {out}")
    for path, why in pick.left_out:
        Console().print(f"left out of the calibration: {path.relative_to(out)} ({why}); "
                        f"calibrated from {pick.capture.relative_to(out)}"
                        + (f" with {len(pick.replicates)} replicate(s)" if pick.replicates
                           else " alone (the host's run-to-run speed is the stated prior)"))
    if pick.note:
        Console().print(pick.note)
    loaded = outside_load_slowdown(model)
    if loaded is not None:
        Console().print(f"the capture ran under outside load ({1 + loaded:.2f}x slower than the "
                        "same work alone, see the warnings): every row above carries it; run "
                        "the demo again on a quiet machine")
