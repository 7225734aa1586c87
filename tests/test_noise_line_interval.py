"""whatif's host-noise line says what its ±% is of beside the interval: fresh8's whatif
(2026-12-07) printed P10–P90 141–1027 ms (7.3x) and "within this host's run-to-run noise
(±26 %)", two statements that read as disagreeing. The noise compares two runs' host speed;
the interval is of one run's mean step, every source drawn (the host speed among them)."""
from __future__ import annotations

import json

from stepsim.report.pred_text import noise_line
from tests.test_quirks import cli
from tests.test_whatif_host_noise import _model


def test_the_line_names_each_ones_subject():
    noise = {"host_noise_pct": 26.0, "host_noise_source": "2 measured runs"}
    line = noise_line("the predicted change (0.98x) is", noise, (141_100.0, 1_026_700.0))
    assert line.startswith("the predicted change (0.98x) is within this host's run-to-run noise")
    assert ("the ±26 % is the host's speed alone, one source of the interval "
            "(141.1–1026.7 ms, 7.3x), which is of one run's mean step") in line
    assert "\n" not in line
    assert noise_line("x is", noise) == noise_line("x is", noise, None)   # no interval: as before


def test_whatif_prints_the_interval_it_speaks_of(tmp_path):
    from stepsim.models.params import save_model

    path = tmp_path / "m.json"
    save_model(_model([0.9955, 0.8584]), path)
    common = ("--draws", "8", "--steps", "40", "--warmup", "5", "--jobs", "1", "--seed", "3",
              "--set", "loader.produce.mean_us=10500")
    rc, err, text = cli("whatif", path, *common)
    assert rc == 0, err
    rc, err, doc = cli("whatif", path, *common, "--json")
    doc, text = json.loads(doc), " ".join(text.split())
    assert doc["within_host_noise"] is True
    lo, hi = doc["baseline"]["p10_step_ms"], doc["baseline"]["p90_step_ms"]
    assert f"one source of the interval ({lo:.1f}–{hi:.1f} ms, {hi / lo:.1f}x)" in text, text
