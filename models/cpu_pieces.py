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


def _only_piece_ends_due(env, ends: set) -> bool:
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
                while True:
                    # one piece on the held core, as CpuPool.work's FIFO path runs a quantum
                    dt = piece * (cpu.scale if cpu.interference <= 0 and cpu.oversub <= 0
                                  else cpu.slowdown(0.0))
                    cpu.owed[req] = 0.0
                    end = env.timeout(dt)
                    ends.add(end)
                    try:
                        yield end
                    finally:
                        ends.discard(end)
                        owed = cpu.owed.pop(req)
                    if owed > 1e-9:     # preempted meanwhile (CpuPool._steal)
                        yield env.timeout(owed)
                    i += 1
                    # keep the core where releasing and requesting it again would be granted
                    # at once, with nothing between: nobody queued, no other event due now
                    # but other held pieces' ends (the module docstring), and the next
                    # wake-up finds a core idle
                    if (i >= n or res.queue
                            or (wait_us > 0 and cpu.active - 1 >= cpu.cores)
                            or cpu.free() or cpu._fluid()
                            or env.peek() <= env.now and not (
                                cpu.interference <= 0 and cpu.oversub <= 0
                                and _only_piece_ends_due(env, ends))):
                        break
        finally:
            cpu.active -= 1
