"""How much slower a unit of CPU work runs beside other runnable threads (the factor
:meth:`models.cpu.CpuPool.slowdown` applies to each quantum).

Three factors, each 1 by default:

* ``scale``: the host's speed in this run relative to the capture (run-to-run noise);
* ``interference``: co-run interference (shared caches, memory bandwidth). A thread that
  holds a core is slowed by the threads that run at the same time on the *other* cores, and
  at most ``cores − 1`` can: with ``R`` threads runnable, the busy share of the other cores
  is ``o = min(R − 1, cores − 1) / (cores − 1)`` (:func:`busy_share`, 0 on one core), and
  work runs ``(1 + interference × o) / (1 + interference × ref)`` times slower, ``ref`` being
  the share its duration was captured under (a replay at the capture's load is unchanged); a
  thread on a run queue adds nothing to it (docs/measurements.md "Co-run interference").
* ``oversub``: the slowdown *past the cores*. With ``R > cores`` runnable threads the
  scheduler time-slices each core among them, and a thread that was switched out finds its
  cache refilled by the others when it runs again: each slice begins with a refill. The share
  of a thread's slices that follow another thread's on its core grows with the threads per
  core and saturates once every slice does: ``f = 1 − cores / R`` (:func:`oversub_share`, 0
  up to the cores, the share of the time a thread is off its core), and work runs
  ``(1 + oversub × f) / (1 + oversub × oversub_ref)`` times slower, ``oversub_ref`` being the
  share its durations were captured under (0 for a capture within the cores). So ``n > k``
  equal CPU-bound threads of ``c`` µs each on ``k`` cores take ``n / k × c × (1 + oversub ×
  (1 − k / n))`` µs of wall each. What a refill costs depends on what ran in between:
  measured here (``bench/oversub.py``, docs/measurements.md "Slowdown past the cores"), the
  demo's batch in N processes on 2 cores beside one process running its training step took
  ×1.03 at 4 runnable threads and ×1.06 at 8 (a coefficient of 0.06–0.08 in this form; the
  same form read 0.08–0.12 at 3, 4 and 8 on 2026-12-06 00:37, under load, where a linear form
  in ``R / cores − 1`` reads 0.08 at 3 and 0.03 at 8), while N producers alone (each slice
  after the same code and data) took ×0.95–0.99: none.
"""
from __future__ import annotations


def busy_share(active: int, cores: int) -> float:
    """The busy share of the other cores (0–1) beside one of ``active`` runnable threads."""
    return min(max(active - 1, 0), cores - 1) / max(cores - 1, 1)


def oversub_share(active: float, cores: int) -> float:
    """``1 − cores / active`` (0 up to ``cores`` runnable threads): the share of the time a
    thread is off its core, which the cache refill per time slice grows with."""
    return max(0.0, 1.0 - cores / active) if active > 0 else 0.0


def slowdown(scale: float, interference: float, oversub: float, active: int, cores: int,
             ref: float = 0.0, oversub_ref: float = 0.0) -> float:
    """Factor on CPU work now (see the module docstring), for work captured at a busy share
    ``ref`` of the other cores and an oversubscription share ``oversub_ref``."""
    f = scale
    if interference > 0:
        f *= (1 + interference * busy_share(active, cores)) / (1 + interference * ref)
    if oversub > 0:
        f *= (1 + oversub * oversub_share(active, cores)) / (1 + oversub * oversub_ref)
    return f
