"""Where a DDP demo row's error lies: predicted against measured, per rank and phase (issue 12).

Both sides are cut at the same instants of each step (means over the measured steps, ms;
the simulated side is read by :func:`models.phases.rank_phases_us`, as ``whatif`` reads it):

- ``fwd``: step start to forward's end (the straggler's spin included);
- ``barrier``: the time in ``dist.barrier()`` (0 without one);
- ``bwd``: backward's start to the last gradient's hook (measured; simulated: the start of
  the last bucket's enqueue), and ``bwd_cpu``, the training thread's CPU over it (simulated:
  the host thread's busy spans in it);
- ``wait``: from there to backward's end: the last enqueue and the wait for the outstanding
  all-reduces (untraced), with the core taken back after it;
- ``opt``: the optimizer;
- ``tail``: the optimizer's end to the next step's start (the harness's own code between
  steps; the calibrated optimizer op holds it, with the profiler's ``step()`` in the capture);
- ``post``: ``wait + opt + tail``, the last hook to the next step: where the calibrated model
  draws the line between the wait and the optimizer (at the training thread's resume, before
  the last bucket's copy into the gradients) differs from the harness's (backward's return),
  so only their sum compares exactly;
- ``step``: start to next start (the rank's own; the job pays the slower rank's).

Measured: :attr:`demo.ddp_job.RunResult.phases` of every repeat of the setting in
``runs.json``. Predicted: the setting's what-if applied to the demo's ``model.json`` and
simulated (:func:`models.simulate.simulate`, the spans of the host thread). A phase whose error
is large on one rank says which mechanism the model lacks; equal errors on every phase say
the host's speed.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from stepsim.models.phases import PHASES, rank_phases_us
from stepsim.simcore.units import us_to_ms


def measured_phases(rank_runs: list[dict]) -> dict[str, float]:
    """One rank's phase means (ms) over every step of the given runs (each a rank's
    :class:`demo.ddp_job.RunResult` as a dict)."""
    cols = defaultdict(list)
    for run in rank_runs:
        p = np.asarray(run["phases"], dtype=float).reshape(-1, 11)
        s = np.asarray(run["step_starts_us"], dtype=float)
        n = min(len(p), len(s) - 1)
        if n <= 0:
            continue
        p, t0, nxt = p[:n], s[:n], s[1:n + 1]
        t1, t2, tg, t3, t4, _c0, _c1, c2, cg, _c3, _c4 = p.T
        for name, v in (("fwd", t1 - t0), ("barrier", t2 - t1), ("bwd", tg - t2),
                        ("bwd_cpu", cg - c2), ("wait", t3 - tg), ("opt", t4 - t3),
                        ("tail", nxt - t4), ("post", nxt - tg), ("step", nxt - t0)):
            cols[name].append(v)
    return {c: float(np.mean(np.concatenate(cols[c]))) / 1e3 if cols[c] else float("nan")
            for c in PHASES}


def simulated_phases(sim) -> dict[int, dict[str, float]]:
    """Per rank, the phase means (ms) over a simulation's measured steps, read off its host
    thread's spans (:func:`models.phases.rank_phases_us`, what ``whatif`` prints too)."""
    return {r: {c: us_to_ms(v) for c, v in p.items()} for r, p in rank_phases_us(sim).items()}


def breakdown(model, runs: dict, settings: dict, steps: int = 40, warmup: int = 3,
              seed: int = 0) -> list[dict]:
    """Per setting (``label: (what-if op texts, _)``, as :data:`demo.ddp.SETTINGS`) and rank:
    ``{"setting", "rank", "predicted": {phase: ms}, "measured": {phase: ms}}``, then per
    setting a row with ``rank`` None whose ``job`` phase is the job's step (per step the
    slower rank's, :func:`demo.ddp._job_steps_us`) and ``over_ranks`` its excess over the
    ranks' mean step (ms): what the per-step maximum adds; a setting without runs in ``runs``
    is skipped."""
    from stepsim.demo.ddp import _job_steps_us, _op
    from stepsim.models.simulate import simulate
    from stepsim.scenarios.predict import predict

    rows = []
    for label, (ops, _) in settings.items():
        keys = sorted(k for k in runs if k.rsplit("#", 1)[0] == label)
        if not keys:
            continue
        p = predict(model, [_op(t) for t in ops], steps=steps, warmup=warmup, seed=seed,
                    intervals=False)
        sim = simulate(p.model, steps=steps, warmup=warmup, seed=seed)
        pred = simulated_phases(sim)
        for rank in sorted(pred):
            meas = measured_phases([r for k in keys for r in runs[k] if r["rank"] == rank])
            rows.append({"setting": label, "rank": rank, "predicted": pred[rank],
                         "measured": meas})
        mj = float(np.mean([_job_steps_us(runs[k]).mean() for k in keys])) / 1e3
        mr = float(np.mean([measured_phases([r])["step"] for k in keys for r in runs[k]]))
        pj, pr = sim.mean_step_us / 1e3, float(sim.step_us.mean()) / 1e3
        rows.append({"setting": label, "rank": None, "predicted": {"job": pj,
                     "over_ranks": pj - pr}, "measured": {"job": mj, "over_ranks": mj - mr}})
    return rows


def format_breakdown(rows: list[dict]) -> list[str]:
    """The breakdown as text lines: per setting and rank, each phase predicted/measured (ms)
    and their difference."""
    lines = ["per phase, predicted / measured ms (difference): " + ", ".join(PHASES)]
    for r in rows:
        p, m = r["predicted"], r["measured"]
        if r["rank"] is None:
            lines.append(f"  {r['setting'][:20]:20s} job step {p['job']:.2f}/{m['job']:.2f} "
                         f"({p['job'] - m['job']:+.2f}), of it over the ranks' mean step "
                         f"{p['over_ranks']:.2f}/{m['over_ranks']:.2f}")
            continue
        lines.append(f"  {r['setting'][:20]:20s} r{r['rank']} " + "  ".join(
            f"{c} {p[c]:.2f}/{m[c]:.2f} ({p[c] - m[c]:+.2f})" for c in PHASES))
    return lines
