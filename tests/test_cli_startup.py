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


def test_main_imports_the_parameter_classes_from_a_shallow_stack():
    # speed23: pydantic_core's schema module, imported at the end of a verb's chain of nested
    # imports (101 frames deep on a sweep before), crossed a 16 kB frame-stack chunk of
    # CPython 3.11 thousands of times (an mmap and a munmap each); main imports it first
    code = ("import sys\n"
            "depths = []\n"
            "class Finder:\n"
            "    def find_spec(self, name, path, target=None):\n"
            "        if name == 'pydantic_core.core_schema':\n"
            "            f, n = sys._getframe(), 0\n"
            "            while f is not None:\n"
            "                f, n = f.f_back, n + 1\n"
            "            depths.append(n)\n"
            "sys.meta_path.insert(0, Finder())\n"
            "from stepsim.cli import main\n"
            f"rc = main(['sweep', {str(MODEL)!r}, 'comm.bucket_cap_mb=1,25', '--steps', '2',\n"
            "           '--warmup', '1', '--jobs', '1', '--json'])\n"
            "print(rc, depths)")
    rc, depths = _python(code).split(" ", 1)
    assert rc == "0"
    depths = eval(depths)
    assert len(depths) == 1 and depths[0] < 60, depths
