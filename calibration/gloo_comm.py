"""A gloo DDP job's communication parameters: the collectives' transfer fit, their CPU on the
host cores, their threads' wake-ups (:mod:`calibration.gloo_wake`), and DDP's parameters (from
the capture sidecar's ``ddp`` record, ``measured``; or one pseudo-parameter per observed
bucket, ``inferred``). Used by :mod:`calibration.gloo`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from stepsim.calibration.gloo_barrier import barrier_params
from stepsim.calibration.gloo_cold import cold_opt_params, cold_params
from stepsim.calibration.gloo_cpu import FLOOR_NOTE, host_cpu_cost
from stepsim.calibration.gloo_transfer import transfer_fit
from stepsim.calibration.gloo_wake import wake_params
from stepsim.calibration.gpu_kinds import MAX_NUMEL_WORDS
from stepsim.models.ddp import build_buckets
from stepsim.models.params import CommParams, DeviceTask, GradParam

if TYPE_CHECKING:   # the collective records of calibration.gloo_steps, for the annotation only
    from stepsim.calibration.gloo_steps import GlooCollective

__all__ = ["record_sizes", "comm_params", "GLOO_STREAM"]

GLOO_STREAM = "gloo"


def _grad_params(rec) -> list[GradParam]:
    """The DDP record's parameters that DDP reduces, in registration order."""
    return [GradParam(name=p.name, bytes=p.bytes, dtype=p.dtype)
            for p in rec.params if p.requires_grad and not p.ddp_ignored]


def record_sizes(colls: list[GlooCollective], rec, warnings: list[str]) -> dict[int, int]:
    """Bytes of the all-reduces whose trace event has no ``Input Dims`` (a profiler without
    ``record_shapes``), by collective index: the buckets DDP builds from the DDP record's
    parameters at its caps, in reduction order; empty when none is missing, without a record,
    or when their count is not the all-reduces'."""
    ars = [k for k, c in enumerate(colls) if c.kind == "all_reduce"]
    if rec is None or not ars or all(colls[k].numel is not None for k in ars):
        return {}
    cap = rec.bucket_cap_mb or 25.0
    first = rec.first_bucket_bytes / 2 ** 20 if rec.first_bucket_bytes else cap
    sizes = [b.bytes for b in build_buckets(_grad_params(rec), cap, first)]
    why = _unsized_why([colls[k] for k in ars if colls[k].numel is None])
    if len(sizes) != len(ars):
        warnings.append(f"the all-reduces {why}, and the DDP record's parameters make "
                        f"{len(sizes)} bucket(s) for {len(ars)} all-reduce(s): their sizes are "
                        "unknown" + (" (capture with record_shapes=True)" if "without" in why
                                     else ""))
        return {}
    warnings.append(f"the all-reduces {why}: their sizes are the buckets DDP builds from the "
                    "DDP record's parameters")
    return dict(zip(ars, sizes))


def _unsized_why(unsized) -> str:
    """Why all-reduces have no size, in words: no Input Dims (a profiler without
    ``record_shapes``), or Input Dims with a size <= 0 or past
    :data:`calibration.gpu_kinds.MAX_NUMEL` elements (recorded, but
    no bucket's)."""
    bad = sum(c.bad_dims for c in unsized)
    absent = len(unsized) - bad
    parts = ([f"{'have' if not bad else f'{absent} have'} no Input Dims (recorded without "
              "record_shapes)"] if absent else []) + (
        [f"{'have' if not absent else f'{bad} have'} Input Dims with a size <= 0 or past "
         f"{MAX_NUMEL_WORDS} elements, which no bucket has (the trace's shapes are wrong)"]
        if bad else [])
    return " and ".join(parts)


def comm_params(tasks: list[DeviceTask], busy: list[float], ranks: dict, sidecars: dict, rec,
          warnings: list[str], notes: dict | None = None) -> tuple[CommParams, dict, str]:
    """Collective cost (latency + bus bandwidth: :mod:`calibration.gloo_transfer`) and DDP's
    parameters; ``busy``: each collective's overlap with its rank's backward compute;
    ``notes`` (the model's ``meta.notes``) gets what :func:`host_cpu_cost` notes."""
    sources: dict[str, str] = {}
    ar = [t for t in tasks if t.bytes]
    world = max(len(ranks), max(r.world for r in ranks.values()))
    upd: dict = {"comm_stream": GLOO_STREAM}
    if ar:
        sized = [k for k, t in enumerate(tasks) if t.bytes]
        upd["latency_us"], upd["bus_gbps"] = transfer_fit(
            [t.bytes for t in ar], [t.dur_us for t in ar], [busy[k] for k in sized], world,
            warnings)
        sources["comm.latency_us"] = sources["comm.bus_gbps"] = "inferred"
    notes = {} if notes is None else notes
    upd["host_cpu_us"], upd["host_cpu_us_per_mb"], src = host_cpu_cost(
        ranks, sidecars, upd.get("latency_us", 0.0), upd.get("bus_gbps"), world, warnings,
        notes)
    sources["comm.host_cpu_us"] = sources["comm.host_cpu_us_per_mb"] = src
    floor = notes.get(FLOOR_NOTE, upd["host_cpu_us"])
    if ar and src == "measured" and floor > 0:
        # a collective's span holds its per-collective work whatever its size
        upd["latency_us"], upd["bus_gbps"] = transfer_fit(
            [t.bytes for t in ar], [t.dur_us for t in ar], [busy[k] for k in sized], world,
            [], floor_us=floor)
    wake, wake_src = wake_params((sidecars.get(r) for r in ranks), warnings)
    upd.update(wake)
    sources.update(wake_src)
    sides = [sidecars.get(r) for r in ranks]
    upd["cold_resume"] = cold_params(sides, warnings)
    upd["cold_resume_opt"] = cold_opt_params(sides, warnings)
    upd["barrier_exit"] = barrier_params([sides])
    sources.update({f"comm.{k}": "measured" for k in ("cold_resume", "cold_resume_opt",
                                                      "barrier_exit") if upd[k]})
    if rec is not None:
        upd["grad_params"] = _grad_params(rec)
        if rec.bucket_cap_mb:
            upd["bucket_cap_mb"] = rec.bucket_cap_mb
        if rec.first_bucket_bytes:
            upd["first_bucket_cap_mb"] = rec.first_bucket_bytes / 2 ** 20
        how = "measured"
    else:
        # buckets in reduction order; registration order is the reverse
        upd["grad_params"] = [GradParam(name=f"bucket{k}", bytes=t.bytes)
                              for k, t in reversed(list(enumerate(ar)))]
        how = "inferred"
        warnings.append("no DDP record in a capture sidecar: one parameter per observed bucket "
                        "(inferred from the all-reduces' Input Dims), so a bucket_cap_mb "
                        "what-if can merge buckets but never split one")
    for k in ("grad_params", "bucket_cap_mb", "first_bucket_cap_mb"):
        sources[f"comm.{k}"] = how if k == "grad_params" or rec is not None else "assumed"
    return CommParams(**upd), sources, how
