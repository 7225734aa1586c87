"""The compute lane's holes charged all at once (:func:`charge_holes`, for
:func:`models.blame.critical_path`): what :meth:`models.blame.Blame.blame` adds hole by hole,
the same floats in the same order.

A hole's chain is followed with numpy, every hole a step at a time, as far as its common
shape goes: the next compute run's start (an ``arrival_skew`` / copy wait, ``device_idle``),
what made it ready (its launch, or nothing: ``other``) and the host thread's spans up to
then. A host wait in that walk followed to the device (a sync, a pageable copy) is charged
the scalar way from there (:meth:`Blame.follow_wait`, then :meth:`Blame.blame` of the
``finish`` it pushes) into a tape, its charges placed after the hole's walk as the scalar
walk's stack pops them (the last wait's first). A hole whose chain goes further (a dependency
still running) is charged the scalar way (:meth:`Blame.blame`) into a tape. Each charge is
recorded as (hole, key, µs) in the order the scalar walk makes it, and each key's running
total is a ``numpy.cumsum`` (a sequential sum) over its charges in hole order, so the totals
and each hole's causes (total after the hole - total before it) are the same bit for bit.
Element-wise comparisons are written with ``numpy.where`` as the scalar code's conditional
expressions are (not ``numpy.maximum``), so they pick the same operand.
"""
from __future__ import annotations

import math
from operator import itemgetter

import numpy as np

from stepsim.models.intervals import EPS_US as _EPS
from stepsim.models.run_columns import latest_ready_us

__all__ = ["charge_holes"]

_FOLLOW = -1   # a host span's key code: a wait followed to the device (the scalar way)


class _Tape:
    """Stands in for ``Blame.acc`` while one hole is charged the scalar way: each
    ``acc[key] += us`` reads 0.0 and so stores ``us`` exactly, recorded in order."""

    def __init__(self):
        self.items: list[tuple[str, float]] = []

    def __getitem__(self, key: str) -> float:
        return 0.0

    def __setitem__(self, key: str, us: float) -> None:
        self.items.append((key, us))


class _Charges:
    """(hole, key code, µs) charges in the order made, each hole's in its scalar order."""

    def __init__(self):
        self.codes: dict[str, int] = {}
        self.h: list[np.ndarray] = []
        self.k: list[np.ndarray] = []
        self.u: list[np.ndarray] = []

    def code(self, key: str) -> int:
        return self.codes.setdefault(key, len(self.codes))

    def add(self, holes: np.ndarray, keys, us: np.ndarray, where: np.ndarray) -> None:
        """Charge ``us`` to ``keys`` (codes) for ``holes`` where ``where`` and ``us > EPS``."""
        m = where & (us > _EPS)
        if m.any():
            self.h.append(holes[m])
            self.k.append(np.broadcast_to(np.asarray(keys, dtype=np.intp), us.shape)[m])
            self.u.append(us[m])


_LAUNCH, _READY, _RUN_START, _GAP = itemgetter(4), itemgetter(5), itemgetter(6), itemgetter(8)
_SECOND = itemgetter(1)
_SPAN_KEY = itemgetter(2, 8, 7)   # a host span's kind, category, cause
_UNKNOWN = -2   # a host span's key code before it is looked up
_RADIX_CODES = 1 << 16   # key codes below this fit 16 bits (numpy's stable sort: radix)


class _HostCodes(dict):
    """A host span's (kind, category, cause) → its key code (:func:`models.blame._host_key`;
    ``_FOLLOW``: followed), filled as spans are reached. A code only names a key: the keys'
    order in ``acc`` is that of their first charge."""

    def __init__(self, ch: _Charges):
        super().__init__()
        self.ch = ch

    def __missing__(self, t: tuple) -> int:
        from stepsim.models.blame import _host_key
        k = _host_key(*t)
        c = self[t] = _FOLLOW if k is None else self.ch.code(k)
        return c


