"""Bad input on session 11's new readings (break21): the measured per-run page-fault shares
``host.refault_share_runs`` (zero21, :mod:`models.run_share`), which the interval's draws
centre on their own mean whatever the point ``host.refault_share`` says. A point beside runs
of another mean (a hand edit, or a ``--set`` of either) drew the interval around the runs
while the point sat elsewhere: a silent wrong answer. Such a file is now refused (one line,
exit 2, the file named and unchanged), ``--set host.refault_share`` drops the old value's
runs (so a saved what-if reloads), and a ``--set`` of the runs alone is refused."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from stepsim.models.params import StepModel, load_model
from stepsim.scenarios.transforms import set_path
from tests.test_quirks import cli, one_line_error

DATA = Path(__file__).parent / "data"
RUNS = [0.48, 0.42, 0.29, 0.49, 0.03, 0.44, 0.42, 0.03]
"""The 8 calibration runs' shares of 2026-12-07's probe demo (main20-probe-103954)."""


def _with_runs(tmp_path: Path, share: float, runs: list[float]) -> Path:
    data = json.loads((DATA / "ddp_demo_model.json").read_text())
    data["host"].update({"refault_share": share, "refault_share_range": [0.0, 1.0],
                         "refault_share_runs": runs})
    p = tmp_path / "m.json"
    p.write_text(json.dumps(data))
    return p


def test_runs_of_the_point_s_mean_load(tmp_path):
    """The calibration's own record: the point is the runs' mean."""
    p = _with_runs(tmp_path, float(np.mean(RUNS)), RUNS)
    assert load_model(p).host.refault_share_runs == RUNS


@pytest.mark.parametrize("share,runs", [(0.95, RUNS), (0.5, [0.4]), (0.0, [0.3] * 5000)])
def test_a_point_away_from_its_runs_mean_is_one_line_naming_it(tmp_path, share, runs):
    p = _with_runs(tmp_path, share, runs)
    before = hashlib.md5(p.read_bytes()).hexdigest()
    rc, err, _ = cli("whatif", p, "--set", "loader.num_workers=1", "--steps", "4",
                     "--draws", "0")
    one_line_error(rc, err, str(p), "host.refault_share_runs", "host.refault_share")
    assert hashlib.md5(p.read_bytes()).hexdigest() == before


def test_setting_the_share_drops_the_old_value_s_runs(tmp_path):
    p = _with_runs(tmp_path, float(np.mean(RUNS)), RUNS)
    model = load_model(p)
    moved = set_path(model, "host.refault_share", 0.9)
    assert moved.host.refault_share == 0.9 and moved.host.refault_share_runs == []
    out = tmp_path / "saved.json"
    rc, err, _ = cli("whatif", p, "--set", "host.refault_share=0.9", "--steps", "4",
                     "--draws", "0", "--save-model", out)
    assert rc == 0, err
    assert load_model(out).host.refault_share == 0.9   # the saved what-if reloads
    assert isinstance(model, StepModel) and model.host.refault_share_runs == RUNS


def test_a_set_of_the_runs_alone_is_refused(tmp_path):
    p = _with_runs(tmp_path, float(np.mean(RUNS)), RUNS)
    rc, err, _ = cli("whatif", p, "--set", "host.refault_share_runs=[0.9,0.95]", "--steps",
                     "4", "--draws", "0")
    one_line_error(rc, err, "host.refault_share_runs")


@pytest.mark.parametrize("bad", [0.0, -5.0, float("nan"), float("inf")])
def test_an_enqueue_wall_that_cannot_be_its_cost_is_dropped_and_counted(bad):
    """ddp21's own enqueue cost is each step's cheapest enqueue wall: a 0 µs (or negative,
    NaN, inf) wall made its step's cheapest 0 (or NaN) and pulled the median over the steps
    down with it (a real demo capture with 0 µs in 8 of 20 steps: 56 µs where its walls gave
    129). It is dropped from the cost and counted in a warning."""
    from stepsim.calibration.gloo_preempt import own_enqueue_us

    warnings: list[str] = []
    walls = [[bad, 50.0], [bad, 60.0], [70.0, 300.0], [bad]]
    assert own_enqueue_us(walls, warnings) == 60.0
    assert len(warnings) == 1 and warnings[0].startswith("3 all-reduce enqueue wall(s)")
    assert own_enqueue_us([[bad], [bad]], []) is None
