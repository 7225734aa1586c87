"""calibration.corun.corun_loads (the busy share of the other cores beside each record, summed
over the steps of the runnable-thread count) equals the direct sum over every piece of each
record, on random activities with ties, nesting, identical copies and huge clock offsets."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.calibration import corun
from stepsim.calibration.corun import Activity, corun_loads


def brute(acts, cores):
    """Directly: each activity's interval cut at every instant, the runnable threads of every
    activity summed at each piece's midpoint, less its own running thread, capped at the other
    cores, averaged over its wall and divided by them."""
    cuts = sorted({a.start_us for a in acts} | {a.end_us for a in acts})
    out = np.zeros(len(acts))
    if cores <= 1:
        return out
    for i, a in enumerate(acts):
        pts = [a.start_us] + [c for c in cuts if a.start_us < c < a.end_us] + [a.end_us]
        tot = 0.0
        for lo, hi in zip(pts, pts[1:]):
            mid = (lo + hi) / 2
            r = sum(b.threads for b in acts if b.start_us <= mid < b.end_us)
            tot += (hi - lo) * min(max(r - min(a.threads, 1.0), 0.0), cores - 1)
        out[i] = tot / (a.end_us - a.start_us) / (cores - 1)
    return out


_act = st.tuples(st.integers(0, 60), st.integers(1, 40), st.sampled_from([0.4, 1.0, 1.5, 2.0, 3.7]),
                 st.sampled_from(["batch", "step"]))


@settings(max_examples=200, deadline=None)
@given(raw=st.lists(_act, min_size=1, max_size=40), cores=st.integers(1, 8),
       offset=st.sampled_from([0.0, 1.7e12]), scale=st.sampled_from([1.0, 13.3]),
       copies=st.integers(0, 2))
def test_equals_the_pairwise_sum(raw, cores, offset, scale, copies):
    acts = [Activity(offset + scale * s, offset + scale * (s + d), th, 100.0, k)
            for s, d, th, k in raw]
    acts += acts[:copies]                       # identical records count each other
    want = brute(acts, cores)
    got = corun_loads(acts, cores)
    # float µs near 1.7e12 carry about 2e-4 µs of rounding each
    tol = 1e-9 if offset == 0 else 1e-5 / scale
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=tol)


def test_closed_form_and_empty():
    """Two workers of 2 threads overlapping half of a one-thread step on 2 cores: beside the
    step 4 threads run in its second half, which can hold only the 1 other core (share 1
    there, 0.5 over its wall); each worker has the other core busy throughout (its own second
    thread). On 3 cores, a thread beside 1.5 runnable threads for half its wall: 1.5 of the 2
    other cores there, 0.375 over its wall; the 1.5-thread record sees 1 + 0.5 of its own."""
    acts = [Activity(0, 100, 1.0, 50, "step"), Activity(50, 150, 2.0, 50, "batch"),
            Activity(50, 150, 2.0, 50, "batch")]
    np.testing.assert_allclose(corun_loads(acts, 2), [0.5, 1.0, 1.0])
    two = [Activity(0, 100, 1.0, 50, "batch"), Activity(50, 100, 1.5, 50, "batch")]
    np.testing.assert_allclose(corun_loads(two, 3), [0.375, 0.75])
    np.testing.assert_allclose(corun_loads(two, 1), [0.0, 0.0])      # no other core
    assert corun_loads([], 2).shape == (0,)


def test_more_runnable_threads_than_cores_add_nothing():
    """The busy share of the other cores saturates: a thread beside 1, 2 or 7 always-runnable
    threads on 2 cores has the other core busy all along (1.0); the old count of other
    threads per core read 0.5, 1.0, 3.5."""
    for k in (1, 2, 7):
        acts = [Activity(0, 100, 1.0, 50, "batch")] * (k + 1)
        np.testing.assert_allclose(corun_loads(acts, 2), [1.0] * (k + 1))


def test_blocks_give_the_same_shares(monkeypatch):
    """Summed in blocks of a few activity-step pairs (memory bound), the same shares."""
    rng = np.random.default_rng(0)
    acts = [Activity(float(s), float(s + d), float(t), 1.0, "batch")
            for s, d, t in zip(rng.integers(0, 500, 300), rng.integers(1, 60, 300),
                               rng.choice([0.5, 1.0, 2.0], 300))]
    want = corun_loads(acts, 2)
    monkeypatch.setattr(corun, "_BLOCK", 7)
    np.testing.assert_allclose(corun_loads(acts, 2), want, rtol=1e-12)
