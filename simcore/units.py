"""Every unit conversion of stepsim, in one place.

Simulated and trace time is float **microseconds** (µs). Sizes are **bytes**. Rates are GB/s
(10**9 bytes per second), as Kineto's ``memory bandwidth (GB/s)`` and NCCL's bus bandwidth are.
The CLI converts to milliseconds only when printing.
"""
from __future__ import annotations

US_PER_MS = 1_000.0
US_PER_S = 1_000_000.0
NS_PER_US = 1_000.0
MiB = 1024 * 1024


def us_to_ms(us: float) -> float:
    """Microseconds → milliseconds."""
    return us / US_PER_MS


def ms_to_us(ms: float) -> float:
    """Milliseconds → microseconds."""
    return ms * US_PER_MS


def s_to_us(s: float) -> float:
    """Seconds → microseconds."""
    return s * US_PER_S


def us_to_s(us: float) -> float:
    """Microseconds → seconds."""
    return us / US_PER_S


def transfer_us(nbytes: float, gbps: float) -> float:
    """Time in µs to move ``nbytes`` bytes at ``gbps`` GB/s (10**9 bytes/s).

    Raises:
        ValueError: if ``gbps`` is not positive.
    """
    if gbps <= 0:
        raise ValueError(f"gbps must be > 0, got {gbps!r}")
    return nbytes / (gbps * 1e9) * US_PER_S


def gbps(nbytes: float, dur_us: float) -> float:
    """Rate in GB/s of ``nbytes`` bytes moved in ``dur_us`` µs (0 when ``dur_us`` ≤ 0)."""
    return nbytes / (dur_us / US_PER_S) / 1e9 if dur_us > 0 else 0.0


def mib_to_bytes(mib: float) -> int:
    """MiB (2**20 bytes, as DDP's ``bucket_cap_mb``) → bytes."""
    return int(mib * MiB)