def charge_holes(bl, compute: list, g0: np.ndarray, g1: np.ndarray, js: np.ndarray,
                 bs: np.ndarray, h0: float, h1: float, hs: np.ndarray, ends: np.ndarray
                 ) -> list[tuple[float, float, dict]]:
    """Charge every hole ``[g0, g1)`` (µs) into ``bl.acc``: the hole waits for
    ``compute[j]`` to start (until ``b``), or, ``j ≥ len(compute)``, for the host. Returns
    ``(start_us, dur_us, causes)`` of the holes starting in ``[h0, h1)``, in order. ``hs``,
    ``ends``: the host spans' starts and ends (``bl.host``'s, µs)."""
    nh, n = len(g0), len(compute)
    ch = _Charges()
    ids = np.arange(nh)
    slow = np.zeros(nh, dtype=bool)
    starts = js < n
    a = g0
    b = np.where(starts, bs, g1)
    # the next compute run's start (Blame.blame's "start")
    s_ids = ids[starts & (b - a > _EPS)]
    cols = getattr(compute, "cols", None)   # models.run_columns.Picked: read as columns
    if cols is not None:
        ri = compute.idx[js[s_ids]]
        m = len(ri)
        ready, gap, start = cols.ready[ri], cols.gap[ri], cols.start[ri]
    else:
        runs = list(map(compute.__getitem__, js[s_ids].tolist()))
        m = len(runs)
        ready = np.fromiter(map(_READY, runs), float, m)
        gap = np.fromiter(map(_GAP, runs), float, m)
        start = np.fromiter(map(_RUN_START, runs), float, m)
    sa, sb = a[s_ids], b[s_ids]
    entered = ready + gap
    late = start > entered + _EPS
    if late.any() and cols is not None:
        tc = cols.task[ri]
        late_key = {}
        for c in tc[late].tolist():   # in run order, as below
            if c not in late_key:
                late_key[c] = ch.code(bl.late_key(cols.tasks[c]))
        kc = np.array([late_key.get(c, 0) for c in range(len(cols.tasks))], np.intp)[tc]
        ch.add(s_ids, kc, sb - np.where(sa > entered, sa, entered), late)   # b - max(a, entered)
        sb = np.where(late, np.where(sb < entered, sb, entered), sb)        # min(b, entered)
    elif late.any():
        late_key = {}
        for r in _picked(runs, late):
            if r[2] not in late_key:
                late_key[r[2]] = ch.code(bl.late_key(r[2]))
        kc = np.fromiter((late_key.get(r[2], 0) for r in runs), np.intp, m)
        ch.add(s_ids, kc, sb - np.where(sa > entered, sa, entered), late)   # b - max(a, entered)
        sb = np.where(late, np.where(sb < entered, sb, entered), sb)        # min(b, entered)
    alive = sb - sa > _EPS
    idle = alive & (gap > _EPS)
    ch.add(s_ids, ch.code("device_idle"), sb - np.where(sa > ready, sa, ready), idle)
    sb = np.where(idle, np.where(ready < sb, ready, sb), sb)
    alive &= sb - sa > _EPS
    # what made it ready (Blame._binding): its launch, nothing, or a task (the scalar way)
    launch = np.full(m, np.nan)
    best_t = np.full(m, -np.inf)
    at = np.flatnonzero(alive)
    if cols is not None:
        best_t[at] = latest_ready_us(bl, ri[at])
        launch[at] = cols.launch[ri[at]]
    else:
        bound = list(map(runs.__getitem__, at.tolist()))
        best_t[at] = np.fromiter(map(_SECOND, map(bl.latest_ready, bound)), float, len(at))
        launch[at] = np.fromiter((math.nan if x is None else x for x in map(_LAUNCH, bound)),
                                 float, len(at))
    by_launch = alive & ~np.isnan(launch) & (launch > best_t + _EPS)
    nothing = alive & ~by_launch & (best_t <= sa + _EPS)
    slow[s_ids[alive & ~by_launch & ~nothing]] = True
    ch.add(s_ids, ch.code("other"), sb - sa, nothing)
    hb = np.where(by_launch, np.where(sb < launch, sb, launch), sb)   # min(b, launch)
    walk = by_launch & (hb - sa > _EPS)
    # the host thread's spans in [a, b) (Blame._host)
    direct = ids[~starts & (b - a > _EPS)]
    w_ids = np.concatenate([s_ids[walk], direct])
    wa = np.concatenate([sa[walk], a[direct]])
    wb = np.concatenate([hb[walk], b[direct]])
    _walk_host(bl, ch, w_ids, wa, wb, slow, hs, ends)
    return _total(bl, ch, slow, compute, g0, g1, js, bs, h0, h1)


