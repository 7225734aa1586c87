"""Each DDP bucket's all-reduce matched to its ``copy_bucket_to_grad`` events, so the main
thread's resume from the wait for the last bucket lies between the bucket before's copies
and the last bucket's first copy, whatever the gloo end stamps say
(calibration.gloo_steps.bucket_copies)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from stepsim.calibration.gloo_steps import GlooCollective, bucket_copies, fit_gloo_step

US = 1000
W, B = 262_144, 512     # a 512x512 weight's elements, its bias's


def _copies(spans_us, numels):
    return (np.array([a * US for a, _ in spans_us]), np.array([b * US for _, b in spans_us]),
            np.array(numels, dtype=np.int64))


def test_copies_fall_into_runs_that_sum_to_each_buckets_elements():
    """Bucket 0 of one layer (bias + weight), bucket 1 of two, copied in bucket order: the
    runs are (100, 130) and (200, 260) µs; a count off, a bucket without copies or copies
    without element counts match nothing."""
    c = _copies([(100, 105), (105, 130), (200, 201), (201, 230), (230, 231), (231, 260)],
                [B, W, B, W, B, W])
    assert bucket_copies(c, [B + W, 2 * (B + W)], 0, 1000 * US) == [(100 * US, 130 * US),
                                                                     (200 * US, 260 * US)]
    assert bucket_copies(c, [B + W, 2 * (B + W) + 1], 0, 1000 * US) is None
    assert bucket_copies(c, [B + W, B + W], 0, 1000 * US) is None          # copies left over
    assert bucket_copies(c, [B + W, 2 * (B + W), B], 0, 1000 * US) is None
    assert bucket_copies(c[:2], [B + W, 2 * (B + W)], 0, 1000 * US) is None
    assert bucket_copies(c, [None, 2 * (B + W)], 0, 1000 * US) is None
    # only the step's copies: the second bucket's are past its end
    assert bucket_copies(c, [B + W], 0, 150 * US) == [(100 * US, 130 * US)]


def _two_buckets(before_end_us: float, last_end_us: float):
    """test_gloo_resume's closed form from the DDP demo of 11:59:51 (µs): backward 0-1000,
    bucket 0 enqueued at 500 and reduced from 600 (copied 6726-6852), the last bucket
    enqueued 1000-1033 and reduced from 1053 (copied 12425-12600), optimizer 12600-13600,
    step end 14000; the gloo end stamps as given."""
    colls = [GlooCollective("all_reduce", B + W, "float", (500 * US, 510 * US),
                            (600 * US, int(before_end_us * US))),
             GlooCollective("all_reduce", B + W, "float", (1000 * US, 1033 * US),
                            (1053 * US, int(last_end_us * US)))]
    spans = [(0, 500), (500, 510), (510, 1000), (1000, 1033), (6726, 6730), (6730, 6852),
             (12425, 12430), (12430, 12600), (12600, 13600)]
    main_ev = (np.array([a * US for a, _ in spans]), np.array([b * US for _, b in spans]))
    copies = (main_ev[0][4:8], main_ev[1][4:8], np.array([B, W, B, W], dtype=np.int64))
    step = SimpleNamespace(number=1, start_ns=0, end_ns=14_000 * US)
    return step, colls, main_ev, copies


@pytest.mark.parametrize("before_end_us", [6700, 6800, 20_000, 1_006_700])
@pytest.mark.parametrize("last_end_us", [12398, 13000, 1_012_398])
def test_a_late_end_stamp_on_either_bucket_does_not_move_the_resume(before_end_us,
                                                                    last_end_us):
    """The main thread waited for bucket 0 (gap 1033-6726), copied it, waited for the last
    (gap 6852-12425) and copied it: the resume is 12425 and the lag-free optimizer 1575 µs
    whatever either all-reduce's end stamp says. On main, bucket 0's end stamped past the
    first gap's end (6800, or a second late) kept that gap, 5.7 ms before the last
    all-reduce ended, as the resume (calibration.gloo_resume.last_resume searches again only
    from an end stamp inside the first gap found)."""
    step, colls, main_ev, copies = _two_buckets(before_end_us, last_end_us)
    rec = fit_gloo_step(step, colls, np.array([0]), np.array([1000 * US]), (), main_ev, copies)
    assert rec.resume_ns == 12425 * US
    assert rec.opt_work_us == pytest.approx(1575.0)
    assert rec.copy_us == pytest.approx(175.0)


def test_a_gap_between_the_last_buckets_copies_is_not_the_resume():
    """One bucket, reduced 1053-5000, copied 5030-5080 (bias) then, the training thread
    preempted, 10000-10200 (weight); optimizer 10200-11000, step end 11500. The resume is
    the bucket's first copy, 5030: the main thread copies right after its wait. On main the
    search ran to just past the last copy's start and took the longer gap 5080-10000."""
    colls = [GlooCollective("all_reduce", B + W, "float", (1000 * US, 1033 * US),
                            (1053 * US, 5000 * US))]
    spans = [(0, 1000), (1000, 1033), (5030, 5080), (10000, 10200), (10200, 11000)]
    main_ev = (np.array([a * US for a, _ in spans]), np.array([b * US for _, b in spans]))
    copies = (main_ev[0][2:4], main_ev[1][2:4], np.array([B, W], dtype=np.int64))
    step = SimpleNamespace(number=1, start_ns=0, end_ns=11_500 * US)
    rec = fit_gloo_step(step, colls, np.array([0]), np.array([1000 * US]), (), main_ev, copies)
    assert rec.resume_ns == 5030 * US
    assert rec.copy_us == pytest.approx(250.0)
    assert rec.opt_work_us == pytest.approx(6470.0)


def test_unmatched_copies_keep_the_search_bounded_by_the_last_copy():
    """Copies whose elements do not sum to the buckets' (here no counts: a trace without
    Input Dims on them) fall back to the search up to the last copy
    (calibration.gloo_steps._resume_bound): the demo's closed form with bucket 0's end
    inside the first gap resumes at 12425 as before."""
    step, colls, main_ev, copies = _two_buckets(6700, 12398)
    rec = fit_gloo_step(step, colls, np.array([0]), np.array([1000 * US]), (), main_ev, copies[:2])
    assert rec.resume_ns == 12425 * US
