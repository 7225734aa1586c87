"""The command line's stderr lines (warnings, ``wrote FILE``, errors) come after the stdout
lines printed before them, also where stdout is a pipe or a file (block-buffered, where stderr
is not): a log of both, or a tool that shows both, reads in the order things were said."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_warning_after_stdout_lines_comes_after_them_in_a_log():
    code = ("from stepsim.cli import _warn\n"
            "print('calibrated 6 steps'); print('replay of the calibrated baseline: ...')\n"
            "_warn(['the replay is off (see the warnings above)'])\n"
            "print('last')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120).stdout
    assert out.splitlines() == ["calibrated 6 steps", "replay of the calibrated baseline: ...",
                                "warning: the replay is off (see the warnings above)", "last"]
