"""calibrate says, among its noted lines, that a capture calibrated without ``--replicate``
takes the host's run-to-run speed from a stated prior, and how to measure it, as the README
says it does (fresh11, 2026-12-07: the README said a missing replicate is "said in calibrate's
warnings"; nothing was, for the harness nor the callbacks)."""
from __future__ import annotations

from stepsim.api import calibrate
from stepsim.models.host_speed import HOST_NOISE_PRIOR
from tests.conftest import replicate_copy

SAID = "the host's run-to-run speed not measured (no --replicate)"


def test_a_capture_alone_is_told_to_replicate(cpu_run_nw0):
    said = [w for w in calibrate(cpu_run_nw0).model.meta.warnings if SAID in w]
    lo, hi = HOST_NOISE_PRIOR
    assert len(said) == 1 and f"a stated prior of {lo:g}–{hi:g}× (host.cpu_scale)" in said[0]
    assert said[0].endswith("stepsim calibrate RUN --replicate RUN2")


def test_a_replicated_capture_is_not(cpu_run_nw0, tmp_path):
    rep = replicate_copy(cpu_run_nw0, tmp_path / "rep", 1.05)
    warnings = calibrate(cpu_run_nw0, replicates=[rep]).model.meta.warnings
    assert not any(SAID in w for w in warnings)
