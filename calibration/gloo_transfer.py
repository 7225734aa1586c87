"""A gloo job's collective transfer cost (``comm.latency_us`` + ``comm.bus_gbps``) from the
all-reduces whose spans are transfer, not waits for a core.

A gloo all-reduce's span on the last rank to arrive (``gloo:all_reduce`` on its worker thread)
is the collective's time once every rank is in. Gloo reduces CPU tensors on the host, so when
that span overlaps the rank's backward compute (the main thread still computing the next
buckets' gradients) on cores that the ranks share, its worker waits for a core too: on the DDP
demo's 2 vCPUs the 1 MiB first bucket, reduced during backward, took 1.1 to 5.6 ms across
captures (and the 7 MiB last one, after backward, 6.5 to 9.4 ms). The simulator adds those
waits itself (the collective's CPU work, ``comm.host_cpu_us`` + ``comm.host_cpu_us_per_mb``,
competes for the shared cores), and a line through two sizes measured under different
contention puts them into the per-collective latency, which a ``bucket_cap_mb=1`` what-if then
pays once per bucket (a 4.9 ms latency made it +25 %).

So the line is fitted only to the all-reduces that ran mostly after their rank's backward
compute (``busy``, the share of the span that overlapped it, below :data:`CLEAN_BUSY` at the
median step): with two sizes or more, least squares; with one, through the origin (latency 0:
the per-collective cost is then the collective's CPU work), or, given ``floor_us``, through
``(0, floor_us)``: the collective's measured per-collective CPU work (``comm.host_cpu_us``,
:mod:`calibration.gloo_cpu`) is part of its span whatever its size, so a smaller bucket's
span keeps it instead of shrinking it with the bytes (through the origin, the DDP demo's
7 MiB last bucket made a 1 MiB all-reduce after backward 866 µs, its CPU work alone 820 µs,
and 6 of them after backward 6.6 ms measured against 5.1 ms simulated); with none, all of
them, with a warning. The source stays ``inferred``.
"""
from __future__ import annotations

import numpy as np

from stepsim.models.ddp import ring_bus_bytes

__all__ = ["transfer_fit", "CLEAN_BUSY"]

CLEAN_BUSY = 0.5
"""An all-reduce whose span overlapped its rank's backward compute for less than this share
of it (median over the steps) is taken as transfer. The shares are bimodal (a bucket reduced
during backward overlaps it almost wholly, the last one hardly), so any cut between them
picks the same ones."""


def transfer_fit(nbytes: list[int], dur_us: list[float], busy: list[float], world: int,
                 warnings: list[str], floor_us: float = 0.0) -> tuple[float, float]:
    """``(latency_us, bus_gbps)`` of the all-reduces with sizes ``nbytes`` (bytes), measured
    transfers ``dur_us`` (µs) and overlap shares ``busy`` (see the module docstring);
    ``floor_us``: the intercept of a one-size fit (µs, kept only below its spans)."""
    clean = [i for i, s in enumerate(busy) if s < CLEAN_BUSY]
    if not clean:
        clean = list(range(len(nbytes)))
        warnings.append("every all-reduce overlapped its rank's backward compute: the transfer "
                        "fit holds their waits for a core (the simulator adds them again)")
    elif len(clean) < len(nbytes):
        warnings.append(f"transfer cost fitted to {len(clean)} of {len(nbytes)} all-reduces, "
                        "those that ran after their rank's backward compute (the others' spans "
                        "hold waits for a core, which the simulator adds itself)")
    x = np.array([ring_bus_bytes(nbytes[i], world) for i in clean], float)
    y = np.array([dur_us[i] for i in clean], float)
    if len(set(x.tolist())) >= 2:
        b, a = np.polyfit(x, y, 1)
    else:
        a = floor_us if 0 < floor_us < y.min() else 0.0
        b = (y - a).sum() / x.sum()
    if b <= 0:
        b, a = y.sum() / x.sum(), 0.0
    return max(float(a), 0.0), 1.0 / float(b) / 1e3
