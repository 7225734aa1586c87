"""Memory headroom and the batch-size what-if, from a trace's memory profile
(:class:`calibration.memory_events.MemoryProfile`, passed in).

Arithmetic (bytes, per step, the step with the highest peak):

* ``persistent`` = allocated at the step's start: weights, gradients, optimizer state and
  whatever else lives across steps, *measured* by the allocator (no parameter count needed);
* ``activations`` = ``peak − persistent``: what the step allocates on top, which scales with
  the batch (activations and their gradients are linear in the batch size for a fixed model);
* a batch ``k ×`` as large peaks at ``persistent + k · activations``; it fits when that stays
  under the device's memory, and *with today's fragmentation* when
  ``persistent + k · activations + (reserved − allocated)`` does: the caching allocator's
  reserved-but-unallocated bytes at the peak are blocks it could not reuse, and variable
  shapes (a different batch, sequence length) make more of them.

The largest ``k`` that fits is ``(device − persistent − fragmentation) / activations``. A
profile without the allocator's totals (PyTorch 1.9 traces) knows the curve only up to its
starting level: activations are measured, persistent memory is not, and whether it fits is not
stated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["MemoryVerdict", "memory_verdict", "BATCH_FACTORS", "GiB"]

GiB = float(2**30)
BATCH_FACTORS = (1.5, 2.0, 4.0)
"""Batch multipliers the what-if prices."""


@dataclass(frozen=True)
class MemoryVerdict:
    """``verdict`` in words, ``evidence`` lines; ``persistent``/``activations``/
    ``fragmentation``/``device`` bytes (NaN when unknown); ``max_batch_factor`` the largest
    batch multiplier that fits with today's fragmentation (None when unknown);
    ``fits`` per multiplier: (fits, fits with fragmentation) or None."""

    verdict: str
    evidence: list[str] = field(default_factory=list)
    persistent: float = math.nan
    activations: float = math.nan
    fragmentation: float = math.nan
    device: float = math.nan
    max_batch_factor: float | None = None
    fits: dict[float, tuple[bool, bool] | None] = field(default_factory=dict)


def _g(b: float) -> str:
    return f"{b / GiB:.2f} GiB"


def memory_verdict(profile) -> MemoryVerdict:
    """The headroom verdict of a memory profile (see the module docstring)."""
    s = max(profile.steps, key=lambda m: m.peak - m.start)
    act = max(0.0, s.peak - s.start)
    ev = [f"step {s.step}: allocated {_g(s.start)} at its start, peak {_g(s.peak)} at "
          f"{s.peak_at_us / 1e3:.1f} ms" + ("" if profile.absolute else
                                             " (relative to the trace's first memory event)"),
          f"activations (peak - start): {_g(act)}"]
    if profile.largest:
        n = max(1, len(profile.steps))
        ev.append("largest allocations per step by op: " + ", ".join(
            f"{op} {_g(b / n)} ({c // n}x)" for op, b, c in profile.largest[:4]))
    if not profile.absolute:
        return MemoryVerdict("activations measured, headroom unknown: the trace records bytes "
                             "per allocation but not the allocator's totals (PyTorch < 1.10)",
                             ev, activations=act, device=profile.device_bytes or math.nan)
    frag = s.reserved_at_peak - s.peak if math.isfinite(s.reserved_at_peak) else 0.0
    dev = profile.device_bytes
    ev.append(f"reserved at the peak {_g(s.reserved_at_peak)}: fragmentation (reserved - "
              f"allocated) {_g(frag)}" + (f", {100 * frag / s.reserved_at_peak:.0f} % of "
                                           "reserved" if s.reserved_at_peak > 0 else ""))
    if not dev:
        return MemoryVerdict(f"peak {_g(s.peak)}; device memory unknown (no deviceProperties)",
                             ev, s.start, act, frag)
    kmax = (dev - s.start - frag) / act if act > 0 else math.inf
    fits = {k: (s.start + k * act <= dev, s.start + k * act + frag <= dev)
            for k in BATCH_FACTORS}
    for k, (ok, ok_frag) in fits.items():
        ev.append(f"batch x{k:g}: peak {_g(s.start + k * act)} of {_g(dev)}: "
                  + ("fits" if ok_frag else "fits only if fragmentation is reclaimed" if ok
                     else "does not fit"))
    risk = f"{100 * frag / act:.0f} % of the activations" if act > 0 else "no activations"
    verdict = (f"peak {_g(s.peak)} of {_g(dev)} ({100 * s.peak / dev:.0f} %); batch up to "
               f"x{kmax:.2f} fits with today's fragmentation ({_g(frag)} reserved but not "
               f"allocated, {risk}; variable shapes add to it)") if math.isfinite(kmax) else \
        f"peak {_g(s.peak)} of {_g(dev)}: the step allocates nothing that scales with batch"
    return MemoryVerdict(verdict, ev, s.start, act, frag, dev,
                         kmax if math.isfinite(kmax) else None, fits)
