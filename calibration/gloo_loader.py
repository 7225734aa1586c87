"""The DataLoader of a multi-rank CPU DDP (gloo) job: each rank's ``next()`` and its loader.

A rank's main thread takes its batch in ``enumerate(DataLoader)#…__next__`` at the start of
each step. :func:`calibration.gloo.calibrate_gloo` models that as a ``next_batch`` host op
(the time is then not in ``forward``), and the loader as the single-rank CPU calibration does
(:mod:`calibration.cpu`): the settings, per-batch produce times and host cores from the
reference rank's capture sidecar (:func:`calibration.sidecar_fit.loader_from_sidecar`:
``measured``; the produce times are CPU times where every rank on the host's workers and
training threads together outnumbered its cores, as their walls then hold waits for one); without produce records, at ``num_workers=0`` the produce time is the measured
``next()`` time (``inferred``: it holds the main thread's wait as well as the work).

Those produce times are the profiled window's batches, and where a rank's host ops are priced
at its later unprofiled steps' speed (:mod:`calibration.gloo_window`'s ``d``) the batch is
too, by the loader's own gauge (:func:`loader_drift`): its batches finished after the window
against those in it, the same work in worker processes the profiler does not touch. On
``tests/data/gloo_loader_job`` (2026-12-06 14:07) the workers' batches after the window took
0.818 / 0.839× their CPU in it (ranks 0 / 1, 66 batches against 8) where the training
threads' ``d`` read 0.729 / 0.806: the same slow phase of the host, by each gauge's own
measure (the loader keeps its own, not ``d``).
"""
from __future__ import annotations

import math

import numpy as np

from stepsim.calibration.cpu import DATALOADER_NEXT
from stepsim.calibration.events import EventTable
from stepsim.calibration.probe_steps import after_startup
from stepsim.calibration.run_drift import MIN_AFTER_STEPS, drift_noise
from stepsim.calibration.sidecar_cross import step_window
from stepsim.calibration.sidecar_fit import loader_from_sidecar
from stepsim.models.param_meta import MAX_WINDOW_SPEED, within_host_speed
from stepsim.models.params import DurationSpec, LoaderParams
from stepsim.models.warning_record import said

__all__ = ["loader_nexts", "rank_loader", "loader_drift", "at_loader_drift"]


def loader_nexts(table: EventTable, on_main) -> list[tuple[int, int]]:
    """The main thread's DataLoader ``next()`` spans ``(start, end)`` (ns, this rank's clock),
    in time order; ``on_main``: the mask of the main thread's complete events."""
    names = table.names.tolist()
    idx = [i for i in np.flatnonzero(on_main) if DATALOADER_NEXT.match(names[i])]
    return sorted((int(table.ts_ns[i]), int(table.end_ns[i])) for i in idx)


def rank_loader(side, next_us: list[float], ranks_per_host: int, sources: dict,
                warnings: list[str]) -> LoaderParams:
    """The job's :class:`LoaderParams` (each rank has its own loader of these settings) from
    the reference rank's sidecar ``side`` (None: none) and its per-step ``next()`` times
    ``next_us`` (µs; all 0 when the trace has no ``next()`` in the steps). Fills ``sources``
    and ``warnings``."""
    lp: dict = {}
    attached = side is not None and getattr(side, "loader", None) is not None
    if attached:
        upd, src, warn, _ = loader_from_sidecar(side, side.torch_num_threads or 1,
                                              ranks_per_host)
        lp.update(upd)
        sources.update(src)
        warnings += warn
    elif side is not None and side.host_cores:
        lp["host_cores"] = side.host_cores
        sources["loader.host_cores"] = "measured"
    waited = any(v > 0 for v in next_us)
    if "produce" not in lp and waited:
        if lp.get("num_workers", 0) == 0:
            lp["num_workers"] = 0
            lp["produce"] = DurationSpec.from_samples([float(v) for v in next_us])
            sources["loader.produce"] = "inferred"
            warnings.append(said(
                "the DataLoader's produce time is the measured next() time (inferred): at "
                "num_workers=0 the main thread makes each batch inside next(), and the capture "
                "records per-batch times only from worker processes" if attached else
                "the DataLoader's produce time is the measured next() time (inferred): the "
                "capture sidecar records no DataLoader", "produce_from_next", noted=True,
                summary="the DataLoader's produce time is its measured next() time (inferred)"))
        else:
            warnings.append("the DataLoader's workers produced no records in the capture "
                            "sidecar: its produce time is unknown and taken as 0")
    if "host_cores" not in lp:
        lp["host_cores"] = ranks_per_host
        sources["loader.host_cores"] = "assumed"
        warnings.append(f"host cores unknown: assumed {ranks_per_host} (one per rank on a "
                        "host); a capture sidecar records them")
    return LoaderParams(**lp)


