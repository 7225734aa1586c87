"""The plain demo calibrates from the least loaded of its calibration setting's runs
(demo.calibration_run), not from the first: a new user's demo calibrated on a run whose
threads held 57 % of their cores while three later runs held 99-100 %, and scored 0 of 4."""
from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from stepsim.demo.calibration_run import QUIET_HELD, calibration_run, choose_run, why_chosen

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("held, want", [
    ([1.0, 0.99, 1.002], 0),                  # the first quiet run: the capture planned first
    ([0.566, 0.948, 0.566, 0.556, 1.001, 0.553, 0.992, 1.001], 4),   # newuser3's demo
    ([0.846, 0.538, 0.875, 0.663, 0.992, 0.957, 1.002, 1.001], 4),   # held 0.99 is quiet
    ([0.6, 0.9, 0.95, 0.9], 2),               # none quiet: the most held
    ([0.9, 0.95, 0.95], 1),                   # a tie among the loaded: the earlier
    ([None, 0.7, None], 1),                   # not measured counts below any measured run
    ([None, None], 0),                        # nothing measured: the first, as before
    ([QUIET_HELD - 1e-9, QUIET_HELD], 1),     # the bound is inclusive
])
def test_the_first_quiet_run_else_the_least_loaded(held, want):
    assert choose_run(held) == want


def test_the_line_says_which_run_and_why():
    held = [0.566, 0.948, 1.001]
    line = why_chosen(held, choose_run(held), ["nw1-r0", "nw1-r1", "nw1-r2"])
    assert line.startswith("calibrating from run 3 of 3 (nw1-r2), the least loaded")
    assert "held 100 % of the core time" in line and "the first run at 98 % or more" in line
    assert "each run's share 57 %, 95 %, 100 %" in line
    loaded = why_chosen([0.6, 0.9], 1, ["a", "b"])
    assert "held 90 %" in loaded and "every run ran under outside load" in loaded


def _runs(tmp_path: Path, names: list[str]) -> list[Path]:
    out = []
    for k, name in enumerate(names):
        d = tmp_path / f"nw0-r{k}"
        d.mkdir()
        (d / "sidecar.json").write_bytes(gzip.decompress(
            (DATA / f"{name}.sidecar.json.gz").read_bytes()))
        out.append(d)
    return out


def test_real_sidecars_are_read_as_calibration_reads_their_load(tmp_path):
    """Three captures of one CNN (torch's 2 threads, num_workers=0): loaded in its profiled
    window (held 0.661), calm but with its team's serial part (0.948), and loaded only after
    its window (1.000, the window quiet; 1.002 before an interval's runnable threads were
    bounded below by its CPU over its wall, :func:`calibration.outside_load.busy_spans`): the
    third is taken, the window being what the model is made of; without it the calm one, the
    most held."""
    runs = _runs(tmp_path, ["cnn2t_nw0_loaded_window", "cnn2t_nw0_calm", "cnn2t_nw0_loaded_tail"])
    k, held, line = calibration_run(runs)
    assert k == 2 and [round(h, 3) for h in held] == [0.661, 0.948, 1.0]
    assert "(nw0-r2)" in line and "each run's share 66 %, 95 %, 100 %" in line
    k, held, line = calibration_run(runs[:2])
    assert k == 1 and "every run ran under outside load" in line


class _Stop(Exception):
    pass


@pytest.mark.parametrize("probe", [None, 0, 2])
def test_every_calibration_run_records_the_probe_and_the_chosen_one_is_calibrated(
        tmp_path, monkeypatch, probe):
    """The probe rides on each calibration-setting run (the chosen run's own probe, against its
    own steps' speed, is what calibration fits, the choice known only after every run), on no
    other setting's; the runs handed to the choice are that setting's, in the plan's order."""
    import stepsim.demo.run as demo

    calls, seen = [], []

    def capture(num_workers, out, seed, probe=None):
        calls.append((num_workers, out.name, probe))

    def choose(runs):
        seen.extend(d.name for d in runs)
        raise _Stop

    monkeypatch.setattr(demo, "_capture", capture)
    monkeypatch.setattr(demo, "calibration_run", choose)
    with pytest.raises(_Stop):
        demo.run_demo(tmp_path / "d", quick=True, probe=probe)
    assert [c[0] for c in calls] == demo._plan(demo.QUICK_SETTINGS, 1,
                                               demo.QUICK_CALIBRATION_RUNS)
    assert all(p == (probe if s == demo.CALIBRATION_WORKERS else None) for s, _, p in calls)
    assert seen == ["nw1-r0", "nw1-r1"]
