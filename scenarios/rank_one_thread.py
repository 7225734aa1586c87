"""One intra-op thread per DDP rank (``--fix intra_op_threads`` on a multi-rank model whose
ranks oversubscribed their host's cores): the job that ``torch.set_num_threads(1)`` in each
rank (or ``OMP_NUM_THREADS=1``, as torchrun sets) would run, priced from the capture at
torch's default threads.

At R ranks × T threads on k cores (R·T > k) the ranks' OpenMP teams spin for cores, and every
time the capture measured holds that spin: the host ops' durations, the backend's CPU (the
team's second thread counted as gloo's), the ranks' arrival skew, the host's run-to-run speed.
A multi-rank model runs each rank's host ops on one thread, so the spin cannot be removed from
it by a thread count. Instead the fix rebuilds the parts the spin filled from what the capture
measured apart from it (:mod:`calibration.rank_team`, its physics and figures):

- each rank's host CPU ops: their per-step sum := W₁ (``meta.notes['one_thread_cpu_us']``),
  the geometric mean of the training thread's CPU a step in the quickest tenth of the
  unprofiled steps and in their fast mode (both measured; the intervals draw W₁ over the two
  ends × the host's stated run-to-run range, ``meta.ranges``); shared among the ops as their
  least-spun durations (each op's quickest captured step, measured); the ops' per-step
  samples and resume lags, which the spin set, are dropped;
- ``comm.host_cpu_us`` and ``comm.host_cpu_us_per_mb`` := gloo's own threads' (measured by
  thread name, ``meta.notes['one_thread_comm_cpu']``);
- each rank's ``phase_extra_us`` (its calibrated extra CPU a phase: the spin's skew) := none;
- the host's run-to-run speed (``host.cpu_scale``, ``speed_runs``, ``wall_runs``, whose spread
  was the spin's) := 1, none (the stated range is in W₁'s draw: a what-if sets
  ``host.cpu_scale`` after the draws, :mod:`scenarios.predict`).

Not rebuilt (the capture holds no spin-free reading of them): the collectives' transfer line
(``comm.bus_gbps``, ``latency_us``: fitted on spans that waited for cores) and their
wake-ups. On fresh8's job they make the one-thread step 5–10 % slower than a model calibrated
at one thread (measured by replacing them: 112 → 105 ms).

A thread count other than 1 is not priced: its ranks' teams would run a parallel part that
the capture, whose teams spun, does not measure. Times are µs.
"""
from __future__ import annotations

import math

from stepsim.models.param_base import MAX_DURATION_US
from stepsim.models.params import StepModel
from stepsim.models.rank_threads import fitting_rank_threads, ranks_on_host
from stepsim.scenarios.fix_types import nothing
from stepsim.scenarios.paths import validated

__all__ = ["rank_threads", "one_thread_ranks", "readings", "CAPTURE_LINE"]

CPU_NOTE, COMM_NOTE = "one_thread_cpu_us", "one_thread_comm_cpu"
"""The notes calibration writes (:mod:`calibration.rank_team`; the same keys)."""

CAPTURE_LINE = ("calibrate the capture again with this version (it reads the training "
                "thread's CPU a step and gloo's threads' CPU from the sidecars, which need "
                "ddp.threads: Capture.ddp(model)), or capture with torch.set_num_threads(1) "
                "in each rank")


def rank_threads(m: StepModel) -> tuple[str, int, int, int] | None:
    """``(host, ranks on it, their intra-op threads, its cores)`` when ``m`` is a multi-rank
    model whose ranks on one host × their intra-op threads (``meta.notes['intra_op_threads']``)
    are more than its cores and its host ops hold no parallel part; None otherwise."""
    threads = m.meta.notes.get("intra_op_threads")
    if len(m.ranks) < 2 or not isinstance(threads, int) or threads < 2:
        return None
    if any(op.kind == "cpu" and op.parallel_fraction > 0 for op in m.host.ops):
        return None
    host, ranks = ranks_on_host([r.host for r in m.ranks])
    cores = m.loader.host_cores
    return (host, ranks, threads, cores) if ranks >= 2 and ranks * threads > cores else None


def _pair(m: StepModel, key: str) -> tuple[float, float] | None:
    try:
        a, b = (float(x) for x in str(m.meta.notes[key]).split(","))
    except (KeyError, ValueError):
        return None
    return (a, b) if math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0 else None


def readings(m: StepModel) -> tuple[float, tuple[float, float]] | None:
    """``(W₁ µs, (gloo's µs a collective, µs a MiB))`` from ``m``'s notes; None where absent
    or not numbers."""
    w1, comm = m.meta.notes.get(CPU_NOTE), _pair(m, COMM_NOTE)
    if isinstance(w1, bool) or not isinstance(w1, (int, float)) or not 0 < w1 <= MAX_DURATION_US \
            or comm is None:
        return None
    return float(w1), comm


def one_thread_ranks(m: StepModel, threads: int | None) -> StepModel:
    """``m`` with one intra-op thread per rank (module docstring); ``threads`` None or 1.

    Raises:
        NotApplicable: the ranks do not oversubscribe their host's cores, ``threads`` is not
            1, or the model lacks the notes the fix reads (the line says what to capture).
    """
    over = rank_threads(m)
    if over is None:
        raise nothing("intra_op_threads", "its ranks' intra-op threads fit their host's cores")
    host, ranks, now, cores = over
    if threads not in (None, 1):
        raise nothing("intra_op_threads", f"only one thread per rank is priced from a capture "
                      f"whose {ranks} ranks × {now} threads spun on host {host}'s {cores} "
                      f"cores (threads per rank = cores ÷ ranks = "
                      f"{fitting_rank_threads(cores, ranks)} needs a capture at it)")
    got = readings(m)
    if got is None:
        raise nothing("intra_op_threads", f"its {ranks} ranks × {now} threads on host {host}'s "
                      f"{cores} cores spun, its host ops hold no parallel part, and the model "
                      f"does not hold the one-thread readings ({CPU_NOTE}, {COMM_NOTE}): "
                      + CAPTURE_LINE)
    w1, comm = got
    data = m.model_dump()
    ops = data["host"]["ops"]
    cpu_ops = [i for i, op in enumerate(ops) if op["kind"] == "cpu"]
    least = {i: min(ops[i]["samples_us"] or [ops[i]["dur_us"]]) for i in cpu_ops}
    total = sum(least.values())
    if total <= 0:
        raise nothing("intra_op_threads", "its host CPU ops take no time")
    for i in cpu_ops:
        ops[i].update(dur_us=w1 * least[i] / total, samples_us=None, resume_lag_us=None)
    for r in data["ranks"]:
        r["phase_extra_us"] = {}
    data["comm"]["host_cpu_us"], data["comm"]["host_cpu_us_per_mb"] = comm
    data["host"].update(cpu_scale=1.0, speed_runs=[], wall_runs=[], cpu_scale_error_log=0.0)
    meta = data["meta"]
    meta["notes"]["intra_op_threads"] = 1
    meta["sources"].update({"host.ops": "inferred", "comm.host_cpu_us": "measured",
                            "comm.host_cpu_us_per_mb": "measured"})
    return validated(data, "fix intra_op_threads")