def loader_drift(side) -> tuple[float, float, int, int] | None:
    """The loader's host drift between the profiled window and the run after it, from the
    sidecar's own batches (a worker's first left out): ``(ratio, noise, n_window, n_after)``,
    ``ratio`` the mean CPU µs of a batch finished after the window over one finished in it,
    ``noise`` two standard errors of their difference (:func:`calibration.run_drift.
    drift_noise`, a fraction of the later mean; ``ratio`` inf where the window's batches
    took no CPU). None without instants, a window, or
    :data:`calibration.run_drift.MIN_AFTER_STEPS` batches on either side."""
    if side is None or getattr(side, "loader", None) is None or not side.produce:
        return None
    nw = side.loader.num_workers
    recs = after_startup([r for r in side.produce if (r.worker < 0) == (nw == 0)])
    span = step_window(side.steps)
    if span is None or not recs or any(r.t_end_us is None for r in recs):
        return None
    win = np.array([r.work_us for r in recs if span[0] <= r.t_end_us <= span[1]])
    after = np.array([r.work_us for r in recs if r.t_end_us > span[1]])
    if min(win.size, after.size) < MIN_AFTER_STEPS:
        return None
    ratio = float(after.mean() / win.mean()) if win.mean() > 0 else math.inf
    return ratio, drift_noise(after, win), int(win.size), int(after.size)


def at_loader_drift(loader: LoaderParams, side, notes: dict, warnings: list[str]
                    ) -> LoaderParams:
    """``loader`` with its produce at the run's speed after the window (:func:`loader_drift`
    of the reference rank's sidecar ``side``, measured), the factor in ``notes``
    (``loader_drift``); unchanged without a reading, and unchanged with one beyond
    :data:`models.param_meta.MAX_WINDOW_SPEED` either way (records that cannot be right: said
    in ``warnings``; a hostile sidecar's batches after the window at 0 µs of CPU were left out
    without a word, break16)."""
    got = loader_drift(side)
    if got is None or loader.produce is None:
        return loader
    ratio, noise, n_win, n_after = got
    if not within_host_speed(ratio):
        warnings.append(
            f"ignored the loader's drift check: the reference rank's sidecar's {n_after} "
            f"batches after the profiled window took ×{ratio:.3g} the CPU of its {n_win} in "
            f"it, beyond the {1 / MAX_WINDOW_SPEED:g}-{MAX_WINDOW_SPEED:g}× a host's speed "
            "moves: batch records that cannot be right; loader.produce keeps the window's "
            "batches (calibration.gloo_loader)")
        return loader
    notes["loader_drift"] = round(ratio, 4)
    notes["loader_drift_source"] = (
        f"measured: mean CPU of the reference rank's {n_after} batches after the profiled "
        f"window / its {n_win} in it (±{100 * noise:.1f} %, two standard errors), applied to "
        "loader.produce as the ranks' d to their host ops (calibration.gloo_loader)")
    return loader.model_copy(update={"produce": loader.produce.scaled(ratio)})
