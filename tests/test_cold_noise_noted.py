"""The cold-resume probe's "cheaper after a pause: taken as no extra CPU (noise)" lines change
nothing on the step (the model takes 0): they are noted, printed one line each under "noted,
no effect on the step", not as full warnings (fresh14: two to five such lines a calibrate)."""
from __future__ import annotations

from stepsim.calibration.gloo_cold import _at_least_0
from stepsim.warning_order import ranked


def test_a_cheaper_resume_is_noted_not_warned():
    warnings: list[str] = []
    assert _at_least_0(-590.0, "590 µs", "optimizer", 10_000.0, warnings) == 0.0
    assert "taken as no extra CPU (noise)" in warnings[0]
    assert warnings[0].record.noted
    assert all(r.noted for r in ranked(warnings))
    assert _at_least_0(12.0, "-", "optimizer", 10_000.0, warnings) == 12.0 and len(warnings) == 1
