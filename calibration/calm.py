"""The records of a capture that measure identical work: those whose thread did not wait for a
core that another process held (:func:`calm_steps`, :func:`calm_produce`).

At ``num_workers=0`` on torch's intra-op threads, a thread that waits for a core spins at its
team's barriers in CPU time, so its CPU time is not the host's speed: the records that waited
are left out of every comparison of a run's speed (:mod:`calibration.host_noise`). With
DataLoader workers the run's own threads wait for cores too (the setting's own contention, in
every run of it alike), so every record counts.
"""
from __future__ import annotations

from stepsim.calibration.page_faults import MIN_STEPS
from stepsim.calibration.sidecar import Sidecar
from stepsim.models.load_bound import LOAD_WARN


def _alone(side: Sidecar) -> bool:
    """Whether none of the run's own threads is runnable beside its main thread's work: at
    ``num_workers=0``, on at most as many intra-op threads as cores, not a DDP rank (its
    backend's threads and the host's other ranks run beside it)."""
    return (side.loader.num_workers == 0 and getattr(side, "ddp", None) is None
            and (side.torch_num_threads or 1) <= (getattr(side, "host_cores", None) or 1))


def calm_steps(side: Sidecar) -> list:
    """``side``'s steps after its first that measure identical work: at ``num_workers=0`` on
    at most as many intra-op threads as cores, where none of the run's own threads is runnable
    beside the step, those whose main thread waited for a core (run-queue wait) no more than
    :data:`LOAD_WARN` × its CPU time outside ``next()``, when at least
    :data:`calibration.page_faults.MIN_STEPS` are; else every step after the first (a DDP
    rank's steps too: its backend's threads and the host's other ranks run beside them).

    A core another process holds stalls torch's intra-op team, whose threads spin at its
    barriers in CPU time: measured on a user's 2-thread CNN (2026-12-05, 2 shared cores), the
    steps that waited took 245 ms of main-thread CPU where the calm ones took 42 ms, each
    waiting 220 ms for a core. The run's fault-free steps were three such, so the replicate,
    whose batches' produce took 1.002× the capture's CPU and whose 30 scored steps were calm
    (held 93 %), read as a host 5.85× slower: every interval 0.24–4.2× the point."""
    return calm_among(side, list(side.steps[1:]))


def calm_among(side: Sidecar, rows: list) -> list:
    """Of ``rows`` (some of ``side``'s steps), those :func:`calm_steps` keeps by its rule, when
    at least :data:`calibration.page_faults.MIN_STEPS` are; else ``rows``."""
    return _calm(side, rows, lambda s: max(s.cpu_us - s.next_cpu_us, 0.0))


def calm_produce(side: Sidecar, recs: list) -> list:
    """Of ``recs`` (``side``'s produce records), those that measure identical work: where
    :func:`calm_steps` leaves steps out (``num_workers=0``, the batch made on the main
    thread and its intra-op team), the batches whose thread waited for a core (run-queue
    wait) no more than :data:`LOAD_WARN` × their CPU time, when at least
    :data:`calibration.page_faults.MIN_STEPS` are; else ``recs``.

    Measured on a user's 2-thread CNN (2026-12-06 03:32, h-fresh11, 2 shared cores, its
    dataset's per-item work on the intra-op team): another process held a core over 6 of its
    54 batches, each 700-730 ms of CPU (the team spinning) with as much run-queue wait, where
    the others took 16-19 ms. In the whole run's mean they made the profiled window's batches
    0.196× the run's CPU time, which calibration called records that cannot be right (a
    window at 0.3× would have made every prediction 3.3× slow); without them, about 1.0×."""
    return _calm(side, recs, lambda r: r.cpu_us)


def _calm(side: Sidecar, recs: list, cpu_us) -> list:
    """Of ``recs``, where none of ``side``'s own threads runs beside its main thread
    (:func:`_alone`), those whose run-queue wait is unknown or at most :data:`LOAD_WARN` ×
    ``cpu_us(record)`` (CPU µs), when at least :data:`calibration.page_faults.MIN_STEPS`
    are; else all of ``recs`` (a new list)."""
    recs = list(recs)
    if not _alone(side):
        return recs
    calm = [r for r in recs if r.run_wait_us is None or r.run_wait_us <= LOAD_WARN * cpu_us(r)]
    return calm if len(calm) >= MIN_STEPS else recs
