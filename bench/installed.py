"""The environment an installed stepsim runs in, for a bench's subprocesses: its modules'
bytecode compiled once (``pip install`` compiles it), not again in every timed run.

Here ``PYTHONDONTWRITEBYTECODE=1`` is set and the checkout has no ``__pycache__``, so every
``python -m stepsim`` compiles the modules it imports from source: about 0.1 s of a
``calibrate`` and 0.2 s of a ``sweep``'s main process (81 modules, measured 2026-12-06), a cost
no installed copy pays. :func:`installed_env` compiles them into a cache under /tmp
(``PYTHONPYCACHEPREFIX``), leaving the checkout as it is.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def installed_env(cache: Path) -> dict[str, str]:
    """``os.environ`` with bytecode read from (and written to) ``cache / "pycache"``, the
    ``stepsim`` package found on the path compiled into it first."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache / "pycache")
    spec = importlib.util.find_spec("stepsim")
    if spec is not None and spec.submodule_search_locations:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"[/\\]tests[/\\]",
                        *spec.submodule_search_locations], env=env, check=False,
                       capture_output=True)
    return env
