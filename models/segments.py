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
    segment whose shift is None holds its rows as they are. Subclasses fill :attr:`segs` and
    call :meth:`_index`."""

    segs: list[tuple]

    def _index(self) -> None:
        self.firsts = [sg[0] for sg in self.segs]
        self.n = self.segs[-1][0] + self._seg_len(self.segs[-1]) if self.segs else 0

    @staticmethod
    def _seg_len(seg: tuple) -> int:
        return len(seg[1]) if seg[2] is None else len(seg[1].rows)

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
