""":meth:`models.blame.Blame._host` where the host spans come with their columns
(:mod:`models.host_columns`, in start order): the walk over the host thread's spans in
``[a, b)`` reads each span's start and key from the columns (its start as a Python float,
its key its shape's, :attr:`Blame._shape_keys`) instead of making the span's row, which a
lane held as blocks makes field by field (:meth:`simcore.record.Block.moved_row`). The same
operations on the same floats, in the same order: ``tests/test_blame_host.py`` holds it to
the row walk."""
from __future__ import annotations

import bisect

from stepsim.models.intervals import EPS_US as _EPS

__all__ = ["host_walk"]


def host_walk(bl, a: float, b: float, stack: list) -> None:
    """Charge the host thread's spans in ``[a, b)`` (µs) into ``bl.acc``; a wait followed to
    the device pushes ``("finish", run, s, e)`` on ``stack`` (as :meth:`Blame._host`)."""
    cols, ends, keys = bl.host_cols, bl.host_ends, bl._shape_keys
    starts, shape, shapes = cols.start, cols.shape, cols.shapes
    i = bisect.bisect_right(ends, a)
    cur, n = a, len(ends)
    acc = bl.acc
    while i < n and cur < b:
        s0, e = float(starts[i]), ends[i]
        s, e = (cur if cur > s0 else s0), (b if b < e else e)   # max(s, cur), min(e, b)
        if s > cur:
            us = (b if b < s else s) - cur
            if us > _EPS:
                acc["other"] += us
        if e > s:
            code = shape[i]
            key = keys[code]
            if key is None:   # a wait followed to the device: the tasks it waited for
                bl.follow_wait(s0, shapes[code][2], s, e, stack)
            elif e - s > _EPS:
                acc[key] += e - s
        cur = e if e > cur else cur
        i += 1
    if cur < b:
        bl._add("other", b - cur)
