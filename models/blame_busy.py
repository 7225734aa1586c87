"""The compute lane's busy time by attribution key (:func:`busy_by_key`, for
:func:`models.blame.critical_path`): what adding each compute run's clipped duration times
each of its keys' fractions, run by run, gives, as one sequential ``numpy.cumsum`` per key."""
from __future__ import annotations

import itertools
from operator import itemgetter

import numpy as np

__all__ = ["busy_by_key"]

_TASK = itemgetter(2)


def running_total(x: np.ndarray) -> float:
    """The sum of ``x`` added up in order, as a Python loop does (bit for bit; 0.0 when
    empty): ``numpy.cumsum`` is sequential, ``numpy.sum`` pairwise."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def busy_by_key(bl, compute: list, dur_us: np.ndarray, ran: np.ndarray
                 ) -> dict[str, float]:
    """The compute runs' clipped durations (``dur_us``: of the runs where ``ran``) by
    attribution key (:meth:`Blame.task_keys`), keys in the order first charged: what adding
    ``dur_us * fraction`` run by run, key by key, gives."""
    if hasattr(compute, "first_codes"):   # models.run_columns.Picked
        codes, tasks = compute.first_codes()
    else:
        first: dict[str, int] = {}   # task -> the index of its first run
        codes = np.fromiter(map(first.setdefault, map(_TASK, compute), itertools.count()),
                            np.intp, len(compute))
        codes = np.searchsorted(np.fromiter(first.values(), np.intp, len(first)), codes)
        tasks = list(first)   # in first-run order: the codes index them
    codes = codes[ran]
    fraction: dict[str, np.ndarray] = {}
    charged: dict[str, np.ndarray] = {}
    place: dict[tuple[str, int], int] = {}
    for i, task in enumerate(tasks):
        for p, (k, f) in enumerate(bl.task_keys_of(task)):
            if k not in fraction:
                fraction[k], charged[k] = np.zeros(len(tasks)), np.zeros(len(tasks), dtype=bool)
            fraction[k][i], charged[k][i] = f, True
            place[(k, i)] = p
    found = []
    for k, fk in fraction.items():
        sel = charged[k][codes]
        if sel.any():
            at = int(np.argmax(sel))
            found.append((at, place[(k, int(codes[at]))], k,
                          running_total(dur_us[sel] * fk[codes[sel]])))
    return {k: v for _, _, k, v in sorted(found)}