def _picked(runs: list, mask: np.ndarray) -> list:
    """The runs where ``mask``."""
    return [runs[i] for i in np.flatnonzero(mask).tolist()]


def _walk_host(bl, ch: _Charges, w_ids, a, b, slow, hs, ends) -> None:
    """Walk each hole's host spans in ``[a, b)`` (:meth:`Blame._host`), every (hole, span)
    pair at once. The ends are sorted, so the walk's ``cur`` before a span is the hole's
    start at its first span and the last span's end (at most ``b``) after: each hole walks
    from its first span ending after ``a`` to its first ending at or after ``b``. Each pair's
    charges are made in the scalar order: the idle before the span (``other``), then the
    span's own (a followed wait's ``sync`` in its place), the hole's last idle after."""
    n = len(ends)
    if len(w_ids) == 0:
        return
    if n == 0:   # no span: the whole hole is idle
        ch.add(w_ids, ch.code("other"), b - a, (a < b) & ~slow[w_ids])
        return
    if not (np.diff(ends) >= 0).all():   # bisect on an unsorted list: the scalar way
        slow[w_ids] = True
        return
    memo = _HostCodes(ch)
    cols = getattr(bl, "host_cols", None)
    if cols is not None:   # every span's code from its shape's (models.host_columns)
        codes = np.array([memo[t] for t in cols.shapes], dtype=np.intp)[cols.shape] \
            if n else np.zeros(0, dtype=np.intp)
    else:
        codes = np.full(n, _UNKNOWN, dtype=np.intp)
    other = ch.code("other")
    fin: list = []
    i0 = np.searchsorted(ends, a, side="right")
    last = np.minimum(np.searchsorted(ends, b, side="left"), n - 1)
    cnt = np.where((i0 < n) & (a < b) & ~slow[w_ids], last - i0 + 1, 0)
    of = np.repeat(np.arange(len(w_ids)), cnt)            # each pair's hole (into w_ids)
    off = np.arange(len(of)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    ii, bb, hid = i0[of] + off, b[of], w_ids[of]
    en = ends[ii]
    e = np.where(bb < en, bb, en)                         # min(e, b)
    pe = ends[np.maximum(ii - 1, 0)]
    c = np.where(off == 0, a[of], np.where(bb < pe, bb, pe))   # cur: the last span's end
    s = hs[ii]
    s = np.where(c > s, c, s)                             # max(s, cur)
    on = e > s
    kc = codes[ii]
    new = on & (kc == _UNKNOWN)
    if new.any():   # the spans reached for the first time
        todo = np.unique(ii[new])
        codes[todo] = np.fromiter(map(memo.__getitem__, map(_SPAN_KEY, map(
            bl.host.__getitem__, todo.tolist()))), np.intp, len(todo))
        kc = codes[ii]
    followed = on & (kc == _FOLLOW)
    own_k = np.where(followed, other, kc)
    own_u = e - s
    own_m = on & ~followed
    if followed.any():
        fp = np.flatnonzero(followed)
        syncs = _follow(bl, ch, fin, slow, hid[fp], ii[fp], s[fp], e[fp], cols, hs)
        for k, code, us in syncs:   # a wait for no run: its sync in the span's place
            own_k[fp[k]], own_u[fp[k]], own_m[fp[k]] = code, us, True
    both = np.column_stack
    ch.add(both((hid, hid)).ravel(), both((np.full(len(hid), other), own_k)).ravel(),
           both((np.where(bb < s, bb, s) - c, own_u)).ravel(), both((s > c, own_m)).ravel())
    ends_at = np.where(cnt > 0, np.where(b < ends[last], b, ends[last]), a)
    ch.add(w_ids, other, b - ends_at, (ends_at < b) & ~slow[w_ids])
    if fin:   # the followed waits' charges, after the hole's walk, the last wait's first
        h, ni, j, kc, us = (np.concatenate(x) for x in zip(*fin))
        o = np.lexsort((j, ni, h))   # by hole, the last wait first, then in order
        ch.add(h[o].astype(np.intp), kc[o].astype(np.intp), us[o].astype(float), ~slow[h[o]])


def _follow(bl, ch: _Charges, fin: list, slow, hid, ii, s, e, cols, hs) -> list:
    """Host waits followed to the device (:meth:`Blame.follow_wait`), each the part
    ``[s, e)`` of span ``ii`` in hole ``hid``, their charges put in ``fin`` as arrays (hole,
    -span, order, key code, µs), to be made after the hole's walk as the scalar walk's stack
    pops them. A wait for one run read from the run columns whose chain ends at that run's
    start (its stream's idle time, ``device_idle``, back to the wait) is charged with numpy:
    the run's keys (``finish``), then ``device_idle``; any other the scalar way. Returns
    the waits for no run: ``(k, sync key code, µs)``, ``k`` into the arrays given."""
    rc = bl.run_cols
    one: list = []     # (k into hid, step, task code) of a wait for one task
    other: list = []   # k of the rest
    waits, tmap = bl.waits, rc.code if rc is not None else None
    for k, i in enumerate(ii.tolist()):
        cause = cols.shapes[cols.shape[i]][2] if cols is not None else bl.host[i][7]
        w = waits.get((float(hs[i]), cause))
        if tmap is not None and w is not None and len(w.tasks) == 1:
            step, task = w.tasks[0]
            one.append((k, step, tmap.get(task, -1)))
        else:
            other.append(k)
    if one:
        ks, step, code = (np.array(x, dtype=np.intp) for x in zip(*one))
        ri = rc.find(step, code)
        got = ri >= 0
        other.extend(ks[~got].tolist())
        ks, ri = ks[got], ri[got]
        a, b = s[ks], e[ks]
        st, ready = rc.start[ri], rc.ready[ri]
        gap = rc.gap[ri]
        on = b - a > _EPS
        b2 = np.where(st < b, st, b)                       # min(b, st)
        goes = on & (b2 - a > _EPS)                        # ("start", run, a, b2)
        idle = gap > _EPS
        b3 = np.where(ready < b2, ready, b2)               # min(ready, b)
        further = goes & ((st > ready + gap + _EPS) | ~idle | (b3 - a > _EPS))
        other.extend(ks[further].tolist())
        keep = ~further
        ks, ri, a, b, st, ready, b2, goes = (x[keep] for x in (ks, ri, a, b, st, ready, b2,
                                                                goes))
        on = b - a > _EPS
        h, ni = hid[ks], -ii[ks]
        lo = np.where(st > a, st, a)
        tc = rc.task[ri]
        for c in np.flatnonzero(np.bincount(tc, minlength=len(rc.tasks))).tolist():
            sel = on & (tc == c)
            keys = bl._keys.get(rc.tasks[c])
            keys = keys if keys is not None else bl.task_keys_of(rc.tasks[c])
            for j, (key, f) in enumerate(keys):
                us = (b - lo) * f
                m = sel & (us > _EPS)
                fin.append((h[m], ni[m], np.full(m.sum(), j), np.full(m.sum(), ch.code(key)),
                            us[m]))
        us = b2 - np.where(a > ready, a, ready)            # b - max(a, ready)
        m = goes & (us > _EPS)
        fin.append((h[m], ni[m], np.full(m.sum(), 1 << 20), np.full(m.sum(),
                                                                  ch.code("device_idle")), us[m]))
    if not other:
        return []
    syncs = _follow_scalar(bl, ch, fin, slow, hid[other], ii[other], s[other], e[other],
                           cols, hs)
    return [(other[k], code, us) for k, code, us in syncs]


def _follow_scalar(bl, ch: _Charges, fin: list, slow, hid, ii, s, e, cols, hs) -> list:
    """:func:`_follow` the scalar way: :meth:`Blame.follow_wait`, and :meth:`Blame.blame` of
    the ``finish`` it pushes, into a tape; a wait for no run is returned as ``(k, sync key
    code, µs)`` (charged in the walk, in the span's place)."""
    acc, tape = bl.acc, _Tape()
    syncs: list = []
    items = tape.items
    bl.acc = tape
    try:
        for n_k, (h, i, a, b) in enumerate(zip(hid.tolist(), ii.tolist(), s.tolist(),
                                               e.tolist())):
            if slow[h]:
                continue
            cause = cols.shapes[cols.shape[i]][2] if cols is not None else bl.host[i][7]
            stack: list = []
            k = len(items)
            bl.follow_wait(float(hs[i]), cause, a, b, stack)
            if stack:
                bl.blame(stack.pop())
                got = items[k:]
                n = len(got)
                fin.append((np.full(n, h), np.full(n, -i), np.arange(n),
                            np.array([ch.code(key) for key, _ in got], dtype=np.intp),
                            np.array([us for _, us in got], dtype=float)))
            elif len(items) > k:   # sync: charged in the walk
                syncs.append((n_k, ch.code(items[k][0]), items[k][1]))
    finally:
        bl.acc = acc
    return syncs


def _total(bl, ch: _Charges, slow, compute, g0, g1, js, bs, h0, h1):
    """Add the charges into ``bl.acc`` in hole order; the kept holes' causes."""
    n = len(compute)
    H = [np.concatenate(ch.h)] if ch.h else []
    K = [np.concatenate(ch.k)] if ch.k else []
    U = [np.concatenate(ch.u)] if ch.u else []
    if slow.any():
        if H:   # a slow hole's charges are all the tape's
            fast = ~slow[H[0]]
            H, K, U = [H[0][fast]], [K[0][fast]], [U[0][fast]]
        acc, tape, counts = bl.acc, _Tape(), []
        items = tape.items
        xs = np.flatnonzero(slow)
        bl.acc = tape   # one tape for every slow hole: each hole's charges follow the last's
        try:
            for j, a, b, c in zip(js[xs].tolist(), g0[xs].tolist(), bs[xs].tolist(),
                                  g1[xs].tolist()):
                k = len(items)
                bl.blame(("start", compute[j], a, b) if j < n else ("host", None, a, c))
                counts.append(len(items) - k)
        finally:
            bl.acc = acc
        if items:
            H.append(np.repeat(xs.astype(np.intp), counts))
            K.append(np.array([ch.code(k) for k, _ in items], dtype=np.intp))
            U.append(np.array([u for _, u in items], dtype=float))
    H = np.concatenate(H) if H else np.zeros(0, np.intp)
    K = np.concatenate(K) if K else np.zeros(0, np.intp)
    U = np.concatenate(U) if U else np.zeros(0)
    order = np.argsort(H, kind="stable")
    H, K, U = H[order], K[order], U[order]
    names = list(ch.codes)
    acc = bl.acc
    first = {}
    per_key = {}
    # by key, each key's charges in hole order; 16-bit codes sort by radix (same order: stable)
    byk = np.argsort(K.astype(np.uint16) if len(names) <= _RADIX_CODES else K, kind="stable")
    hk_all, uk_all = H[byk], U[byk]
    counts = np.bincount(K, minlength=len(names))
    ends = np.cumsum(counts).tolist()
    for c in np.flatnonzero(counts).tolist():   # np.unique's order
        hi = ends[c]
        lo = hi - int(counts[c])
        name = names[c]
        had = name in acc
        init = acc[name] if had else 0.0
        run = np.cumsum(np.concatenate(([init], uk_all[lo:hi])))   # init + u1 + ... in order
        per_key[name] = (hk_all[lo:hi], run, had)
        first[name] = int(byk[lo])   # its first charge's place in hole order
    for name in sorted(first, key=first.__getitem__):   # new keys in the order first charged
        acc[name] = float(per_key[name][1][-1])
    kept = np.flatnonzero((h0 <= g0) & (g0 < h1))
    # each kept hole's charge to each key: the key's total after its charges minus before
    cols = []
    for name in acc:
        got = per_key.get(name)
        if got is None:
            continue
        hk, run, _ = got
        lo, hi = np.searchsorted(hk, kept, "left"), np.searchsorted(hk, kept, "right")
        d = run[hi] - run[lo]
        cols.append((name, ((hi > lo) & (d > _EPS)).tolist(), d.tolist()))
    out = []
    for j, (a, b) in enumerate(zip(g0[kept].tolist(), g1[kept].tolist())):
        out.append((a, b - a, {name: d[j] for name, on, d in cols if on[j]}))
    return out
