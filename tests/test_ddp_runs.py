"""The DDP demo calibrates from the profiled runs of the defaults that ran without outside
load (:mod:`calibration.ddp_runs`): a run whose cores or CPU speed are past LOAD_WARN off the
runs' median is left out and said, the first quiet run is the capture."""
from __future__ import annotations

import pytest

from stepsim.calibration.ddp_runs import off_runs


def test_a_run_past_the_bound_against_the_runs_median_is_off():
    """Closed form, the 11:02 demo's speeds (capture 1.0, replicates 1.047, 1.061, 1.535):
    median 1.054, so 1.535 is 1.456x it, past 1.10; the 10:04 demo's shares (capture 0.52
    against 0.84-0.87): median 0.84, 0.84 / 0.52 = 1.61x. Within 10 % is not off; a run
    faster than the median or holding more cores is not load; two runs cannot say."""
    assert list(off_runs([None] * 4, [1.0, 1.047, 1.061, 1.535])) == [3]
    assert "1.46x the runs' median" in off_runs([None] * 4, [1.0, 1.047, 1.061, 1.535])[3]
    shares = [0.521, 0.837, 0.866, 0.842]
    off = off_runs(shares, [1.0, 0.992, 1.0, 0.981])
    assert list(off) == [0] and "held 0.52 of a core" in off[0]
    assert off_runs([0.80, 0.84, 0.86, 0.95], [1.0, 0.95, 1.05, 1.09]) == {}
    assert off_runs([0.84, 0.85], [1.0, 1.5]) == {}
    # speeds 1.0, 1.0, 1.109 (median 1.0): 10.9 % over, off; 1.099: not
    assert list(off_runs([None] * 3, [1.0, 1.0, 1.109])) == [2]
    assert off_runs([None] * 3, [1.0, 1.0, 1.099]) == {}


torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from tests.conftest import later_run  # noqa: E402
from tests.test_gloo import _copy_capture, gloo_run  # noqa: E402,F401  (a real 2-rank job)


def _slower(factor):
    """A sidecar edit: every step's CPU (thread and process) and wall ``factor``x."""
    def edit(side):
        for s in side["steps"]:
            for k in ("cpu_us", "proc_cpu_us", "wall_us"):
                if s.get(k) is not None:
                    s[k] *= factor
    return edit


def test_the_demo_leaves_a_slowed_replicate_out_of_its_calibration(gloo_run, tmp_path):  # noqa: F811
    """Three replicates of the real job's capture, one whose every step took 1.5x the CPU
    time (the 11:02 demo's third replicate, 1.535x): the demo's score calibrates from the
    capture and the two others (speeds 1.0, 1.0, 1.0 against the capture: the same work),
    says why it left that one out, and the prediction is the quiet runs' (host.cpu_scale 1);
    the old demo calibrated from all four (cpu_scale exp(mean log) = 1.5^(1/4) = 1.107).
    A capture so slowed is left out the same way, and the first quiet replicate is the
    capture."""
    from stepsim.demo.ddp import SETTINGS, score

    src, _ = gloo_run
    out = tmp_path / "demo"
    _copy_capture(src, out / "capture")
    for k, f in enumerate([1.0, 1.0, 1.5]):
        _copy_capture(src, out / "replicates" / f"r{k}", edit_sidecar=lambda side, k=k, f=f: (
            _slower(f)(side), later_run(side, 6e7 * (k + 1))))
    rank = {"step_starts_us": [0.0, 20e3, 40e3, 60e3], "barrier_us": [1e3] * 3}
    runs = {f"{label}#{k}": [rank, rank] for label in SETTINGS for k in range(3)}
    model, pick, rows = score(out, runs, 3)
    assert pick.capture == out / "capture"
    assert pick.replicates == [out / "replicates" / "r0", out / "replicates" / "r1"]
    assert [p.name for p, _ in pick.left_out] == ["r2"]
    assert "1.50x the runs' median" in pick.left_out[0][1]
    assert model.host.speed_runs == pytest.approx([1.0, 1.0, 1.0])
    assert model.host.cpu_scale == pytest.approx(1.0)
    assert rows[0]["in_sample"] and not any(r.get("in_sample") for r in rows[1:])
    # the capture slowed instead: the first quiet replicate calibrates
    out2 = tmp_path / "demo2"
    _copy_capture(src, out2 / "capture", edit_sidecar=_slower(1.5))
    for k in range(3):
        _copy_capture(src, out2 / "replicates" / f"r{k}",
                      edit_sidecar=lambda side, k=k: later_run(side, 6e7 * (k + 1)))
    _, pick2, _ = score(out2, runs, 3)
    assert pick2.capture == out2 / "replicates" / "r0"
    assert [p.name for p, _ in pick2.left_out] == ["capture"]
