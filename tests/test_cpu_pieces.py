"""models.cpu_pieces: a collective's wake-up pieces keep an idle core instead of releasing and
requesting it again, and pieces in lockstep run as one timeout until anything else is due: the
same run as one CpuPool.work per piece, to the bit."""
from __future__ import annotations

import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.models.cpu import MAX_QUANTA, CpuPool
from stepsim.models.cpu_pieces import run_pieces


def per_piece(cpu: CpuPool, work_us: float, n: int, wait_us: float, waits: list):
    """The loop run_pieces replaces: one CpuPool.work per piece, each after its wake-up."""
    env = cpu.env
    for _ in range(n):
        if wait_us > 0 and cpu.active >= cpu.cores:
            woke = env.now
            yield env.timeout(wait_us)
            waits.append(woke)
        yield from cpu.work(work_us / n, preempt=wait_us > 0, quanta=MAX_QUANTA // n)


def scene(pieces, others, gloo, wait_us, scale=1.0):
    """Each thread's end (µs) and the events run: ``gloo`` collectives ``(start, work, n)``
    beside plain threads ``(start, work)`` on a contended 2-core pool."""
    env = simpy.Environment()
    cpu = CpuPool(env, 2, contended=True, scale=scale)
    ends, waits = {}, []

    def thread(key, start, body):
        yield env.timeout(start)
        yield from body
        ends[key] = env.now

    for i, (start, work) in enumerate(others):
        env.process(thread(("cpu", i), start, cpu.work(work)))
    for i, (start, work, n) in enumerate(gloo):
        body = (run_pieces(cpu, work, n, wait_us, waits.append) if pieces
                else per_piece(cpu, work, n, wait_us, waits))
        env.process(thread(("gloo", i), start, body))
    count = 0
    while env.peek() != float("inf"):
        env.step()
        count += 1
    return ends, sorted(waits), count


def test_alone_on_a_contended_pool_the_pieces_are_one_request_and_n_timeouts():
    """Alone, no piece is tied, so none is merged (merging is tried only in lockstep)."""
    ends, waits, count = scene(True, [], [(0.0, 1200.0, 12)], 150.0, scale=1.5)
    assert ends[("gloo", 0)] == 1200.0 * 1.5     # closed form: its work at the host's speed
    assert waits == []                           # an idle core at every wake-up
    old_ends, _, old_count = scene(False, [], [(0.0, 1200.0, 12)], 150.0, scale=1.5)
    assert old_ends[("gloo", 0)] == ends[("gloo", 0)]
    # start, request, 12 timeouts, release, the process's end; before: 3 events a piece
    assert old_count - count == 2 * 11


def test_busy_cores_make_each_wake_up_wait_and_preempt_as_before():
    """Two threads hold both cores: every piece waits ``L`` and then preempts (no core kept)."""
    others = [(0.0, 50_000.0), (0.0, 50_000.0)]
    new = scene(True, others, [(10.0, 1000.0, 10)], 150.0)
    old = scene(False, others, [(10.0, 1000.0, 10)], 150.0)
    assert new[0] == old[0] and new[1] == old[1]
    assert len(new[1]) == 10 and new[2] == old[2]
    assert new[0][("gloo", 0)] == 10.0 + 10 * (150.0 + 100.0)   # n (L + w/n)


@settings(max_examples=60, deadline=None)
@given(others=st.lists(st.tuples(st.floats(0, 5000), st.floats(1, 9000)), max_size=3),
       gloo=st.lists(st.tuples(st.floats(0, 3000), st.floats(1, 6000), st.integers(1, 40)),
                     min_size=1, max_size=3),
       wait_us=st.sampled_from([0.0, 150.0]))
def test_the_same_instants_as_one_work_per_piece(others, gloo, wait_us):
    new_ends, new_waits, new_count = scene(True, others, gloo, wait_us)
    old_ends, old_waits, old_count = scene(False, others, gloo, wait_us)
    assert new_ends == old_ends and new_waits == old_waits
    assert new_count <= old_count


def test_lockstep_ranks_tied_at_each_boundary_run_as_before():
    """Two collectives in lockstep (the ranks after their rendezvous) beside a thread whose
    work ends at one of their boundaries: where another event is due at that instant the core
    is released and requested as before, so the run is the same to the bit."""
    gloo = [(0.0, 1200.0, 12), (0.0, 1200.0, 12)]
    for others in ([], [(100.0, 400.0)], [(0.0, 50_000.0)]):
        for wait_us in (0.0, 150.0):
            new, old = scene(True, others, gloo, wait_us), scene(False, others, gloo, wait_us)
            assert new[:2] == old[:2] and new[2] <= old[2]


def test_lockstep_ranks_alone_keep_their_cores_through_their_tied_boundaries():
    """Two collectives in lockstep on an otherwise idle 2-core pool (the ranks' gloo threads
    after their rendezvous): every boundary is tied with the other's, and only the other's
    piece end is due then, so each keeps its core and runs its middle pieces as one timeout
    ending where the other's does: a request, 3 timeouts and a release each, where one work
    per piece takes 3 events a piece; the same instants (closed form: the work at the
    host's speed)."""
    gloo = [(0.0, 1200.0, 12), (0.0, 1200.0, 12)]
    for wait_us in (0.0, 150.0):
        ends, waits, count = scene(True, [], gloo, wait_us, scale=1.5)
        old_ends, old_waits, old_count = scene(False, [], gloo, wait_us, scale=1.5)
        assert ends == old_ends and waits == old_waits == []
        assert ends[("gloo", 0)] == ends[("gloo", 1)] == 1200.0 * 1.5
        assert old_count - count == 2 * (3 * 12 - 5)


def test_a_tie_with_anything_but_a_held_piece_end_releases_the_core():
    """A plain thread's timeout due at a lockstep boundary (its start at 400 µs, the 4th
    boundary of 100 µs pieces) is no held piece's end: the core is released and requested
    there as before, and the run is the same."""
    gloo = [(0.0, 1200.0, 12), (0.0, 1200.0, 12)]
    new = scene(True, [(400.0, 300.0)], gloo, 0.0)
    old = scene(False, [(400.0, 300.0)], gloo, 0.0)
    assert new[:2] == old[:2]
    assert old[2] - new[2] < 2 * (3 * 12 - 5)


@settings(max_examples=80, deadline=None)
@given(others=st.lists(st.tuples(st.sampled_from([0.0, 100.0, 400.0, 1200.0]),
                                 st.sampled_from([100.0, 300.0, 2000.0, 5000.0])), max_size=3),
       gloo=st.lists(st.tuples(st.sampled_from([0.0, 100.0]),
                               st.sampled_from([600.0, 1200.0]), st.sampled_from([6, 12])),
                     min_size=2, max_size=4),
       wait_us=st.sampled_from([0.0, 100.0, 150.0]), scale=st.sampled_from([1.0, 1.5]))
def test_tied_instants_run_as_one_work_per_piece(others, gloo, wait_us, scale):
    """Starts, works and pieces on a grid, so that boundaries, wake-ups and other threads'
    ends fall on the same instants: the same ends and waits as one work per piece."""
    new = scene(True, others, gloo, wait_us, scale)
    old = scene(False, others, gloo, wait_us, scale)
    assert new[:2] == old[:2] and new[2] <= old[2]
