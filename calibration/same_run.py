"""Whether the per-rank traces of one job are one run: ranks on one host share its clock
(Kineto's ``baseTimeNanoseconds`` + ``ts``), and the ranks of one job run together, so their
events overlap in time. A rank file from another run of the same job (a replicate's, a rerun's)
would otherwise be matched by step number (validate) or aligned by its collectives' median end
(calibrate) and read as one job. Ranks on different hosts (or whose host is not named) read
other clocks: Kineto's instants are the wall clock's (ns since the epoch), which hosts of one
job keep within milliseconds of each other (NTP), so two such ranks are of one run unless their
events lie more than :data:`OTHER_CLOCK_SLACK_NS` apart; instants that are not the epoch's
(before :data:`EPOCH_NS`) are not compared across clocks.
"""
from __future__ import annotations

from pathlib import Path

from stepsim.simcore.errors import InputError

__all__ = ["check_one_run", "raw_span", "OTHER_CLOCK_SLACK_NS", "EPOCH_NS"]

OTHER_CLOCK_SLACK_NS = 60 * 10**9
"""How far apart (ns) the events of two ranks on different clocks may lie and still be one run:
a minute, far beyond the milliseconds NTP keeps hosts' wall clocks within (an assumption), and
far below the minutes between two runs of a job."""

EPOCH_NS = 10**18
"""Instants from this on (2001-09-09 in ns since the epoch) are the wall clock's, comparable
across hosts; earlier ones (a clock since boot) are not."""


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
    """Refuse a rank whose events do not overlap the first rank's, both on one host (one
    clock), or lie more than :data:`OTHER_CLOCK_SLACK_NS` from them on another host's wall
    clock (or an unnamed host's).

    Args:
        spans: per rank file, (path, host name, first and last instant in ns).

    Raises:
        InputError: naming the file, and how far apart the two runs are.
    """
    if len(spans) < 2:
        return
    p0, host0, a0, b0 = spans[0]
    for p, host, a, b in spans[1:]:
        one_clock = bool(host) and host == host0
        slack = 0 if one_clock else OTHER_CLOCK_SLACK_NS
        if not one_clock and min(a, a0) < EPOCH_NS:
            continue        # clocks since boot on two hosts: nothing to compare
        if b + slack < a0 or b0 + slack < a:
            when = (f"begin {(a - b0) / 1e9:.3f} s after {Path(p0).name}'s end" if a > b0
                    else f"end {(a0 - b) / 1e9:.3f} s before {Path(p0).name}'s start")
            where = (f"both on host {host!r}, one clock" if one_clock else
                     (f"hosts {host0!r} and {host!r}: " if host and host0 else "")
                     + f"more than {OTHER_CLOCK_SLACK_NS // 10**9} s apart, which wall clocks "
                     "of two hosts are not")
            raise InputError(p, f"not of the same run as {Path(p0).name}: its events {when} "
                             f"({where}); the ranks of one job run together (give each run's "
                             "files on their own)")
