"""A DDP rank's cold resume: the extra CPU of a backward that follows a pause, from the
harness's cold-resume probe (``ddp.cold_probe``: :func:`demo.ddp_job.cold_probe`;
``comm.cold_resume``, ``measured``).

Mechanism (``bench/ddp_cold_resume.py``, one process, this 2-vCPU host, 2026-12-06): the
MLP's backward after a pause costs more thread CPU than right after its forward, ×0.97-1.01
after 10 ms, ×1.03-1.07 after 20 ms, ×1.11-1.14 after 40 ms at load 2.3 (×1.10-1.15 at load
3.6), the same after a spin as after a sleep, and the optimizer ×1.3 after 40 ms: while a
thread is off its data the caches lose them (the L2 of 2 MiB per core, the L3 that other
guests share), and it fetches them again. In the DDP demo's straggler runs (2026-12-05) the
straggler's backward took 0.9-1.1 ms more CPU than the defaults' (5.9-6.7 ms), where the
model credited it the core the waiting rank frees and no more CPU.

Per pause, the share is ``Σ cold / Σ hot − 1`` over every rank's record of every run given
(the capture's and its replicates'): each record's ``hot`` steps ran interleaved with its
``cold`` ones, so the host's drift hits both. A share measured below 0 is taken as 0 (the
pause cannot make the work cheaper; noise), and said.

The optimizer (``comm.cold_resume_opt``): the same probe's steps record its thread CPU too,
kept as µs (the cold steps' mean less the hot ones'). In the DDP job itself
(``bench/ddp_wait_transfer.py ddp``, 2026-12-06 07:18-07:25, load 2.5, 6 and 10 rounds), a 10/20/40 ms straggler in rank 1's forward made the
optimizer's CPU, paired against the same round's run without one (1.3-1.5 ms): on the rank
that waited for it in the all-reduce +0.19-0.34 / +0.45-0.51 / +0.27-0.50 ms, on the
straggler (whose backward ran between) +0.00-0.13 / +0.17-0.18 / +0.08-0.35 ms.
"""
from __future__ import annotations

from stepsim.models.param_comm import MAX_COLD_SHARE
from stepsim.models.warning_record import said

__all__ = ["cold_params", "cold_opt_params", "pool_cold"]


def cold_params(sidecars, warnings: list[str] | None = None) -> list[tuple[float, float]]:
    """``comm.cold_resume`` from the capture sidecars ``sidecars`` (any iterable; None entries
    and sidecars without a probe skipped): ``(pause µs, share)`` per pause probed, increasing;
    empty without a probe."""
    out = []
    for pause, (cold, hot, _) in _pooled(sidecars, "", warnings).items():
        if hot <= 0:          # no CPU read in the steps without the pause: nothing to compare
            continue
        share = cold / hot - 1.0
        if share > MAX_COLD_SHARE:   # a hot CPU near 0 (1e-9 µs): no model could hold it
            if warnings is not None:
                warnings.append(f"the cold-resume probe's {pause / 1e3:g} ms pause left out: "
                                f"its backward costs {share + 1:g}x its hot CPU of {hot:g} µs "
                                f"(summed over its records), past {MAX_COLD_SHARE:g}: "
                                "records that cannot be right")
            continue
        out.append((pause, _at_least_0(share, f"{-share:.1%}", "backward", pause, warnings)))
    return out


def cold_opt_params(sidecars, warnings: list[str] | None = None) -> list[tuple[float, float]]:
    """``comm.cold_resume_opt`` from the same probe steps as :func:`cold_params` (records
    without the optimizer's CPU skipped): ``(pause µs, extra µs)``, the mean over the records'
    steps of the cold optimizer's CPU less the hot one's."""
    return [(pause, _at_least_0((cold - hot) / n, f"{(hot - cold) / n:.0f} µs", "optimizer",
                                pause, warnings))
            for pause, (cold, hot, n) in _pooled(sidecars, "opt_", warnings).items()]


def _pooled(sidecars, key: str, warnings=None) -> dict[float, tuple[float, float, int]]:
    """Per pause, increasing: Σ cold CPU, Σ hot CPU (µs, each record's median times its steps)
    and Σ steps over the records that have ``cold_<key>cpu_us``. A record whose hot CPU reads
    0 (a clock that read nothing: a backward or optimizer always takes some) is left out and
    counted in ``warnings``: its cold CPU was all taken as the pause's extra (an optimizer at
    hot 0 priced 2.2-3.4 ms of cold resume on every rank of a straggler what-if)."""
    sums: dict[float, list] = {}
    unread = []
    for side in sidecars:
        for p in getattr(getattr(side, "ddp", None), "cold_probe", None) or []:
            cold, hot = getattr(p, f"cold_{key}cpu_us"), getattr(p, f"hot_{key}cpu_us")
            if cold is None or hot is None:
                continue
            if hot <= 0:
                unread.append(p.pause_us)
                continue
            acc = sums.setdefault(float(p.pause_us), [0.0, 0.0, 0])
            acc[0] += cold * p.steps
            acc[1] += hot * p.steps
            acc[2] += p.steps
    if unread and warnings is not None:
        what = "optimizer" if key else "backward"
        warnings.append(f"the cold-resume probe: {len(unread)} record(s) read the {what}'s "
                        f"CPU without the pause as 0 µs (first at a {unread[0] / 1e3:g} ms "
                        "pause), which cannot be right: left out")
    return {pause: tuple(sums[pause]) for pause in sorted(sums)}


def _at_least_0(v: float, cheaper: str, what: str, pause: float, warnings) -> float:
    """``v``, or 0 where below it (the pause cannot make the work cheaper: noise), said."""
    if v < 0 and warnings is not None:
        # changes nothing on the step (0 is what the model takes): noted, one line, not a
        # full warning (fresh14: two to five such lines on a user's calibrate)
        warnings.append(said(f"the cold-resume probe measured the {what} {cheaper} cheaper "
                             f"after a {pause / 1e3:g} ms pause: taken as no extra CPU (noise)",
                             "cold_resume_noise", noted=True))
    return max(v, 0.0)


def pool_cold(model, runs: list[list]):
    """``model`` with ``comm.cold_resume`` and ``comm.cold_resume_opt`` from every run's rank
    sidecars (``runs``: the capture's and its replicates'); unchanged when none has a probe
    (their barrier probe: :func:`calibration.gloo_barrier.pool_barrier`, beside it)."""
    sides = [s for run in runs for s in run]
    upd = {k: pts for k, pts in (("cold_resume", cold_params(sides)),
                                 ("cold_resume_opt", cold_opt_params(sides))) if pts}
    if not upd:
        return model
    comm = model.comm.model_copy(update=upd)
    meta = model.meta.model_copy(update={"sources": {
        **model.meta.sources, **{f"comm.{k}": "measured" for k in upd}}})
    return model.model_copy(update={"comm": comm, "meta": meta})
