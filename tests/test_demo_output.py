"""The demo's output as a user reads it: progress lines that reach a pipe as each step starts
(`stepsim demo | tee log`), and a last line that names the calibrated model and a command to
ask it a what-if. Unit-level: no capture runs."""
from __future__ import annotations

import io

import pytest

from rich.console import Console

from stepsim.demo.progress import Steps
from stepsim.demo.run import next_steps


class _Pipe(io.StringIO):
    """A non-terminal stream that records what had reached it at each flush."""

    def __init__(self):
        super().__init__()
        self.flushed: list[str] = []

    def flush(self):
        self.flushed.append(self.getvalue())


def test_progress_reaches_a_pipe_as_each_step_starts():
    pipe = _Pipe()
    console = Console(file=pipe, width=120)
    assert not console.is_terminal
    seen = []
    with Steps(console, 3, "captured") as steps:
        for k in range(3):
            steps.start(f"capturing num_workers={k} (run 1)")
            seen.append(pipe.flushed[-1] if pipe.flushed else "")   # flushed before the step
            steps.advance()
    for k, text in enumerate(seen):
        lines = text.splitlines()
        assert len(lines) == k + 1                      # this step's line and the ones before
        assert lines[-1].startswith(f"[{k + 1}/3] capturing num_workers={k} (run 1) (")
    assert pipe.getvalue().splitlines()[-1].startswith("captured (")


def test_the_demo_names_its_model_and_a_follow_up_command(tmp_path):
    path = tmp_path / "stepsim-demo" / "model.json"
    lines = next_steps(path)
    assert lines[0] == f"calibrated model: {path}"
    assert lines[1].endswith(f"stepsim whatif {path} --set loader.num_workers=4")


def test_the_follow_up_command_names_the_venvs_stepsim_when_path_lacks_it(tmp_path, monkeypatch):
    """A fresh user ran the demo as ``.venv/bin/stepsim demo`` without activating the venv: the
    printed ``stepsim whatif ...`` failed with "command not found"."""
    import sys
    from pathlib import Path

    here = Path(sys.executable).parent / "stepsim"
    if not here.is_file():
        pytest.skip(f"no stepsim script beside {sys.executable} (not an installed venv)")
    monkeypatch.setenv("PATH", str(tmp_path))
    line = next_steps(tmp_path / "model.json")[1]
    assert line.startswith(f"ask it a what-if: {here} whatif ")
