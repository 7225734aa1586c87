"""calibration.corun.corun_loads by the integral of the runnable threads (O(n log n)) equals
the pairwise overlap sum it replaced (O(n²): 500,000 records took over 120 s), on random
activities with ties, nesting, identical copies and huge clock offsets."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stepsim.calibration.corun import Activity, corun_loads


def brute(acts, cores):
    """The pairwise form: every other activity's overlap × its threads."""
    starts = np.array([a.start_us for a in acts])
    ends = np.array([a.end_us for a in acts])
    thr = np.array([a.threads for a in acts])
    out = np.zeros(len(acts))
    for i, a in enumerate(acts):
        ov = np.clip(np.minimum(ends, a.end_us) - np.maximum(starts, a.start_us), 0, None)
        ov[i] = 0.0
        out[i] = (float((ov * thr).sum()) / (a.end_us - a.start_us) + (a.threads - 1)) / cores
    return out


_act = st.tuples(st.integers(0, 60), st.integers(1, 40), st.sampled_from([1.0, 1.5, 2.0, 3.7]),
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
    """Two workers of 2 threads overlapping half of a one-thread step on 2 cores: the step
    sees 2 × 2 threads over half its wall = 2 threads, per core 1.0; each worker sees the step
    (1 thread) over half its wall and the other worker fully, plus its own other thread."""
    acts = [Activity(0, 100, 1.0, 50, "step"), Activity(50, 150, 2.0, 50, "batch"),
            Activity(50, 150, 2.0, 50, "batch")]
    np.testing.assert_allclose(corun_loads(acts, 2), [1.0, (0.5 + 2 + 1) / 2, (0.5 + 2 + 1) / 2])
    assert corun_loads([], 2).shape == (0,)
