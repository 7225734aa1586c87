"""Whether the per-rank traces of one job are one run: ranks on one host share its clock
(Kineto's ``baseTimeNanoseconds`` + ``ts``), and the ranks of one job run together, so their
events overlap in time. A rank file from another run of the same job (a replicate's, a rerun's)
would otherwise be matched by step number (validate) or aligned by its collectives' median end
(calibrate) and read as one job. Ranks on different hosts (other clocks) are not compared.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.simcore.errors import InputError

__all__ = ["check_one_run", "raw_span"]


def raw_span(raw) -> tuple[str, int, int]:
    """(host name, first and last event instant in ns on the host's clock) of a
    :class:`calibration.trace_io.RawTrace`; host "" when the trace names none."""
    meta = raw.metadata if isinstance(raw.metadata, dict) else {}
    try:
        base = int(meta.get("baseTimeNanoseconds") or 0)
    except (TypeError, ValueError, OverflowError):
        base = 0
    lo, hi = (int(raw.ts_ns.min()), int(raw.ts_ns.max())) if len(raw.ts_ns) else (0, 0)
    if not 0 <= base <= 2**63 - 1 - max(hi, 0):   # a bad one is ignored, as build_table does
        base = 0
    return str(meta.get("host_name") or ""), base + lo, base + hi


def check_one_run(spans: list[tuple[Path, str, int, int]]) -> None:
    """Refuse a rank whose events do not overlap the first rank's, both on one host.

    Args:
        spans: per rank file, (path, host name, first and last instant in ns).

    Raises:
        InputError: naming the file, and how far apart the two runs are.
    """
    if len(spans) < 2:
        return
    p0, host0, a0, b0 = spans[0]
    for p, host, a, b in spans[1:]:
        if host and host == host0 and (b < a0 or b0 < a):
            when = (f"begin {(a - b0) / 1e9:.3f} s after {Path(p0).name}'s end" if a > b0
                    else f"end {(a0 - b) / 1e9:.3f} s before {Path(p0).name}'s start")
            raise InputError(p, f"not of the same run as {Path(p0).name}: both ran on host "
                             f"{host!r} (one clock), and its events {when}; the ranks of one "
                             "job run together (give each run's files on their own)")
