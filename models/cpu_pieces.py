"""A collective's CPU work on the host's cores, cut into its backend threads' wake-ups
(:func:`models.device.stream_process`, gloo on CPU tensors).

Each of the ``n`` pieces follows a wake-up: when every core of the host is busy at that
instant (``cpu.active`` ≥ cores, this thread not counted) the wake-up first waits ``wait_us``
for one (a running thread's slice), then the piece runs as :meth:`models.cpu.CpuPool.work`
runs it (``preempt``: taking a core from a running thread when every core is held).

A piece that got a core from the pool's FIFO (:class:`simpy.Resource`) and ends with no
thread queued for a core, where its next wake-up finds a core idle and no other event is due
at that instant, would release that core and request it again, granted at once, and resume
before anything else happens: the thread keeps it instead, and the next piece is one timeout,
not a request, a timeout and a release (3 events). The run is the same, event for event in
the same order (where another event is due at that instant, the core is released and
requested as before: that event would run between the request and the piece's timeout),
with one exception: where every event due at that instant is another such held piece's end
(the ranks' gloo threads in lockstep after their rendezvous, each piece ending at the same
instant), and the piece's length does not depend on how many threads run (no interference
or oversubscription term), the core is kept too. Released and requested, the core would be
granted at once all the same, and the only difference is when the thread's next timeout is
scheduled: before the other piece's resumption instead of after it, which orders it first
among events at one later instant, as it was (the other's next piece is requested after it),
and reads no state the other changes (its slice takes no core from it: no wake-up preempts
at that instant without waiting first). Same run, fewer events.

Held pieces in lockstep (runs of held pieces from the same instant, of the same count and
length: the ranks' threads through one collective after their rendezvous, each on a core of
its own, nothing else runnable) would each end at the same instants, keep their cores and
change nothing until the next event queued that is none of theirs, or their last piece: each
thread runs the pieces that end before that as one timeout, the others merging to the same
end at the same instant, in the order they resume (:func:`_lockstep_pieces`). The instants are the pieces' own, each end the
previous end plus the piece, to the bit. A merge is tried only where lockstep can be (the
thread's last end was tied with another held piece's, or another merged at this instant), so
pieces that are not in lockstep pay no more than a tie check.
"""
from __future__ import annotations

from collections.abc import Callable

from stepsim.models.cpu import MAX_QUANTA, CpuPool


def _held_path(cpu: CpuPool, piece_us: float, wait_us: float) -> bool:
    """Whether :meth:`CpuPool.work` would run a piece now as one quantum of the pool's FIFO:
    contended and not free, no preemption (a core idle), one chunk, and not the per-core
    sharing (judged, as ``work`` does, with this thread counted)."""
    if not cpu.contended or piece_us > cpu.quantum_us or cpu.free():
        return False
    if wait_us > 0 and cpu.resource.count >= cpu.cores and not cpu._fluid():
        return False    # CpuPool.work's preemption (CpuPool._steal)
    cpu.active += 1
    try:
        return not cpu._fluid()
    finally:
        cpu.active -= 1


def _only_piece_ends_due(env, ends: dict) -> bool:
    """Whether every event due at this instant is one of ``ends`` (held pieces' timeouts).
    SimPy's event queue (``Environment._queue``) is a heap of ``(time, priority, id, event)``
    whose entries due now are the root's connected subtree (times never precede ``now``)."""
    q, now = env._queue, env.now
    todo = [0]
    while todo:
        k = todo.pop()
        if k < len(q) and q[k][0] <= now:
            if q[k][3] not in ends:
                return False
            todo += (2 * k + 1, 2 * k + 2)
    return True


def _horizon_us(env, ends: dict) -> float:
    """The first instant (µs) of a queued event that is no held piece's end (``ends``), from
    SimPy's queue (``Environment._queue``, a heap of ``(time, priority, id, event)``, pruned
    below the best so far: a subtree's times are at least its root's)."""
    q, best, todo = env._queue, float("inf"), [0]
    while todo:
        k = todo.pop()
        if k < len(q) and q[k][0] < best:
            if q[k][3] not in ends:
                best = q[k][0]
            todo += (2 * k + 1, 2 * k + 2)
    return best


