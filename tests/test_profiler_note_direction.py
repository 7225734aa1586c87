"""The note on a 2-thread step whose profiler cost is not removed says which way the
unprofiled steps went, and where they were slower (which the profiler's cost cannot make) it
is a warning, not a note: the model follows the faster window (issue 10, fresh13 2026-12-07:
"unprofiled ran ×1.306" said no direction, among the notes with no effect on the step, where
the model's replay ran 5.7 % faster than the setting's re-measured runs)."""
import gzip
from pathlib import Path

from stepsim.calibration.profiler_overhead import team_overhead_note
from stepsim.calibration.sidecar import load_sidecar

DATA = Path(__file__).parent / "data"


def test_slower_unprofiled_steps_are_warned_with_their_direction(tmp_path):
    p = tmp_path / "sidecar.json"
    p.write_text(gzip.open(DATA / "fresh13_cnn2t_nw1_probe2.sidecar.json.gz", "rt").read())
    note = team_overhead_note(load_sidecar(p))
    rec = note.record
    assert not rec.noted
    assert rec.summary.endswith("unprofiled slower, ×1.306")
    assert "(310.3 ms median over 43 unprofiled steps, 237.6 ms over 8 profiled" in rec.text
    assert "can run faster than the run's unprofiled steps" in rec.text
