"""What the command line's process does before and after its verb (speed20): importing
:mod:`stepsim.cli` pauses the garbage collector while the API loads, freezes what it made and
restores the collector as it found it; a sweep without a terminal loads neither YAML (its axis
values are JSON scalars) nor rich's progress bar. Each in a fresh interpreter, since this
one has imported them already."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODEL = Path(__file__).resolve().parent / "data" / "ddp_demo_model.json"


def _python(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()[-1]


def test_importing_the_cli_restores_the_collector_and_freezes_the_modules():
    assert _python("import gc, stepsim.cli; print(gc.isenabled(), gc.get_freeze_count() > 0)"
                   ) == "True True"
    assert _python("import gc; gc.disable(); import stepsim.cli; print(gc.isenabled())"
                   ) == "False"


def test_a_sweep_without_a_terminal_loads_no_yaml_and_no_progress_bar():
    code = ("import gc, sys\n"
            "from stepsim.cli import main\n"
            f"rc = main(['sweep', {str(MODEL)!r}, 'comm.bucket_cap_mb=1,25', '--steps', '2',\n"
            "           '--warmup', '1', '--jobs', '1', '--json'])\n"
            "print(rc, 'yaml' in sys.modules, 'rich.progress' in sys.modules, gc.isenabled())")
    assert _python(code) == "0 False False True"
