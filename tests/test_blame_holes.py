"""The critical path's holes charged together (models/blame_holes.py) give the same floats,
bit for bit and keys in the same order, as charging them one at a time with Blame.blame."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stepsim import api
from stepsim.models.blame import Blame, critical_path, device_paced
from stepsim.models.intervals import EPS_US
from stepsim.models.simulate import simulate

REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "reference"


def _one_at_a_time(bl: Blame, w0: float, w1: float, holes_in=None):
    """The holes as critical_path charged them before: one Blame.blame per hole."""
    runs = [r for r in bl.runs if bl.is_compute_task(r.task)]
    compute = sorted(runs, key=lambda r: r.start_us)
    n = len(compute)
    st = np.array([r.start_us for r in compute])
    en = np.array([r.end_us for r in compute])
    inside = (en > w0) & (st < w1) & (en > st)
    from stepsim.models.intervals import merge_arrays
    union = merge_arrays(np.maximum(st[inside], w0), np.minimum(en[inside], w1))
    g0s = np.array([w0] + [e for _, e in union])
    g1s = np.array([s for s, _ in union] + [w1])
    gap = g1s - g0s > EPS_US
    g0s, g1s = g0s[gap], g1s[gap]
    js = np.searchsorted(st, g1s - EPS_US, side="left")
    bs = np.minimum(g1s, st[np.minimum(js, max(n - 1, 0))]) if n else g1s
    h0, h1 = holes_in if holes_in is not None else (-math.inf, math.inf)
    holes = []
    for g0, g1, j, b in zip(g0s.tolist(), g1s.tolist(), js.tolist(), bs.tolist()):
        before = dict(bl.acc)
        bl.blame(("start", compute[j], g0, b) if j < n else ("host", None, g0, g1))
        if h0 <= g0 < h1:
            holes.append((g0, g1 - g0, {k: v - before.get(k, 0.0) for k, v in bl.acc.items()
                                        if v - before.get(k, 0.0) > EPS_US}))
    return list(bl.acc.items()), holes


@pytest.mark.parametrize("name", ["unhealthy_step", "straggler"])
def test_holes_charged_together_match_one_at_a_time(name):
    m = api.load_model(str(REFERENCE / f"{name}.yaml"))
    r = simulate(m, steps=12, warmup=2, keep="all")
    for rank in r.ranks[:2]:
        w0, w1 = r.rank_window_us(rank)
        paced = device_paced(r, rank)
        scarce, _, gap, holes = critical_path(Blame(r, rank), w0, w1, paced)
        if scarce != "compute":
            continue
        acc, ref = _one_at_a_time(Blame(r, rank), w0, w1)
        assert list(gap.items()) == acc   # same keys, same order, same floats
        assert [(h.start_us, h.dur_us, list(h.causes.items())) for h in holes] == [
            (a, d, list(c.items())) for a, d, c in ref]
        assert len(holes) > 4
        mid = (w0 + w1) / 2   # only the holes of the second half kept
        _, _, gap2, half = critical_path(Blame(r, rank), w0, w1, paced, holes_in=(mid, w1))
        acc2, ref2 = _one_at_a_time(Blame(r, rank), w0, w1, (mid, w1))
        assert list(gap2.items()) == acc2
        assert [(h.start_us, h.dur_us, h.causes) for h in half] == ref2
        assert 0 < len(half) < len(holes)


def test_holes_after_a_sync_wait_charged_together(monkeypatch):
    """ResNet-50 (V100) as calibrated: each step's first hole (the host loading the batch)
    holds pageable-copy waits followed to the device. They are charged with the other holes
    (``blame_holes._follow``: none left to the one-hole-at-a-time path; with the runs held as
    columns, ``keep="brief"``, with numpy, none the scalar way), bit for bit as Blame.blame
    charges them one hole at a time."""
    import stepsim.models.blame_holes as bh
    from stepsim.fit import calibrate_gpu
    from stepsim.scenarios.transforms import SetOp, apply_ops
    from tests.conftest import shared_traces

    trace = (shared_traces() / "kineto/34d6ad53_rec2021-01-11/resnet50_num_workers_0"
             / "worker0.pt.trace.json.gz")
    m = calibrate_gpu(trace)
    seen = {"followed": 0, "scalar": 0, "slow": 0}
    follow, scalar, total = bh._follow, bh._follow_scalar, bh._total

    def spy_follow(bl, ch, fin, slow, hid, *rest):
        seen["followed"] += len(hid)
        return follow(bl, ch, fin, slow, hid, *rest)

    def spy_scalar(bl, ch, fin, slow, hid, *rest):
        seen["scalar"] += len(hid)
        return scalar(bl, ch, fin, slow, hid, *rest)

    def spy_total(bl, ch, slow, *rest):
        seen["slow"] += int(slow.sum())
        return total(bl, ch, slow, *rest)

    monkeypatch.setattr(bh, "_follow", spy_follow)
    monkeypatch.setattr(bh, "_follow_scalar", spy_scalar)
    monkeypatch.setattr(bh, "_total", spy_total)
    for keep in ("brief", "all"):
        for ops in ([SetOp(path="device.gap_scale", value=1.3)],
                    [SetOp(path="loader.num_workers", value=2)]):
            seen.update(followed=0, scalar=0)
            r = simulate(apply_ops(m, ops), steps=20, warmup=3, seed=0, keep=keep)
            w0, w1 = r.rank_window_us(0)
            scarce, _, gap, holes = critical_path(Blame(r, 0), w0, w1, device_paced(r, 0))
            assert scarce == "compute"
            acc, ref = _one_at_a_time(Blame(r, 0), w0, w1)
            assert list(gap.items()) == acc
            assert [(h.start_us, h.dur_us, list(h.causes.items())) for h in holes] == [
                (a, d, list(c.items())) for a, d, c in ref]
            assert seen["followed"] >= 20 and seen["slow"] == 0, seen
            assert seen["scalar"] == (0 if keep == "brief" else seen["followed"]), seen
