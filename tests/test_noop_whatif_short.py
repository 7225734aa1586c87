"""A what-if whose prediction is the baseline's prints one line, not both tables and the
noise paragraph (issue 10, fresh13 2026-12-07: ``--set loader.pin_memory=true`` on its CPU
model, which stepsim itself calls a no-op, printed the whole comparison for a 1.00x)."""
import gzip
from pathlib import Path

from tests.test_quirks import cli

DATA = Path(__file__).parent / "data"


def _model(tmp_path) -> Path:
    p = tmp_path / "model.json"
    p.write_text(gzip.open(DATA / "fresh13_cnn2t_nw1.model.json.gz", "rt").read())
    return p


def test_a_noop_whatif_is_one_line(tmp_path):
    rc, err, out = cli("whatif", str(_model(tmp_path)), "--set", "loader.pin_memory=true",
                       "--draws", "0", "--steps", "20", "--quiet")
    assert rc == 0
    assert "loader.pin_memory changes nothing here" in err + out
    assert "the baseline's prediction, unchanged" in out
    assert "run-to-run noise" not in out and "speed-up 1.00x;" not in out
    assert "baseline │" not in out


def test_a_real_change_keeps_the_table(tmp_path):
    rc, _, out = cli("whatif", str(_model(tmp_path)), "--set", "loader.num_workers=0",
                     "--draws", "0", "--steps", "20", "--quiet")
    assert rc == 0 and "unchanged" not in out and "speed-up" in out
