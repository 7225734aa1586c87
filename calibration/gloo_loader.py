"""The DataLoader of a multi-rank CPU DDP (gloo) job: each rank's ``next()`` and its loader.

A rank's main thread takes its batch in ``enumerate(DataLoader)#…__next__`` at the start of
each step. :func:`calibration.gloo.calibrate_gloo` models that as a ``next_batch`` host op
(the time is then not in ``forward``), and the loader as the single-rank CPU calibration does
(:mod:`calibration.cpu`): the settings, per-batch produce times and host cores from the
reference rank's capture sidecar (:func:`calibration.sidecar_fit.loader_from_sidecar`:
``measured``; the produce times are CPU times where every rank on the host's workers and
training threads together outnumbered its cores, as their walls then hold waits for one); without produce records, at ``num_workers=0`` the produce time is the measured
``next()`` time (``inferred``: it holds the main thread's wait as well as the work).
"""
from __future__ import annotations

import numpy as np

from stepsim.calibration.cpu import DATALOADER_NEXT
from stepsim.calibration.events import EventTable
from stepsim.calibration.sidecar_fit import loader_from_sidecar
from stepsim.models.params import DurationSpec, LoaderParams

__all__ = ["loader_nexts", "rank_loader"]


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
            warnings.append(
                "the DataLoader's produce time is the measured next() time (inferred): at "
                "num_workers=0 the main thread makes each batch inside next(), and the capture "
                "records per-batch times only from worker processes" if attached else
                "the DataLoader's produce time is the measured next() time (inferred): the "
                "capture sidecar records no DataLoader")
        else:
            warnings.append("the DataLoader's workers produced no records in the capture "
                            "sidecar: its produce time is unknown and taken as 0")
    if "host_cores" not in lp:
        lp["host_cores"] = ranks_per_host
        sources["loader.host_cores"] = "assumed"
        warnings.append(f"host cores unknown: assumed {ranks_per_host} (one per rank on a "
                        "host); a capture sidecar records them")
    return LoaderParams(**lp)