def _lockstep_pieces(env, ends: dict, run: tuple, dt: float, left: int) -> tuple[int, float]:
    """``(m, end µs)``: of a held thread's ``left`` pieces of ``dt`` µs from now (it keeps its
    core, at the host's plain speed), the ``m`` ≥ 1 run as one timeout, and where the
    ``m``-th ends, each end the previous end plus ``dt`` (where one timeout a piece puts it).

    More than one only where every other held piece of the pool is in lockstep with it
    (the ranks' gloo threads after their rendezvous: the same ``run``, its held pieces'
    first instant, count and length, so the same boundaries) and ends now (tied with it,
    yet to resume) or at one of its boundaries (merged there first, at this instant), and
    the ``m`` pieces end before anything else queued (:func:`_horizon_us`) and before its
    last piece. Until then nothing would run but these pieces' ends, each keeping its core
    (the pool's state unchanged), in the order they resume now: one timeout each, scheduled
    now in that order, is the same run.
    """
    now, q = env.now, env._queue
    if q and q[0][0] < now + 2 * dt and q[0][3] not in ends:
        return 1, now + dt     # something else is due before a second piece would end
    forced = None
    for end_us, other in ends.values():
        if other != run:
            return 1, now + dt
        if end_us != now:
            if forced is not None and forced != end_us:
                return 1, now + dt
            forced = end_us
    horizon = _horizon_us(env, ends)
    t, m, end_us = now, 0, now + dt
    for k in range(left - 1):
        t += dt
        if t >= horizon or (forced is not None and t > forced):
            break
        m, end_us = k + 1, t
    if m <= 1 or (forced is not None and end_us != forced) or now + (end_us - now) != end_us:
        return 1, now + dt
    return m, end_us


def run_pieces(cpu: CpuPool, work_us: float, n: int, wait_us: float,
               on_wait: Callable[[float], None] | None = None):
    """Process generator: ``work_us`` µs of one backend thread's CPU work in ``n`` pieces,
    each after a wake-up that waits ``wait_us`` µs when every core is busy (see the module
    docstring). ``on_wait(woke)`` is called after each such wait, with its start (µs).
    The collective's quanta over all its pieces stay :data:`models.cpu.MAX_QUANTA`."""
    env, res, ends = cpu.env, cpu.resource, cpu.piece_ends
    piece = work_us / n
    i = 0
    while i < n:
        if wait_us > 0 and cpu.active >= cpu.cores:
            woke = env.now
            yield env.timeout(wait_us)
            if on_wait is not None:
                on_wait(woke)
        if piece <= 0 or not _held_path(cpu, piece, wait_us):
            yield from cpu.work(piece, preempt=wait_us > 0, quanta=MAX_QUANTA // n)
            i += 1
            continue
        cpu.active += 1
        try:
            with res.request() as req:
                yield req
                run = None   # its plain pieces' (first instant, count, length): lockstep
                tied = False     # its last piece's end was tied with another held piece's
                while True:
                    # one piece on the held core, as CpuPool.work's FIFO path runs a quantum;
                    # in lockstep with the other held pieces, several (_lockstep_pieces)
                    plain = cpu.interference <= 0 and cpu.oversub <= 0
                    dt = piece * (cpu.scale if plain else cpu.slowdown(0.0))
                    m, end_us = 1, env.now + dt
                    if not plain:
                        run = None
                    elif run is None:
                        run = (env.now, n - i, dt)
                    elif n - i > 2 and (tied or cpu.merged_at == env.now):
                        # only where lockstep can be: its last end tied with another held
                        # piece's, or one merged at this instant
                        m, end_us = _lockstep_pieces(env, ends, run, dt, n - i)
                        if m > 1:
                            cpu.merged_at = env.now
                    cpu.owed[req] = 0.0
                    end = env.timeout(dt if m == 1 else end_us - env.now)
                    ends[end] = (end_us, run)
                    try:
                        yield end
                    finally:
                        del ends[end]
                        owed = cpu.owed.pop(req)
                    if owed > 1e-9:     # preempted meanwhile (CpuPool._steal)
                        yield env.timeout(owed)
                        run = None
                    i += m
                    # keep the core where releasing and requesting it again would be granted
                    # at once, with nothing between: nobody queued, no other event due now
                    # but other held pieces' ends (the module docstring), and the next
                    # wake-up finds a core idle
                    tied = env.peek() <= env.now
                    if (i >= n or res.queue
                            or (wait_us > 0 and cpu.active - 1 >= cpu.cores)
                            or cpu.free() or cpu._fluid()
                            or tied and not (plain and _only_piece_ends_due(env, ends))):
                        break
        finally:
            cpu.active -= 1
