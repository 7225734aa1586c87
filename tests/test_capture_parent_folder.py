"""A folder of capture folders given where one capture is meant (a fresh user's `stepsim
calibrate runs`, runs/ holding baseline/ and nw2/): the one-line refusal names the capture
folders and one to give, instead of only "holds no trace files"."""
from __future__ import annotations

from pathlib import Path

from stepsim.cli import main


def _captures(root: Path, names: list[str]) -> Path:
    runs = root / "runs"
    for n in names:
        (runs / n).mkdir(parents=True)
        (runs / n / "sidecar.json").write_text("{}")
        (runs / n / "trace.json.gz").write_bytes(b"")
    (runs / "notes").mkdir()                       # a folder without a capture: not named
    (runs / "notes" / "sidecar.json").write_text("{}")
    return runs


def _refusal(capsys, argv) -> str:
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1, err
    return err[0]


def test_calibrate_names_the_capture_folders(tmp_path, capsys):
    runs = _captures(tmp_path, ["nw2-a", "baseline"])
    line = _refusal(capsys, ["calibrate", str(runs), "-o", str(tmp_path / "m.json")])
    assert "holds no trace files" in line
    assert f"it holds capture folders (baseline, nw2-a), one run each: name one, e.g. " \
           f"{runs / 'baseline'}" in line
    assert not (tmp_path / "m.json").exists()


def test_many_capture_folders_are_counted(tmp_path, capsys):
    runs = _captures(tmp_path, [f"r{i}" for i in range(6)])
    line = _refusal(capsys, ["calibrate", str(runs), "-o", str(tmp_path / "m.json")])
    assert "(r0, r1, r2, r3, ... (6 in all))" in line


def test_an_empty_folder_gets_no_hint(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    line = _refusal(capsys, ["calibrate", str(tmp_path / "empty"), "-o", str(tmp_path / "m.json")])
    assert "holds no trace files" in line and "capture folders" not in line
