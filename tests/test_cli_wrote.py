"""Every figure or trace a verb writes is named in a ``wrote FILE`` line on stderr (stdout keeps
``--json``), as ``report`` names its file."""
import json
from pathlib import Path

from tests.conftest import run_cli

MODEL = Path(__file__).resolve().parents[1] / "scenarios" / "reference" / "input_pipeline_a.yaml"


def test_plot_and_chrome_trace_say_wrote(tmp_path):
    png, ct = tmp_path / "lanes.png", tmp_path / "sim.json"
    r = run_cli("simulate", str(MODEL), "--plot", str(png), "--chrome-trace", str(ct),
                "--steps", "10", "--warmup", "5", "--json")
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)
    assert f"wrote {png}" in r.stderr and f"wrote {ct}" in r.stderr
    cmp = tmp_path / "cmp.png"
    r = run_cli("whatif", str(MODEL), "--set", "loader.num_workers=2", "--compare", str(cmp),
                "--steps", "10", "--warmup", "5", "--draws", "0")
    assert r.returncode == 0, r.stderr
    assert f"wrote {cmp}" in r.stderr
