"""A sequence read through segments, some of them blocks moved in time: what a simulation that
held its repeated steps as blocks (``keep="brief"``) hands the summary for a lane's spans
(:class:`models.host_columns.BlockSpans`) and for the task runs
(:class:`models.run_columns.BlockRuns`). A row of a moved block is made when read
(:meth:`simcore.record.Block.moved_row`: every instant ``x + dt``, the step ``+ ds``)."""
from __future__ import annotations

import bisect
from collections.abc import Sequence

__all__ = ["Codes", "Segmented"]


class Codes(dict):
    """Item → its code, the next one for an item not seen before."""

    def __missing__(self, item) -> int:
        c = self[item] = len(self)
        return c


class Segmented(Sequence):
    """Rows in segments ``(index of the first, rows or block, shift µs or None, steps)``; a
    segment whose shift is None holds its rows as they are. Subclasses fill them with
    :meth:`_segment`."""

    segs: list[tuple]

    def _segment(self, blocks: list, end: int, plain, moved) -> None:
        """Fill :attr:`segs` from ``blocks`` (``(where they go, block, shift µs, steps)``, in
        order, before index ``end`` of the rows solved): ``plain(pos, at)`` gives the rows kept
        between two places, ``moved(block)`` a block's rows kept (its ``rows`` may be empty)."""
        self.segs, self.n, pos = [], 0, 0
        for at, block, dt, ds in [*blocks, (end, None, 0.0, 0)]:
            rows = plain(pos, at)
            if rows:
                self.segs.append((self.n, rows, None, 0))
                self.n += len(rows)
            part = moved(block) if block is not None else None
            if part is not None and part.rows:
                self.segs.append((self.n, part, dt, ds))
                self.n += len(part.rows)
            pos = at
        self.firsts = [sg[0] for sg in self.segs]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self)[i]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        first, rows, dt, ds = self.segs[bisect.bisect_right(self.firsts, i) - 1]
        return rows[i - first] if dt is None else rows.moved_row(i - first, dt, ds)

    def __iter__(self):
        for _, rows, dt, ds in self.segs:
            yield from (rows if dt is None else rows.moved(dt, ds))
